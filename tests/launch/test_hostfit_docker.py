"""Build for the host you are on (issue 15), against the real engine: `provision build` on a simulated HDK 24.1.rc3
host (fixture fit-800ta2-24.1rc3, real mknod device nodes with /dev/null's numbers) picks the chip from its npu-smi and a CANN
its driver runs, and `run-cmd` and `launch` then accept the image on that host. The image the suite builds for no
host (CANN 9.1.0, `launch_image`) is refused there: the driver check is the one that lets the first through.

The build uses the local Debian base and the offline CPU torch 2.13.0; torch_npu 2.13.0 is paired with CANN 8.2.RC1
by a test overlay (tests/fixtures/overlays/torch-2.13-cann8.2.yaml: no published pairing exists).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers.engine import ROOT, TORCH, provision, trusted_ca_file
from tests.launch.conftest import CPU_ENV, host_args

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.mknod]
OVERLAY = ROOT / "tests" / "fixtures" / "overlays" / "torch-2.13-cann8.2.yaml"
HOST = "fit-800ta2-24.1rc3"


@pytest.fixture(scope="module")
def host_build(docker_client, base_image, wheelhouse, tmp_path_factory):
    """(simulated host, `provision build --json` document) for a build with no --card and no --driver."""
    from tests.helpers import hosts

    h = hosts.materialize(HOST, tmp_path_factory.mktemp("hostfit"), nodes="mknod", null_numbers=True)
    from provisioner.host import fakehost

    smi = [a for f in fakehost.saved_npu_smi(h.root) for a in ("--npu-smi-output", str(f))]  # never run from --root
    proc = provision("build", "--root", str(h.root), *smi, "--torch", TORCH, "--base-image", base_image,
                     "--matrix", str(OVERLAY), "--wheelhouse", wheelhouse, "--trusted-ca", trusted_ca_file(),
                     "--network", "host", "--json")
    if proc.returncode != 0:
        pytest.fail(f"provision build on {HOST} failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    return h, json.loads(proc.stdout)


def cli(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "provisioner.cli", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_the_build_takes_chip_driver_and_arch_from_the_host(host_build, docker_client):
    h, doc = host_build
    stack = doc["stack"]
    assert stack["card"]["id"] == "800T-A2" and stack["chip"]["family"] == "910b"
    assert stack["cann"]["version"] == "8.2.RC1" and stack["driver"]["host"] == "24.1.rc3"
    assert stack["driver"]["fit"] == "ok" and stack["arch"] == "x86_64"
    taken = {c["option"]: c["value"] for c in stack["host"]["constraints"] if c["from"] == "host"}
    assert taken == {"card": "800T-A2", "driver": "24.1.rc3", "arch": "x86_64"}
    label = json.loads(docker_client.images.get(doc["tag"]).labels["org.provision.stack"])
    assert label["host"] == stack["host"] and label["id"] == stack["id"] == doc["stack_id"]
    assert label["host"]["root"] is None and str(h.root) not in json.dumps(label)  # no path of the build machine


def test_run_cmd_accepts_it_on_that_host(host_build):
    h, doc = host_build
    proc = cli("run-cmd", "--card", "800T-A2", "--devices", "0-1", *host_args(h), "--json", doc["tag"])
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)["plan"]
    assert plan["stack"]["cann"] == "8.2.RC1" and plan["stack"]["driver_fit"] == "ok", plan["stack"]
    assert plan["stack"]["id"] == doc["stack_id"]


def test_launch_accepts_it_on_that_host(host_build, no_leftovers):
    h, doc = host_build
    proc = cli("launch", "--card", "800T-A2", "--devices", "0-1", *host_args(h), "--image", doc["tag"], *CPU_ENV,
               *no_leftovers, "--check-only", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout)
    assert out["status"] == "ok" and out["image"]["stack_id"] == doc["stack_id"]
    assert out["check"]["result"]["status"] == "ok" and out["check"]["result"]["world_size"] == 2
    read = ("import json; s = json.load(open('/etc/provision/stack.json'));"
            " print(s['cann']['version'], s['host']['driver']['version'])")
    proc = cli("launch", "--card", "800T-A2", "--devices", "0", *host_args(h), "--image", doc["tag"], *CPU_ENV,
               *no_leftovers, "--exec", "--", "python", "-c", read)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.splitlines()[-1] == "8.2.RC1 24.1.rc3"


def test_the_image_built_for_no_host_is_refused_there(host_build, launch_image):
    h, _ = host_build
    proc = cli("run-cmd", "--card", "800T-A2", "--devices", "0-1", *host_args(h), launch_image)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "needs HDK driver" in proc.stderr and "this host has 24.1.rc3" in proc.stderr
