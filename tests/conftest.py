"""Shared fixtures. Area-specific ones live in tests/<area>/conftest.py."""

from __future__ import annotations

import os

import pytest

from provisioner.host import fakehost
from tests.helpers import hosts

# `provision resolve|render|build` read the host they run on (provisioner/resolve/hostfit.py): a machine with an
# Ascend driver would constrain every stack. The suite resolves for no host unless a test names one (--root,
# --npu-smi-output, --for-host) or clears this; set here, at import, so session fixtures and subprocesses see it.
os.environ.setdefault("PROVISION_FOR_HOST", "none")

# docker_client, base_image, wheelhouse, provision_image, run_in_image: shared engine fixtures; prebuild runs
# the engine tests last and builds their images in the background meanwhile.
pytest_plugins = ["tests.helpers.engine", "tests.helpers.prebuild"]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # Each test session gets its own matrix/resolve cache, never the user's.
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path_factory.getbasetemp() / "provision-cache"))


@pytest.fixture
def fake_host(tmp_path):
    """fake_host(name, null_numbers=False) -> FakeHost with root/ and dev/ under tmp_path and real device nodes
    (mknod, needs root): for tests that hand the nodes to a real container engine."""
    if os.geteuid() != 0:
        pytest.fail("real device nodes need root (mknod); unit tests use simulated hosts")

    def make(name: str, null_numbers: bool = False) -> fakehost.FakeHost:
        return hosts.materialize(name, tmp_path, nodes="mknod", null_numbers=null_numbers)

    return make
