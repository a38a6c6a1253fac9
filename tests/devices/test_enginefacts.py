"""The in-use matching on inspected containers (real inspect payloads read by the engine's ContainerInfo),
the facts a (fake) engine gives, and an engine that is not there."""

import os
import time

import pytest

from provisioner.devices import enginefacts
from provisioner.devices.enginefacts import Holder
from provisioner.engine.types import ContainerInfo


def inspect(name, devices=(), env=(), runtime="runc", privileged=False, cid="0123456789abcdef"):
    return ContainerInfo.from_inspect({
        "Id": cid,
        "Name": "/" + name,
        "Config": {"Env": list(env)},
        "HostConfig": {
            "Runtime": runtime,
            "Privileged": privileged,
            "Devices": [{"PathOnHost": d, "PathInContainer": d, "CgroupPermissions": "rwm"} for d in devices] or None,
        },
        "State": {"Status": "running", "Running": True},
    })


CHIPS = {n: f"/dev/davinci{n}" for n in range(8)}


def held(containers, applies=True, chips=CHIPS):
    return enginefacts.holders(containers, chips, "ascend", "ASCEND_VISIBLE_DEVICES", applies)


@pytest.mark.parametrize(
    "value, ids",
    [("0-2,4", [0, 1, 2, 4]), ("npu-1,npu-3", [1, 3]), ("Ascend910-5", [5]), ("void", []), ("", []), ("x, 2", [2])],
)
def test_runtime_ids(value, ids):
    assert enginefacts.runtime_ids(value) == ids


def test_device_mapping_names_the_container():
    c = inspect("trainer-a", devices=["/dev/davinci2", "/dev/davinci_manager"])
    assert held([c]) == {2: [Holder("trainer-a", "0123456789ab", "device")]}


def test_other_nodes_do_not_count():
    c = inspect("x", devices=["/dev/davinci_manager", "/dev/hisi_hdc", "/dev/davinci12"])
    assert held([c]) == {}


def test_runtime_container_holds_the_ids_in_its_env():
    c = inspect("rt", env=["PATH=/bin", "ASCEND_VISIBLE_DEVICES=0-1,6"], runtime="ascend")
    assert {k: [h.how for h in v] for k, v in held([c]).items()} == {0: ["runtime"], 1: ["runtime"], 6: ["runtime"]}


def test_env_without_the_runtime_maps_nothing():
    c = inspect("plain", env=["ASCEND_VISIBLE_DEVICES=0-7"], runtime="runc")
    assert held([c]) == {}


def test_runtime_ids_ignored_for_a_fake_dev_root():
    c = inspect("rt", env=["ASCEND_VISIBLE_DEVICES=3"], runtime="ascend")
    assert held([c], applies=False) == {}


def test_paths_compare_after_resolving_links(tmp_path):
    node = tmp_path / "davinci3"
    node.write_text("")
    link = tmp_path / "link3"
    os.symlink(node, link)
    c = inspect("via-link", devices=[str(link)])
    assert list(held([c], chips={3: str(node)})) == [3]


def test_one_container_listed_once_and_several_containers_each():
    a = inspect("a", devices=["/dev/davinci1"], env=["ASCEND_VISIBLE_DEVICES=1"], runtime="ascend", cid="a" * 16)
    b = inspect("b", devices=["/dev/davinci1"], cid="b" * 16)
    out = held([a, b])
    assert [h.name for h in out[1]] == ["a", "b"]


def test_privileged_containers_are_listed():
    cs = [inspect("p", privileged=True), inspect("q")]
    assert enginefacts.privileged(cs) == ["p"]


def test_unreachable_engine_is_a_fact_not_an_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    t0 = time.monotonic()
    facts = enginefacts.gather(image="whatever", timeout=1.0)
    assert facts.reachable is False
    assert "no Docker engine reachable" in facts.note
    assert time.monotonic() - t0 < 5
