"""Fixtures for the audit tests: fake hosts (with modes.txt applied) and the matrix."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import hosts


def apply_modes(name: str, root: Path) -> None:
    """tests/fixtures/hosts/<name>/modes.txt: `path mode` lines for modes git cannot keep (group-writable)."""
    spec = hosts.FIXTURES / name / "modes.txt"
    if not spec.is_file():
        return
    for line in spec.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            rel, mode = line.split()
            os.chmod(root / rel, int(mode, 8))


def make_host(name: str, tmp: Path) -> hosts.FakeHost:
    host = hosts.materialize(name, tmp)
    apply_modes(name, host.root)
    return host


@pytest.fixture
def audit_host(tmp_path):
    """audit_host(name) -> FakeHost, with device nodes (needs root) and modes.txt applied."""
    if os.geteuid() != 0:
        pytest.fail("fake hosts need root to mknod device nodes")
    return lambda name: make_host(name, tmp_path)


@pytest.fixture(scope="session")
def matrix():
    from provisioner.matrix import loader as m

    return m.load()
