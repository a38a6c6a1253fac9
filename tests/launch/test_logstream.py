"""Log chunks to lines: frames that split lines and characters, bad bytes, the tail, error lines."""

from __future__ import annotations

from pathlib import Path

from provisioner.launch import logstream


def test_lines_across_chunks_and_split_characters():
    s = logstream.LineSplitter()
    text = "[rank0]:größe 1\n[rank1]:€ 2\r\nlast".encode()
    out = []
    for i in range(len(text)):  # one byte at a time: every split point, inside characters too
        out += s.feed(text[i:i + 1])
    assert out == ["[rank0]:größe 1", "[rank1]:€ 2"]
    assert s.close() == ["last"]
    assert s.count == 3


def test_bad_bytes_are_replaced_not_fatal():
    s = logstream.LineSplitter()
    assert s.feed(b"ok \xff\xfe end\n") == ["ok \ufffd\ufffd end"]
    # a character cut off by the end of the stream
    assert s.feed("x€".encode()[:-1]) == []
    assert s.close() == ["x\ufffd"]


def test_carriage_returns_end_lines():
    s = logstream.LineSplitter()
    assert s.feed(b"10%\r20%\r") == ["10%"]  # a trailing \r may be half of \r\n
    assert s.feed(b"\n30%\r\n") == ["20%", "30%"]


def test_tail_keeps_the_last_lines():
    s = logstream.LineSplitter(tail=3)
    s.feed(b"".join(b"line %d\n" % i for i in range(10)))
    assert list(s.tail) == ["line 7", "line 8", "line 9"] and s.count == 10


def test_first_error_names_the_rank():
    lines = [
        "[rank0]:step 1 loss 2.0",
        "[rank2]:Traceback (most recent call last):",
        '[rank2]:  File "/w/train.py", line 3, in <module>',
        "[rank2]:RuntimeError: CUDA out of memory. Tried to allocate 2 GiB",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ]
    assert logstream.first_error(lines) == "rank 2: RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"
    # the worker's line wins over torchrun's summary even when it comes later
    assert logstream.first_error(lines[4:] + lines[:4]) == "rank 2: RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"
    assert logstream.first_error(lines[4:]) == "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"
    missing = ["[rank1]:/opt/venv/bin/python3.11: No module named provisioner.train", lines[4]]
    assert logstream.first_error(missing) == "rank 1: No module named provisioner.train"
    assert logstream.first_error(["Error handling is on", "[rank0]:no errors here"]) is None
    assert logstream.first_error(["KeyboardInterrupt"]) == "KeyboardInterrupt"
    assert logstream.ranks_seen(lines) == {0, 2}


def test_strip_rank():
    assert logstream.strip_rank("[rank12]:{}") == (12, "{}")
    assert logstream.strip_rank("plain") == (None, "plain")


STOPPED = (Path(__file__).resolve().parents[1] / "fixtures" / "torchrun" / "stopped-by-sigterm.log").read_text()


def test_an_intended_stop_hides_torchruns_signal_traceback_and_nothing_else():
    lines = STOPPED.splitlines()
    ready = [line for line in lines if "ready" in line]
    quiet = logstream.StopQuieter()
    assert quiet.feed(ready) == ready  # before the stop every line passes
    quiet.active = True
    rest = lines[len(ready):]
    shown = [out for i in range(0, len(rest), 3) for out in quiet.feed(rest[i:i + 3])]  # in pieces, as streamed
    assert shown == [] and quiet.close() == [] and quiet.dropped == len(rest)


def test_during_a_stop_other_errors_and_lines_still_show():
    quiet = logstream.StopQuieter()
    quiet.active = True
    failed_save = ["[rank0]:saving checkpoint", "[rank0]:Traceback (most recent call last):",
                   '[rank0]:  File "/w/train.py", line 9, in <module>', "[rank0]:    save()",
                   "[rank1]:Traceback (most recent call last):",  # interleaved: rank 1 stopped by the signal
                   "[rank0]:OSError: [Errno 28] No space left on device",
                   "[rank1]:  File \"/w/train.py\", line 3, in <module>", "[rank1]:KeyboardInterrupt"]
    assert quiet.feed(failed_save) == ["[rank0]:saving checkpoint", *failed_save[1:4], failed_save[5]]
    # Each part of a chained traceback is judged by its own exception line: the stop's part is held back,
    # an error raised while handling it shows.
    chained = ["Traceback (most recent call last):", "  File \"x\", line 1", "KeyboardInterrupt", "",
               "During handling of the above exception, another exception occurred:", "",
               "Traceback (most recent call last):", "  File \"x\", line 2", "RuntimeError: flush failed"]
    assert quiet.feed(chained) == chained[3:]
    cut = ["Traceback (most recent call last):", "  File \"x\", line 1"]  # killed before its end
    assert quiet.feed(cut) == [] and quiet.close() == cut
