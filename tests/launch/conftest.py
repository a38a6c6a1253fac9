"""Fixtures for the launch tests: the launch image, simulated hosts, leftover checks.

The engine client and the image come from the shared engine fixtures (tests/helpers/engine.py):
`launch_image` is the 300T-A2 image `provision build` makes for the integration tests.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from provisioner.devices import plan as devices
from provisioner.host import fakehost
from provisioner.matrix import loader
from tests.helpers import hosts

# torch_npu without CANN breaks `import torch` unless autoloading is off; the shared
# image has torch_npu, so every launch test passes this like a CPU user would.
CPU_ENV = ["-e", "TORCH_DEVICE_BACKEND_AUTOLOAD=0"]


@pytest.fixture(scope="session")
def launch_image(provision_image):
    """An image with python, torch (CPU), torch_npu and this project with its train extra."""
    return provision_image


@pytest.fixture(scope="session")
def shipped():
    return loader.load()


@pytest.fixture
def sim_host(tmp_path):
    """sim_host(name='plan-300ta2-4', sub='a') -> FakeHost with simulated device nodes (no root)."""

    def make(name: str = "plan-300ta2-4", sub: str = "a") -> fakehost.FakeHost:
        return hosts.materialize(name, tmp_path / sub, null_numbers=True)

    return make


@pytest.fixture
def real_host(tmp_path):
    """real_host(name='plan-300ta2-4', sub='a') -> FakeHost whose nodes are real (mknod, root) with /dev/null's
    numbers, so a real container can open them."""
    if os.geteuid() != 0:
        pytest.fail("real device nodes need root (mknod)")

    def make(name: str = "plan-300ta2-4", sub: str = "a") -> fakehost.FakeHost:
        return hosts.materialize(name, tmp_path / sub, nodes="mknod", null_numbers=True)

    return make


@pytest.fixture
def make_plan(shipped, sim_host):
    """make_plan('0-3', card='300T-A2', name='plan-300ta2-4', **Options) -> DevicePlan (no engine asked)."""
    made = []

    def make(spec: str = "0-3", card: str = "300T-A2", name: str = "plan-300ta2-4", **kw) -> devices.DevicePlan:
        made.append(name)
        h = sim_host(name, sub=f"plan{len(made)}")
        kw.setdefault("engine_skipped", "test")
        return devices.plan(shipped, devices.Options(card=card, devices=spec, root=str(h.root), dev_root=str(h.dev_root), **kw))

    return make


def host_args(h: fakehost.FakeHost) -> list[str]:
    return ["--root", str(h.root), "--dev-root", str(h.dev_root)]


def launch_containers(client, run_id: str | None = None) -> list:
    from provisioner.launch import run as launch

    label = launch.LABEL if run_id is None else f"{launch.LABEL}={run_id}"
    return client.containers.list(all=True, filters={"label": label})


TEST_LABEL = "org.provision.test"


@pytest.fixture
def no_leftovers(docker_client):
    """["--label", "org.provision.test=<id>"] for the launches of one test; fails the test when a container
    with that label is left behind (and removes it). Other sessions' containers on the engine are not touched."""
    import uuid

    tag = f"{TEST_LABEL}={uuid.uuid4().hex[:12]}"
    yield ["--label", tag]
    left = docker_client.containers.list(all=True, filters={"label": tag})
    for c in left:
        c.remove(force=True)
    assert not left, f"containers left behind: {[c.name for c in left]}"


@pytest.fixture
def probe_dir(tmp_path):
    """tests/launch/probes copied to a directory the engine can bind-mount (read-only) at /probe."""
    dest = tmp_path / "probe"
    shutil.copytree(Path(__file__).parent / "probes", dest)
    return dest
