"""The quick-tail torchrun (provisioner/launch/teerun.py): it changes the installed torch's tail interval and
nothing else, and under it real workers' lines reach the console with their rank prefix within ~0.02 s (plain
torchrun: up to 0.1 s)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

import pytest

from provisioner.launch import teerun

tail_log = pytest.importorskip("torch.distributed.elastic.multiprocessing.tail_log")
from torch.distributed.elastic.multiprocessing import api  # noqa: E402

# A worker that prints its rank and the wall-clock time, 20 lines 37 ms apart (out of step with any poll).
WORKER = """
import os, sys, time
for i in range(20):
    print(f"line {i} {os.environ['RANK']} {time.time():.6f}", flush=True)
    time.sleep(0.037)
"""


def test_the_tail_interval_of_this_torch_is_changed(monkeypatch, tmp_path):
    monkeypatch.setattr(api, "TailLog", tail_log.TailLog)
    assert teerun.patch_tail_interval(0.02)
    made = api.TailLog("t", {0: str(tmp_path / "0.log")}, sys.stdout)
    assert made._interval_sec == 0.02 and isinstance(made, tail_log.TailLog)
    assert api.TailLog("t", {}, sys.stdout, interval_sec=0.5)._interval_sec == 0.5  # an explicit value stays


def test_a_torch_shaped_otherwise_is_left_as_it_is(monkeypatch):
    class Other:
        pass

    monkeypatch.setattr(api, "TailLog", Other)
    assert not teerun.patch_tail_interval()
    assert api.TailLog is Other


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
    # Plain torchrun's 0.1 s poll gives a mean near 0.05 s (uniform over 0..0.1 s); 0.02 s gives ~0.01 s.
    assert statistics.mean(delays) < 0.03, sorted(delays)
