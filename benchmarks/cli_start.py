"""CLI start-up cost: `provision resolve --card 300T-A2 --json` vs `python3 -c pass`.

Both run side by side, interleaved, with the same interpreter; prints the
medians and their ratio (goal: <= 3x). The package is byte-compiled and the
matrix cache warmed first, as they are after installation and the first run.

    python benchmarks/cli_start.py [--runs 30]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def provision_cmd() -> list[str]:
    script = Path(sys.executable).parent / "provision"
    if script.exists():
        return [str(script)]
    found = shutil.which("provision")
    return [found] if found else [sys.executable, "-m", "provisioner.cli"]


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    args = ap.parse_args()
    resolve = provision_cmd() + ["resolve", "--card", "300T-A2", "--json"]
    baseline = [sys.executable, "-c", "pass"]
    # Byte-compile the package as `pip install` does (an editable checkout under
    # PYTHONDONTWRITEBYTECODE would otherwise recompile every module on every start).
    import compileall

    import provisioner

    compileall.compile_dir(os.path.dirname(provisioner.__file__), quiet=1)
    subprocess.run(resolve, check=True, stdout=subprocess.DEVNULL)  # warm the matrix cache
    base_t, prov_t = [], []
    for _ in range(args.runs):
        base_t.append(timed(baseline))
        prov_t.append(timed(resolve))
    b, p = statistics.median(base_t), statistics.median(prov_t)
    help_t = statistics.median(timed(provision_cmd() + ["--help"]) for _ in range(max(5, args.runs // 3)))
    print(f"python3 -c pass                          median {b * 1000:7.1f} ms")
    print(f"provision resolve --card 300T-A2 --json  median {p * 1000:7.1f} ms")
    print(f"provision --help                         median {help_t * 1000:7.1f} ms")
    print(f"ratio resolve / python -c pass: {p / b:.2f}x (goal <= 3x)  [{os.cpu_count()} cpus, {args.runs} runs]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
