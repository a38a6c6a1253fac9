"""GLOO_SOCKET_IFNAME in Gloo's syntax, from the HCCL_SOCKET_IFNAME syntax (prefixes, =exact, ^exclude)."""

from __future__ import annotations

import pytest

from provisioner.devices import netif
from provisioner.devices.plan import MultiNode
from provisioner.errors import ProvisionError

NICS = ["docker0", "enp1s0", "enp2s0", "eth0", "eth0.100", "lo", "veth12ab"]


@pytest.mark.parametrize("hccl, want", [
    ("=eth0", "eth0"), ("=eth0,enp1s0", "eth0,enp1s0"), ("eth", "eth0"), ("enp", "enp1s0"), ("enp2", "enp2s0"),
    ("eth0", "eth0"), ("^eth", "enp1s0"), ("^=enp1s0", "enp2s0"), ("^enp,eth", None), ("ib", None),
])
def test_derivation_against_host_interfaces(hccl, want):
    value, note = netif.gloo_ifname(hccl, NICS)
    assert value == want
    assert (note is None) == (want is not None)


def test_without_host_interfaces_only_exact_names_translate():
    assert netif.gloo_ifname("=eth0", None) == ("eth0", None)
    value, note = netif.gloo_ifname("eth", None)
    assert value is None and "pass --socket-ifname =NAME" in note


def test_host_interfaces_come_from_sysfs(tmp_path):
    assert netif.host_interfaces(str(tmp_path)) is None
    for name in ("lo", "enp4s0", "enp3s0"):
        (tmp_path / "sys" / "class" / "net" / name).mkdir(parents=True)
    assert netif.host_interfaces(str(tmp_path)) == ["enp3s0", "enp4s0", "lo"]


def test_plan_resolves_prefixes_on_the_host_it_runs_on(make_plan, plan_hosts, monkeypatch):
    root = str(plan_hosts["plan-800ta2-8"].root)
    monkeypatch.setattr(netif, "host_interfaces",
                        lambda r: ["docker0", "enp3s0", "enp4s0", "lo"] if r == root else None)
    plan = make_plan("plan-800ta2-8", "800T-A2", "0-7", multi=MultiNode(2, 0, "10.0.0.1"), socket_ifname="enp")
    env = {e.name: e.value for e in plan.env}
    assert (env["HCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"]) == ("enp", "enp3s0")
    # A Kubernetes manifest describes other hosts: their interfaces are unknown here.
    plan = make_plan("plan-800ta2-8", "800T-A2", "0-7", multi=MultiNode(2, 0, "10.0.0.1"), socket_ifname="enp",
                     check_in_use=False)
    assert {e.name: e.value for e in plan.env}["GLOO_SOCKET_IFNAME"] is None


def test_hccl_exec_timeout_zero_means_never(make_plan):
    # Atlas A2/A3: [0, 2147483647], 0 = never (CANN 8.5 HCCL_EXEC_TIMEOUT); the first-generation 910's
    # (0, 17340] is tests/unit/test_env_ranges.py
    for good in ("0", "30", "36000"):
        plan = make_plan("plan-300ta2-4", "300T-A2", "0-1", hccl_exec_timeout=good)
        assert {e.name: e.value for e in plan.env}["HCCL_EXEC_TIMEOUT"] == good
    for bad, why in (("2147483648", r"outside \[0, 2147483647\]"), ("-1", r"outside \[0, 2147483647\]"),
                     ("1h", "not a whole number")):
        with pytest.raises(ProvisionError, match=rf"HCCL_EXEC_TIMEOUT='.*': {why}"):
            make_plan("plan-300ta2-4", "300T-A2", "0-1", hccl_exec_timeout=bad)
