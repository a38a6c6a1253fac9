"""torchrun's --tee log tail: line delay and idle CPU, torch's own tail against teerun's watched tail.

torch's TailLog (one thread per worker stream) is run in this process three ways on the same files: with its
own tail_logfile at torch's 0.1 s interval (what plain torchrun does), at 20 ms, and with
provisioner.launch.teerun's tail_logfile. For each: the CPU this process uses while the streams are idle
(`resource.getrusage`, over --idle seconds), then the delay from a line's write (its own time stamp) to its
arrival at the console sink, for lines written 37 ms apart (out of step with any poll). Prints the figures and
the ratios against torch's own tail.

    python benchmarks/tail_latency.py [--streams 16] [--idle 8] [--lines 30]

16 streams are an 8-worker node's stdout and stderr. Needs torch (the CPU build is enough); no engine.
"""

from __future__ import annotations

import argparse
import io
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")


class Sink(io.TextIOBase):
    """The console: keeps each write with the time it arrived."""

    def __init__(self) -> None:
        self.got: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.got.append((time.time(), text))
        return len(text)


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(tail_log, interval: float, streams: int, idle: float, lines: int) -> tuple[float, list[float]]:
    """(idle CPU in % of one core, line delays in ms) for TailLog over `streams` files."""
    with tempfile.TemporaryDirectory(prefix="tail-") as tmp:
        files = {i: str(Path(tmp) / f"{i}.log") for i in range(streams)}
        for path in files.values():
            Path(path).touch()
        sink = Sink()
        tail = tail_log.TailLog("bench", files, sink, interval_sec=interval).start()
        time.sleep(0.5)
        c0, w0 = cpu_s(), time.time()
        time.sleep(idle)
        cpu = 100 * (cpu_s() - c0) / (time.time() - w0)
        with open(files[0], "a") as out:
            for _ in range(lines):
                out.write(f"{time.time():.6f}\n")
                out.flush()
                time.sleep(0.037)
        time.sleep(0.3)
        tail.stop()
    delays = [1000 * (at - float(text.rsplit(":", 1)[1])) for at, text in sink.got]
    if len(delays) != lines:
        raise SystemExit(f"{len(delays)} of {lines} lines arrived")
    return cpu, delays


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", type=int, default=16)
    ap.add_argument("--idle", type=float, default=8.0)
    ap.add_argument("--lines", type=int, default=30)
    args = ap.parse_args()
    from torch.distributed.elastic.multiprocessing import tail_log

    from provisioner.launch import teerun

    theirs = tail_log.tail_logfile
    rows = []
    for name, interval, fn in (("torch's tail, 0.1 s (torchrun)", 0.1, theirs), ("torch's tail, 20 ms", 0.02, theirs),
                               ("teerun's watched tail", 0.1, teerun.tail_logfile)):
        tail_log.tail_logfile = fn
        try:
            cpu, delays = measure(tail_log, interval, args.streams, args.idle, args.lines)
        finally:
            tail_log.tail_logfile = theirs
        rows.append((name, cpu, statistics.median(delays), max(delays)))
        print(f"{name:32} idle CPU {cpu:5.2f}% of one core ({args.streams} streams); line delay median "
              f"{rows[-1][2]:6.2f} ms, max {rows[-1][3]:6.2f} ms")
    base = rows[0]
    for name, cpu, median, _ in rows[1:]:
        print(f"{name}: line delay {median / base[2]:.3f}x, idle CPU {cpu / base[1]:.2f}x of torch's own tail")
    return 0


if __name__ == "__main__":
    sys.exit(main())
