"""Fixtures for the audit tests: fixture hosts (simulated device nodes, modes.txt applied) and the matrix."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.host import fakehost
from tests.helpers import hosts


def make_host(name: str, tmp: Path) -> fakehost.FakeHost:
    return hosts.materialize(name, tmp)


@pytest.fixture
def audit_host(tmp_path):
    """audit_host(name) -> FakeHost with simulated device nodes and modes.txt applied (no root needed)."""
    return lambda name: make_host(name, tmp_path)


@pytest.fixture(scope="session")
def matrix():
    from provisioner.matrix import loader

    return loader.load()


@pytest.fixture
def audit_host_real(tmp_path):
    """audit_host_real(name) -> FakeHost with real device nodes (mknod, root): for a `provision` subprocess,
    which the simulated nodes of this process do not reach."""
    import os

    if os.geteuid() != 0:
        pytest.fail("real device nodes need root (mknod)")
    return lambda name: hosts.materialize(name, tmp_path, nodes="mknod")
