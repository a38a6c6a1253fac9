"""Fake hosts: simulated device nodes read exactly like real ones, and nothing else is faked."""

from __future__ import annotations

import json
import os
import stat

import pytest

from provisioner.host import fakehost, hostfs
from provisioner.host import probe as host
from tests.helpers import hosts


def _report(h) -> dict:
    rep = host.probe(h.root, h.dev_root, run_npu_smi=True, engine="skip")
    return json.loads(json.dumps(rep).replace(str(h.root), "<root>").replace(str(h.dev_root), "<dev>"))


@pytest.mark.mknod
@pytest.mark.parametrize("name", ["seed-800ta2", "broken-perms", "plan-950-1"])
def test_simulated_hosts_read_like_real_ones(tmp_path, name):
    if os.geteuid() != 0:
        pytest.fail("real device nodes need root (mknod)")
    real = hosts.materialize(name, tmp_path / "real", nodes="mknod")
    sim = hosts.materialize(name, tmp_path / "sim", nodes="simulated")
    strip = [{k: v for k, v in r.items() if k != "path"} for r in hostfs.scan_devices(real.dev_root)]
    assert strip == [{k: v for k, v in r.items() if k != "path"} for r in hostfs.scan_devices(sim.dev_root)]
    assert _report(real) == _report(sim)


def test_simulated_nodes_without_root(tmp_path):
    h = hosts.materialize("plan-300ta2-4", tmp_path, nodes="simulated")
    recs = {r["name"]: r for r in hostfs.scan_devices(h.dev_root)}
    assert recs["davinci3"]["type"] == "char" and (recs["davinci3"]["major"], recs["davinci3"]["minor"]) == (236, 3)
    assert (recs["davinci3"]["mode"], recs["davinci3"]["uid"], recs["davinci3"]["gid"]) == ("0o660", 1000, 1000)
    # on disk they are empty placeholder files; the tree reads as root's, as a root install leaves it
    assert stat.S_ISREG(os.lstat(h.dev_root / "davinci3").st_mode)
    chain = hostfs.lstat_chain(h.root, "/usr/local/Ascend/driver/lib64")
    assert [host_path for host_path, _ in chain][-1] == "/usr/local/Ascend/driver/lib64"
    assert all(st.st_uid == 0 and not stat.S_IMODE(st.st_mode) & 0o022 for _, st in chain)


def test_simulation_stays_inside_its_host(tmp_path):
    h = hosts.materialize("plan-300ta2-4", tmp_path / "h", nodes="simulated")
    other = tmp_path / "other"
    other.mkdir()
    (other / "davinci0").touch()
    assert [r["type"] for r in hostfs.scan_devices(other)] == ["file"]
    assert hostfs.lstat(other / "davinci0").st_uid == os.geteuid()
    hostfs.forget(h.root.parent)
    assert [r["type"] for r in hostfs.scan_devices(h.dev_root)][0] == "file"  # forgotten: plain files again


def test_card_host_from_the_matrix(tmp_path, matrix):
    h = fakehost.card_host(tmp_path, matrix, "800T-A2", 3, driver="25.0.rc1.1", nodes="simulated")
    names = sorted(r["name"] for r in hostfs.scan_devices(h.dev_root) if r["type"] == "char")
    assert names == ["davinci0", "davinci1", "davinci2", "davinci_manager", "devmm_svm", "hisi_hdc"]
    assert hostfs.driver_info(h.root) == {"Version": "25.0.rc1.1"}
    assert hostfs.account(h.root)["gid"] == 1000
    smi = host.npu_smi_facts(h.root, [], True, 5.0, [])
    assert smi["source"] == "run" and "no saved output" in smi["error"]


def test_npu_smi_stand_in_prints_saved_output(tmp_path):
    sample = "+---------+\n| npu-smi 24.1.0.3 Version: 24.1.0.3 |\n"
    fakehost.install_npu_smi(tmp_path, info=sample)
    res = host.run_command([str(tmp_path / "usr/local/bin/npu-smi"), "info"], 5.0)
    assert res["rc"] == 0 and res["stdout"] == sample
