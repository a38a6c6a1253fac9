"""Audit speed: `provision audit --root <16-chip A3 fixture> --json`, wall time per run (goal < 0.5 s).

The fixture host (tests/fixtures/hosts/a3-16) is materialized into a temp dir
first, device nodes made with mknod (as root; otherwise the tree only). Each
run is a fresh process and runs the fixture's npu-smi, as a user's audit does.
Prints the first (cold matrix cache) run, the median of the warm runs, and
`python3 -c pass` as the baseline.

    python benchmarks/audit_speed.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL_S = 0.5


def provision_cmd() -> list[str]:
    script = Path(sys.executable).parent / "provision"
    return [str(script)] if script.exists() else [sys.executable, "-m", "provisioner.cli"]


def timed(cmd: list[str], env: dict) -> tuple[float, int]:
    start = time.perf_counter()
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    elapsed = time.perf_counter() - start
    if res.returncode not in (0, 1, 2) or res.stderr.strip():
        raise SystemExit(f"audit failed: {res.stderr.decode().strip()}")
    return elapsed, res.returncode


def materialize(tmp: Path) -> tuple[Path, Path, bool]:
    """The a3-16 fixture host under `tmp`: real device nodes as root (each run is a fresh `provision` process,
    which simulated nodes would not reach), else the tree alone."""
    sys.path.insert(0, str(REPO))
    from provisioner.host import fakehost
    from tests.helpers import hosts

    if os.geteuid() == 0:
        h = fakehost.materialize(hosts.FIXTURES / "a3-16", tmp, nodes="mknod")
        return h.root, h.dev_root, True
    root = tmp / "a3-16" / "root"
    shutil.copytree(hosts.FIXTURES / "a3-16" / "tree", root, symlinks=True)
    (tmp / "a3-16" / "dev").mkdir()
    return root, tmp / "a3-16" / "dev", False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp_s:
        tmp = Path(tmp_s)
        root, dev, nodes = materialize(tmp)
        env = dict(os.environ, PROVISION_CACHE=str(tmp / "cache"))  # cold first run
        cmd = provision_cmd() + ["audit", "--root", str(root), "--dev-root", str(dev), "--json"]
        cold, code = timed(cmd, env)
        warm = [timed(cmd, env)[0] for _ in range(args.runs)]
        base = [timed([sys.executable, "-c", "pass"], env)[0] for _ in range(args.runs)]
    med = statistics.median(warm)
    print(f"fixture a3-16: 16 chips, {'device nodes by mknod' if nodes else 'no device nodes (not root)'};"
          f" audit exit code {code}")
    print(f"python3 -c pass                                median {statistics.median(base) * 1000:7.1f} ms")
    print(f"provision audit --root a3-16 --json (cold)            {cold * 1000:7.1f} ms")
    print(f"provision audit --root a3-16 --json (warm)     median {med * 1000:7.1f} ms"
          f"  max {max(warm) * 1000:.1f} ms  [{args.runs} runs, {os.cpu_count()} cpus]")
    ok = med < GOAL_S and cold < GOAL_S
    print(f"goal < {GOAL_S * 1000:.0f} ms: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
