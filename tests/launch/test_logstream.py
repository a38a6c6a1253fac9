"""Log chunks to lines: frames that split lines and characters, bad bytes, the tail, error lines."""

from __future__ import annotations

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
