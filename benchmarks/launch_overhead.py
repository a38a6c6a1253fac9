"""Launch overhead: time to the first training step, `provision launch` vs a hand-written `docker run … torchrun …`.

Both start the same image on the same simulated 2-chip host (mknod nodes with
/dev/null's numbers, driver files from a fixture tree, CPU) and run the same
job: torchrun with 2 workers that join a gloo group, all_reduce once and print
a marker at that first "step". Wall time runs from starting the command to
seeing the marker on its stdout. The runs are interleaved (the order flips each
round) after one untimed warm-up of each; prints the medians and their ratio
(goal: <= 1.05x). Needs root (mknod) and a running engine. Each round's two runs
are also compared with each other: the median of those paired ratios is less
moved by the machine's load drifting between rounds than the ratio of medians.
The ratio of the fastest runs is printed too.

    python benchmarks/launch_overhead.py [--runs 11] [--image TAG]

Without --image it uses the newest local `provision/pytorch` image (`make demo` or `make test` builds one). The
simulated host carries the HDK driver the image's stack is paired with, so launch's driver check passes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.helpers

CPU_ENV = ["-e", "TORCH_DEVICE_BACKEND_AUTOLOAD=0"]


def provision() -> list[str]:
    script = Path(sys.executable).parent / "provision"
    return [str(script)] if script.exists() else [sys.executable, "-m", "provisioner.cli"]


def commands(image: str, host, bench: Path, nproc: int, marker: str) -> tuple[list[str], list[str]]:
    from provisioner.devices import plan as devices
    from provisioner.devices import runline
    from provisioner.matrix import loader

    spec = f"0-{nproc - 1}"
    launch = provision() + [
        "launch", "--card", "300T-A2", "--devices", spec, "--root", str(host.root), "--dev-root", str(host.dev_root),
        "--image", image, *CPU_ENV, "-v", f"{bench}:/bench:ro", "--script", "/bench/first_step.py", "--", marker,
    ]
    # What a person writes from `provision run-cmd`'s output: the same nodes, mounts and variables.
    plan = devices.plan(loader.load(), devices.Options(card="300T-A2", devices=spec, root=str(host.root),
                                                       dev_root=str(host.dev_root), engine_skipped="benchmark"))
    job = ["torchrun", "--nproc-per-node", str(nproc), "--standalone", "/bench/first_step.py", marker]
    argv = runline.argv(plan, image, job)
    at = argv.index(image)
    by_hand = argv[:at] + [*CPU_ENV, "-v", f"{bench}:/bench:ro"] + argv[at:]
    return launch, by_hand


def to_marker(cmd: list[str], marker: str, timeout: float = 300) -> float:
    """Seconds from start to the marker line on stdout; the command is then left to finish."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    took = None
    try:
        for line in proc.stdout:
            if marker in line and "first step done" in line:
                took = time.perf_counter() - start
                break
        proc.stdout.read()
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    if took is None or proc.returncode != 0:
        raise SystemExit(f"no marker (exit {proc.returncode}) from: {' '.join(cmd)}")
    return took


def pick_image(wanted: str | None) -> tuple[str, str]:
    """The image to launch and the driver its stack is paired with (through provisioner.engine, as launch)."""
    from provisioner import engine
    from provisioner.image.labels import STACK_LABEL

    with engine.connect(60) as eng:
        if wanted:
            image = eng.image(wanted)
        else:
            found = sorted(eng.images("provision/pytorch"), key=lambda i: i.created)
            if not found:
                raise SystemExit("launch_overhead: no provision/pytorch image here; build one (make demo) or pass --image")
            image = found[-1]
    stack = json.loads(image.labels[STACK_LABEL])
    return image.ref, stack["driver"]["paired"][0]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=11)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--image", help="Image with python, torch and this project (default: newest provision/pytorch).")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("launch_overhead: needs root to mknod the simulated device nodes")
    # Byte-compile the package as `pip install` does (an editable checkout under
    # PYTHONDONTWRITEBYTECODE would otherwise recompile every module at each launch).
    import compileall

    import provisioner
    from tests.helpers import hosts

    compileall.compile_dir(os.path.dirname(provisioner.__file__), quiet=1)
    image, driver = pick_image(args.image)
    with tempfile.TemporaryDirectory(prefix="launch-bench-") as tmp:
        host = hosts.materialize("plan-300ta2-4", Path(tmp), nodes="mknod", null_numbers=True)
        info = host.root / "usr/local/Ascend/driver/version.info"
        info.write_text(re.sub(r"(?m)^Version=.*$", f"Version={driver}", info.read_text()))
        bench = Path(tmp) / "bench"
        shutil.copytree(ROOT / "tests" / "launch" / "probes", bench)
        marker = f"BENCH{uuid.uuid4().hex[:8]}"
        launch, by_hand = commands(image, host, bench, args.nproc, marker)
        to_marker(by_hand, marker)  # warm-up: page cache, engine
        to_marker(launch, marker)
        hand_t, launch_t = [], []
        for i in range(args.runs):
            pair = [(by_hand, hand_t), (launch, launch_t)]
            for cmd, into in pair if i % 2 == 0 else reversed(pair):
                into.append(to_marker(cmd, marker))
    h, lt = statistics.median(hand_t), statistics.median(launch_t)
    print(f"docker run ... torchrun ...  median {h:6.2f} s  (min {min(hand_t):.2f}, max {max(hand_t):.2f})")
    print(f"provision launch             median {lt:6.2f} s  (min {min(launch_t):.2f}, max {max(launch_t):.2f})")
    paired = sorted(b / a for a, b in zip(hand_t, launch_t, strict=True))
    quart = paired[len(paired) // 4], paired[(3 * len(paired)) // 4]
    print(f"paired: median of each round's launch / docker run {statistics.median(paired):.3f}x"
          f" (quartiles {quart[0]:.3f}x, {quart[1]:.3f}x)")
    print(f"fastest runs: ratio {min(launch_t) / min(hand_t):.3f}x; load average {os.getloadavg()[0]:.1f}")
    print(f"overhead {lt - h:+.2f} s; ratio launch / docker run: {lt / h:.3f}x (goal <= 1.05x)"
          f"  [{args.nproc} workers, {args.runs} runs,"
          f" {os.cpu_count()} cpus, image {image}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
