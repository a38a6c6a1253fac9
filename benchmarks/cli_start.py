"""CLI start-up cost: `provision resolve --card 300T-A2 --json` vs `python3 -c pass`.

Both run side by side, interleaved, with the same interpreter; prints the
medians and their ratio (goal: <= 3x). The package is byte-compiled and the
matrix cache warmed first, as they are after installation and the first run.

`provision resolve` reads the host it runs on (a stat per driver directory where
there is no Ascend driver); two more rows show what that costs: the same call
with --for-host none (no host read), and a resolve on a simulated driver host
(the fixture fit-800ta2-24.1rc3 with a boot id and its saved npu-smi output, so the
host's reading comes from the per-boot cache after the first call, as on a real host).

    python benchmarks/cli_start.py [--runs 30]
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
    no_host = resolve + ["--for-host", "none"]
    baseline = [sys.executable, "-c", "pass"]
    tmp = tempfile.TemporaryDirectory(prefix="provision-bench-")
    sim = simulated_host(Path(tmp.name))
    on_host = None
    if sim:
        from provisioner.host import fakehost

        # --root never runs the tree's own npu-smi: its saved output comes in as a user would pass it.
        smi = [a for f in fakehost.saved_npu_smi(Path(sim)) for a in ("--npu-smi-output", str(f))]
        on_host = provision_cmd() + ["resolve", "--root", sim, *smi, "--json"]
    # Byte-compile the package as `pip install` does (an editable checkout under
    # PYTHONDONTWRITEBYTECODE would otherwise recompile every module on every start).
    import compileall

    import provisioner

    compileall.compile_dir(os.path.dirname(provisioner.__file__), quiet=1)
    for cmd in (resolve, no_host, on_host):  # warm the matrix and resolve caches (and npu-smi's reading)
        if cmd:
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_t, prov_t, none_t, host_t = [], [], [], []
    for _ in range(args.runs):
        base_t.append(timed(baseline))
        prov_t.append(timed(resolve))
        none_t.append(timed(no_host))
        if on_host:
            host_t.append(timed(on_host))
    b, p = statistics.median(base_t), statistics.median(prov_t)
    help_t = statistics.median(timed(provision_cmd() + ["--help"]) for _ in range(max(5, args.runs // 3)))
    print(f"python3 -c pass                                   median {b * 1000:7.1f} ms")
    print(f"provision resolve --card 300T-A2 --json           median {p * 1000:7.1f} ms")
    print(f"  the same with --for-host none (no host read)    median {statistics.median(none_t) * 1000:7.1f} ms")
    if host_t:
        h = statistics.median(host_t)
        print(f"provision resolve --root <24.1.rc3 host> --json   median {h * 1000:7.1f} ms  ({h / b:.2f}x)")
    print(f"provision --help                                  median {help_t * 1000:7.1f} ms")
    print(f"ratio resolve / python -c pass: {p / b:.2f}x (goal <= 3x)  [{os.cpu_count()} cpus, {args.runs} runs]")
    tmp.cleanup()
    return 0


def simulated_host(tmp: Path) -> str | None:
    """A copy of the fixture host fit-800ta2-24.1rc3 with a boot id under ``tmp``, or None outside a checkout."""
    tree = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hosts" / "fit-800ta2-24.1rc3" / "tree"
    if not tree.is_dir():
        return None
    root = tmp / "root"
    shutil.copytree(tree, root, symlinks=True)
    boot = root / "proc" / "sys" / "kernel" / "random"
    boot.mkdir(parents=True)
    (boot / "boot_id").write_text("benchmark-boot\n")
    return str(root)


if __name__ == "__main__":
    sys.exit(main())
