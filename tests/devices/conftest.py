"""Fixtures for the device-plan tests: the shipped matrix, the plan-* hosts (simulated device nodes: no root,
no engine), golden files."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.devices import enginefacts
from provisioner.devices import plan as devices
from provisioner.matrix import loader
from tests.helpers import golden as goldens
from tests.helpers import hosts

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture(scope="session")
def shipped():
    return loader.load()


@pytest.fixture(scope="session")
def plan_hosts(tmp_path_factory):
    """Every plan-* fixture host, materialized once per session: name -> FakeHost."""
    base = tmp_path_factory.mktemp("plan-hosts")
    return {n: hosts.materialize(n, base) for n in hosts.names() if n.startswith("plan-")}


def quiet_engine() -> enginefacts.EngineFacts:
    """An engine that answered and runs nothing: the in-use check passes without a note."""
    return enginefacts.EngineFacts(reachable=True)


@pytest.fixture
def make_plan(shipped, plan_hosts):
    def make(host: str, card: str, spec: str, **kw) -> devices.DevicePlan:
        h = plan_hosts[host]
        kw.setdefault("engine", quiet_engine())
        opts = devices.Options(card=card, devices=spec, root=str(h.root), dev_root=str(h.dev_root), **kw)
        return devices.plan(shipped, opts)

    return make


def golden(name: str, text: str) -> None:
    """Compare with tests/devices/golden/<name>; PROVISION_REGEN=1 rewrites it."""
    goldens.check(GOLDEN / name, text)


