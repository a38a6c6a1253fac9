"""Run Python in a subprocess with the torch_npu test double (tests/fakes) in front of the real packages.

The double turns the process's torch into one with an `npu` device, which cannot be undone, so it never
goes into the pytest process. `transformers_env(version)` installs an older transformers release (with
the tokenizers and huggingface-hub it needs) beside the venv, for the findings that depend on the
transformers a package set installs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.train.conftest import REPO, train_env

FAKES = REPO / "tests" / "fakes"
CACHE = REPO / ".cache" / "npu-tests"
# The releases our package sets install that differ in NPU support (matrices/packages.yaml), with what
# they need beside them; checked in the wheels, see provisioner/train/ascend.yaml.
TRANSFORMERS_ENVS = {
    "4.46.3": ["transformers==4.46.3", "tokenizers==0.20.3", "huggingface-hub==0.36.2"],
    "4.57.6": ["transformers==4.57.6", "tokenizers==0.22.2", "huggingface-hub==0.36.2"],
}


def env(tmp_path: Path, soc: str = "Ascend910B3", count: int = 1, path: tuple[str, ...] = (),
        torch_npu: str | None = None, **extra) -> dict:
    """Environment of a process on a simulated host with `count` chips of `soc` and a CANN toolkit.
    `torch_npu`: the wheel version the host's torch_npu installed (its dist-info, which the trainer reads)."""
    cann = tmp_path / "Ascend" / "cann"
    cann.mkdir(parents=True, exist_ok=True)
    if torch_npu is not None:
        path = (wheel_metadata(tmp_path, torch_npu), *path)
    e = train_env()
    for key in ("ASCEND_RT_VISIBLE_DEVICES", "HCCL_EXEC_TIMEOUT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        e.pop(key, None)
    e.update(FAKE_NPU_SOC=soc, FAKE_NPU_COUNT=str(count), ASCEND_HOME_PATH=str(cann),
             PYTHONPATH=os.pathsep.join([*path, str(FAKES), str(REPO)]))
    e.update({k: str(v) for k, v in extra.items()})
    return e


def wheel_metadata(tmp_path: Path, version: str) -> str:
    """A directory holding what the torch_npu wheel installs beside its package: torch_npu-VERSION.dist-info
    (METADATA with the torch pin of that line, as the wheels on PyPI have), for the double in tests/fakes."""
    site = tmp_path / f"torch_npu-wheel-{version}"
    info = site / f"torch_npu-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    torch_line = ".".join(version.split(".")[:3]).split("rc")[0].split("post")[0].rstrip(".")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch_npu\nVersion: {version}\n"
                                   f"Requires-Dist: torch=={torch_line}\n")
    (info / "top_level.txt").write_text("torch_npu\n")
    return str(site)


def run(argv: list[str], environ: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], env=environ, capture_output=True, text=True, timeout=timeout,
                          cwd=str(REPO))


def run_json(code: str, environ: dict, timeout: int = 600) -> dict:
    """Run `code`, which prints one JSON object as its last stdout line."""
    proc = run(["-c", code], environ, timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def transformers_env(version: str) -> str:
    """A directory with that transformers release installed (cached under .cache/npu-tests)."""
    target = CACHE / f"transformers-{version}"
    marker = target / ".complete"
    if not marker.exists():
        target.mkdir(parents=True, exist_ok=True)
        res = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade", "--target",
                              str(target), *TRANSFORMERS_ENVS[version]], capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            pytest.fail(f"cannot install transformers {version} for the test: {res.stderr.strip()[-500:]}")
        marker.write_text("ok\n")
    return str(target)
