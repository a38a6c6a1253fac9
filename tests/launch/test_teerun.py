"""The quick-tail torchrun (provisioner/launch/teerun.py): its tail passes a line on when it is written (plain
torchrun's sleeps 0.1 s), whole, filtered as torch asks, with or without inotify, and wakes no more often than
torch's when idle; it replaces the installed torch's tail and nothing else, and under it real workers' lines
reach the console with their rank prefix."""

from __future__ import annotations

import io
import os
import statistics
import subprocess
import sys
import threading
import time

import pytest

from provisioner.launch import teerun

tail_log = pytest.importorskip("torch.distributed.elastic.multiprocessing.tail_log")

# A worker that prints its rank and the wall-clock time, 20 lines 37 ms apart (out of step with any poll).
WORKER = """
import os, sys, time
for i in range(20):
    print(f"line {i} {os.environ['RANK']} {time.time():.6f}", flush=True)
    time.sleep(0.037)
"""


class Sink(io.TextIOBase):
    def __init__(self):
        self.got: list[tuple[float, str]] = []

    def write(self, text):
        self.got.append((time.time(), text))
        return len(text)


def tail(tmp_path, writes, *, watch=True, monkeypatch=None, line_filter=None, settle=0.3):
    """Run teerun's tail_logfile over a file while `writes` (text, or a function that makes it when it is written;
    then seconds to sleep) go into it."""
    path = tmp_path / "0.log"
    path.write_text("")
    sink, finished = Sink(), threading.Event()
    if not watch:
        monkeypatch.setattr(teerun.Watch, "of", classmethod(lambda cls, p: None))
    kwargs = {} if line_filter is None else {"log_line_filter": line_filter}
    thread = threading.Thread(target=teerun.tail_logfile, args=("[r0]:", str(path), sink, finished, 0.1),
                              kwargs=kwargs)
    thread.start()
    time.sleep(0.05)
    with path.open("a") as out:
        for text, pause in writes:
            out.write(text() if callable(text) else text)
            out.flush()
            time.sleep(pause)
    time.sleep(settle)
    finished.set()
    thread.join(timeout=5)
    assert not thread.is_alive()
    return sink.got


def test_lines_arrive_as_they_are_written_with_the_header(tmp_path):
    got = tail(tmp_path, [(lambda i=i: f"{time.time():.6f} line {i}\n", 0.013) for i in range(20)])
    assert [text.split()[-1] for _, text in got] == [str(i) for i in range(20)]
    assert all(text.startswith("[r0]:") and text.endswith("\n") for _, text in got)
    delays = [at - float(text[5:].split()[0]) for at, text in got]
    # torch's tail sleeps 0.1 s (mean delay ~0.05 s) and a 20 ms poll gives ~0.01 s; a watch wakes on the write.
    assert statistics.median(delays) < 0.005, sorted(delays)


def test_a_line_written_in_two_pieces_arrives_whole_and_a_bare_piece_is_passed_on(tmp_path, monkeypatch):
    monkeypatch.setattr(teerun, "PARTIAL_S", 0.15)  # wide, so that a loaded machine cannot split the first line
    # print() under PYTHONUNBUFFERED writes the text, then the newline; a progress bar may write none for a while.
    got = tail(tmp_path, [("step 1", 0.002), ("\n", 0.01), ("50%", 0.5), (" done\n", 0.01)], settle=0.05)
    assert [text for _, text in got] == ["[r0]:step 1\n", "[r0]:50%", "[r0]: done\n"]


def test_without_inotify_it_polls_and_loses_nothing(tmp_path, monkeypatch):
    got = tail(tmp_path, [(f"l{i}\n", 0.003) for i in range(10)] + [("tail", 0)], watch=False,
               monkeypatch=monkeypatch)
    assert "".join(text for _, text in got) == "".join(f"[r0]:l{i}\n" for i in range(10)) + "[r0]:tail"


def test_the_filter_torch_passes_is_applied(tmp_path):
    got = tail(tmp_path, [("keep\n", 0), ("drop\n", 0)], line_filter=lambda line: line.startswith("keep"))
    assert [text for _, text in got] == ["[r0]:keep\n"]


def test_an_idle_tail_wakes_no_more_often_than_torchs(tmp_path, monkeypatch):
    waits = []
    real = teerun.Watch.wait
    monkeypatch.setattr(teerun.Watch, "wait", lambda self, timeout: waits.append(timeout) or real(self, timeout))
    tail(tmp_path, [], settle=1.0)
    # ~1.05 s idle: ~11 waits of 0.1 s, as torch's tail sleeps; a 20 ms poll would wake ~50 times
    assert teerun.FINISH_CHECK_S >= 0.1 and waits and set(waits) == {teerun.FINISH_CHECK_S} and len(waits) <= 1.5 / teerun.FINISH_CHECK_S


def test_the_tail_of_this_torch_is_replaced(monkeypatch):
    monkeypatch.setattr(tail_log, "tail_logfile", tail_log.tail_logfile)
    assert teerun.patch_tail()
    assert tail_log.tail_logfile is teerun.tail_logfile


def test_a_torch_shaped_otherwise_is_left_as_it_is(monkeypatch):
    def other(header, file, dst, finished, interval_sec, something_new):
        pass

    monkeypatch.setattr(tail_log, "tail_logfile", other)
    assert not teerun.patch_tail()
    assert tail_log.tail_logfile is other


@pytest.mark.slow
def test_worker_lines_arrive_within_the_tail_interval(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
           "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:"}
    proc = subprocess.Popen([sys.executable, "-m", teerun.__name__, "--nproc-per-node", "2", "--standalone",
                             "--tee", "3", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    delays, ranks = [], []
    assert proc.stdout is not None
    for line in proc.stdout:
        got = time.time()
        prefix, _, rest = line.partition(":")
        words = rest.split()
        if words[:1] == ["line"]:
            ranks.append((prefix, words[2]))
            delays.append(got - float(words[3]))
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.wait(timeout=120) == 0, err[-2000:]
    assert sorted(set(ranks)) == [("[rank0]", "0"), ("[rank1]", "1")] and len(ranks) == 40
    # Plain torchrun's 0.1 s poll gives a median near 0.05 s (uniform over 0..0.1 s); the watch a few ms at most
    # on a loaded machine (the workers' own start-up shares its two cores).
    assert statistics.median(delays) < 0.01, sorted(delays)
