"""The self-test in the built test image on a simulated host: `provision selftest` alone, and
`provision launch --selftest` before a job (the job starts only when it passes). CPU, gloo; the host's
device nodes are real (mknod), like the other launch tests on the engine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.launch.conftest import CPU_ENV, host_args, launch_containers
from tests.train.conftest import write_config

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def launch_image(session_image):
    """This checkout's image (the self-test module is new; other sessions rebuild the shared tag)."""
    return session_image


@pytest.fixture
def host(real_host, docker_client, launch_image):
    """A simulated 300T-A2 host (mknod nodes with /dev/null's numbers, which a container opens) whose driver is
    the one the image's stack pairs with."""
    import re

    stack = json.loads(docker_client.images.get(launch_image).labels["org.provision.stack"])
    h = real_host()
    info = h.root / "usr/local/Ascend/driver/version.info"
    info.write_text(re.sub(r"(?m)^Version=.*$", f"Version={stack['driver']['paired'][0]}", info.read_text()))
    return h


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provisioner.cli", *args], capture_output=True, text=True, timeout=900)


def test_provision_selftest_with_the_users_config(host, launch_image, tmp_path, docker_client, no_leftovers):
    config = write_config(tmp_path / "train.yaml", method="full", model="/somewhere/qwen", data=["/data/x.jsonl"])
    proc = cli("selftest", "--card", "300T-A2", "--devices", "0-1", *host_args(host), "--image", launch_image,
               *CPU_ENV, "--config", str(config), "--json", *no_leftovers, "max_grad_norm=0.5")
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(proc.stdout)
    assert doc["status"] == "ok" and doc["check_only"] is True
    st = doc["selftest"]
    assert st["exit_code"] == 0 and st["container"] == doc["container"]
    assert st["command"][-4:] == ["provisioner.train.selftest", "--config", "/etc/provision/selftest/train.yaml",
                                  "max_grad_norm=0.5"]
    checks = {c["id"]: c for c in st["result"]["checks"]}
    assert st["result"]["world_size"] == 2
    assert [checks[k]["status"] for k in ("npu", "matmul", "fused-optimizer")] == ["n/a"] * 3
    assert checks["all-reduce"]["status"] == "ok" and "2 workers on gloo" in checks["all-reduce"]["detail"]
    assert checks["train-steps"]["detail"].startswith("full, fp32, ddp, sdpa")
    assert not launch_containers(docker_client, doc["run_id"])


def test_launch_selftest_gates_the_job(host, launch_image, probe_dir, docker_client, no_leftovers):
    base = ["launch", "--card", "300T-A2", "--devices", "0-1", *host_args(host), "--image", launch_image, *CPU_ENV,
            "-v", f"{probe_dir}:/probe:ro", "--selftest", "--json", *no_leftovers]
    proc = cli(*base, "--script", "/probe/probe.py")
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(proc.stdout)
    assert doc["status"] == "ok" and doc["selftest"]["result"]["status"] == "ok"
    assert doc["selftest"]["container"] == doc["container"] + "-selftest"
    assert doc["command"][-1] == "/probe/probe.py" and doc["ranks_seen"] == [0, 1]
    # The trainer's own settings go to the self-test; fp16 cannot train on this CPU host, so the self-test
    # fails with the fix and the trainer never starts.
    proc = cli(*base, "--", "precision=fp16", "max_steps=3")
    assert proc.returncode == 1, proc.stderr[-4000:]
    doc = json.loads(proc.stdout)
    assert doc["status"] == "selftest-failed" and doc["container"] == doc["selftest"]["container"]
    assert doc["selftest"]["command"][-2:] == ["precision=fp16", "max_steps=3"]
    npu = next(c for c in doc["selftest"]["result"]["checks"] if c["id"] == "npu")
    assert npu["status"] == "fail" and "fp16 is not supported on CPU" in npu["error"]
    assert npu["fix"].startswith("set precision: auto")
    assert not launch_containers(docker_client, doc["run_id"])
