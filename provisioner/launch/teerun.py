"""torchrun whose `--tee` passes each worker's line on as it is written: what a launched container runs.

    python -m provisioner.launch.teerun ARGS        (the same ARGS as `torchrun ARGS`)

With `--tee`, torchrun's workers write to log files and a tail thread per file
copies new lines to the console, with the rank prefix. torch's tail
(tail_log.tail_logfile) sleeps 0.1 s whenever it finds nothing new, and
torchrun offers no option for it, so every worker line, the first step's
included, reached the user up to 0.1 s late, about 0.05 s on average.

Here each tail thread waits on an inotify watch of its file instead: it wakes
when the worker writes, and otherwise only every FINISH_CHECK_S (torch's own
interval) to see whether the workers have ended, so an idle tail costs no more
CPU than torch's. A line that comes in two writes (print under
PYTHONUNBUFFERED writes the text, then the newline) is passed on whole; a
piece still without its newline after PARTIAL_S is passed on as it is, as
torch would. The file is read as torch reads it (universal newlines: a
progress bar's carriage return ends a line). Where inotify cannot be had, the
tail polls every POLL_S, whatever interval_sec torch passes. Everything else
is torchrun's own main(); a torch whose tail is shaped otherwise gets torchrun
unchanged.

Images built by this project say they carry this module (the label
org.provision.launcher, provisioner/image/labels.py); `provision launch` uses
it only then (provisioner/devices/torchrun.py) and runs plain `torchrun` in any
other image. torch is imported only when the module runs.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

# How often an idle watched tail looks whether its workers have ended: torch's own tail interval, so idle
# tails cost what torch's do (and a finished run's tails end within it, as torch's do).
FINISH_CHECK_S = 0.1
# How long a piece of a line waits for the rest of it before it is passed on without it.
PARTIAL_S = 0.02
# The poll where there is no inotify, and the wait for a log file to appear.
POLL_S = 0.02

_IN_MODIFY = 0x2
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
# The arguments torch's TailLog passes to tail_logfile (older releases pass the first five, without the filter).
_TAIL_ARGS = ("header", "file", "dst", "finished", "interval_sec", "log_line_filter")
_libc: Any = None


class Watch:
    """An inotify watch on the writes to one file."""

    def __init__(self, fd: int):
        import select

        self.fd = fd
        self._poller = select.poll()
        self._poller.register(fd, select.POLLIN)

    @classmethod
    def of(cls, path: str) -> Watch | None:
        """A watch on `path`; None where inotify cannot be had (not Linux, no libc symbol, no watches left)."""
        global _libc
        try:
            import ctypes

            if _libc is None:
                _libc = ctypes.CDLL(None, use_errno=True)
            fd = _libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None
        if _libc.inotify_add_watch(fd, os.fsencode(path), _IN_MODIFY) < 0:
            os.close(fd)
            return None
        return cls(fd)

    def wait(self, timeout: float) -> bool:
        """Until the file is written to (True) or `timeout` seconds pass (False); the events are consumed."""
        if not self._poller.poll(int(timeout * 1000)):
            return False
        try:
            while os.read(self.fd, 4096):
                pass
        except BlockingIOError:
            pass
        return True

    def close(self) -> None:
        os.close(self.fd)


def tail_logfile(header: str, file: str, dst: Any, finished: Any, interval_sec: float = POLL_S,
                 log_line_filter: Any = None) -> None:
    """torch's tail_logfile, with the same arguments: copy `file`'s lines to `dst` after `header` until
    `finished` is set and the file is read to its end; a line is passed on when it is written."""
    while not os.path.exists(file):
        if finished.is_set():
            return
        time.sleep(POLL_S)
    watch = Watch.of(file)

    def emit(text: str) -> None:
        if log_line_filter is None or log_line_filter(text):
            dst.write(f"{header}{text}")

    try:
        with open(file, errors="replace") as fp:
            pending, waited = "", False
            while True:
                line = fp.readline()
                if line:
                    pending, waited = pending + line, False
                    if pending.endswith("\n"):
                        emit(pending)
                        pending = ""
                    continue
                if finished.is_set():
                    if pending:
                        emit(pending)
                    return
                if pending and waited:  # nothing more came: pass the piece on as it is
                    emit(pending)
                    pending = ""
                waited = True
                if watch is None:
                    time.sleep(POLL_S)
                else:
                    watch.wait(PARTIAL_S if pending else FINISH_CHECK_S)
    finally:
        if watch is not None:
            watch.close()


def patch_tail() -> bool:
    """Make torchrun's log tails this module's tail_logfile; False (nothing changed) if torch's differs."""
    try:
        from torch.distributed.elastic.multiprocessing import tail_log
    except ImportError:
        return False
    theirs = getattr(tail_log, "tail_logfile", None)
    start = getattr(getattr(tail_log, "TailLog", None), "start", None)
    code = getattr(theirs, "__code__", None)
    if code is None or "tail_logfile" not in getattr(getattr(start, "__code__", None), "co_names", ()):
        return False
    names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    if names not in (_TAIL_ARGS, _TAIL_ARGS[:-1]):
        return False
    tail_log.tail_logfile = tail_logfile
    return True


def main() -> int | None:
    patch_tail()
    from torch.distributed.run import main as torchrun_main

    return torchrun_main()


if __name__ == "__main__":
    sys.exit(main())
