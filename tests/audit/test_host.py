"""Host probe on fixture trees: every fact under --root, device nodes made with mknod, npu-smi run for real."""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from provisioner.host import audit
from provisioner.host import probe as host
from tests.helpers import hosts

VERSION_FILES = Path(__file__).resolve().parents[1] / "fixtures" / "version-files"


def probe(h, matrix, **kw):
    return host.probe(h.root, h.dev_root, runtime_mounts=audit.runtime_mounts(matrix),
                      chip_rows=audit.chip_rows(matrix), **kw)


def test_seed_800ta2_facts(audit_host, matrix):
    h = audit_host("seed-800ta2")
    r = probe(h, matrix)
    assert r["schema"] == "provision.host/1" and r["probe_errors"] == [] and r["live"] is False
    assert r["system"] == {"arch": "aarch64", "kernel": "5.15.0-105-generic", "memory_mb": 1547980,
                           "os": {"id": "ubuntu", "name": "Ubuntu", "version_id": "22.04",
                                  "pretty_name": "Ubuntu 22.04.4 LTS"}}
    drv = r["driver"]
    assert (drv["dir"], drv["version"], drv["package_version"]) == ("/usr/local/Ascend/driver", "25.0.rc1.1", "25.0.rc1.1")
    assert drv["compatible_firmware"] == ["7.0.0", "7.7.99"]
    assert drv["info"]["ascendhal_version"] == "7.35.23" and len(drv["info"]) == 12
    fw = r["firmware"]
    assert fw["version"] == "7.7.0.1.231"
    assert fw["compatible_drivers"] == [["23.0.0", "23.0.0."], ["24.0", "24.0."], ["24.1", "24.1."], ["25.0", "25.0."]]
    assert r["install_info"]["Driver_Install_For_All"] == "yes"
    [tk] = r["cann"]
    assert (tk["kind"], tk["layout"], tk["version"], tk["arch"]) == ("toolkit", "ascend-toolkit", "8.2.RC1", "aarch64")
    assert tk["paths"] == ["/usr/local/Ascend/ascend-toolkit/8.2.RC1/aarch64-linux/ascend_toolkit_install.info",
                           "/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"]
    smi = r["npu_smi"]
    assert (smi["source"], smi["path"], smi["version"], smi["error"]) == ("run", "/usr/local/bin/npu-smi", "24.1.0.3", None)
    assert [(c["npu"], c["name"], c["family"], c["model"], c["memory_mb"]) for c in smi["chips"]] == [
        (n, "910B2", "910b", "910B2", 65536) for n in range(8)]
    devs = r["devices"]
    assert devs["davinci_ids"] == list(range(8))
    node = next(n for n in devs["nodes"] if n["name"] == "hisi_hdc")
    assert (node["type"], node["major"], node["minor"], node["mode"], node["uid"], node["gid"]) == ("char", 237, 0, "0o660", 1000, 1000)
    assert r["account"] == {"user": "HwHiAiUser", "uid": 1000, "user_gid": 1000, "gid": 1000, "group": "HwHiAiUser"}
    dk = r["docker"]
    assert dk["ascend_runtime"] == {"installed": True, "dir": "/usr/local/Ascend/Ascend-Docker-Runtime", "configured": True,
                                    "path": "/usr/local/Ascend/Ascend-Docker-Runtime/ascend-docker-runtime",
                                    "default": True, "injection_mode": "legacy"}
    assert dk["engine"]["probed"] is False
    assert [d["exists"] for d in dk["cdi"]] == [False, False]
    rp = r["runtime_paths"]
    assert rp["list"] == "/etc/ascend-docker-runtime.d/base.list"
    assert rp["checked"] == ["/usr/local/Ascend/driver/lib64", "/usr/local/dcmi", "/usr/local/bin/npu-smi",
                             "/var/queue_schedule"]
    assert rp["problems"] == []
    assert r["shm"] is None


def test_a3_chips_have_phy_ids(audit_host, matrix):
    r = probe(audit_host("a3-16"), matrix)
    chips = r["npu_smi"]["chips"]
    assert len(chips) == 16 and {c["family"] for c in chips} == {"a3"}
    assert [c["phy_id"] for c in chips] == r["devices"]["davinci_ids"] == list(range(16))
    assert r["cann"][0]["version"] == "8.3.RC2"


def test_cann_85_layout_and_nnae(audit_host, matrix):
    r = probe(audit_host("broken-cann85-driver"), matrix)
    [tk] = r["cann"]
    assert (tk["layout"], tk["version"], tk["install_path"]) == ("cann", "8.5.0", "/usr/local/Ascend/cann-8.5.0/aarch64-linux")
    assert sorted(tk["paths"]) == ["/usr/local/Ascend/cann-8.5.0/aarch64-linux/ascend_toolkit_install.info",
                                   "/usr/local/Ascend/cann/aarch64-linux/ascend_toolkit_install.info"]
    r = probe(audit_host("broken-driver-old"), matrix)
    [nnae] = r["cann"]
    assert (nnae["kind"], nnae["layout"], nnae["version"], nnae["arch"]) == ("nnae", "nnae", "8.0.RC3", "x86_64")
    assert r["system"]["arch"] == "x86_64"


def test_version_cfg_only_toolkit(tmp_path):
    d = tmp_path / "usr/local/Ascend/ascend-toolkit/latest"
    d.mkdir(parents=True)
    shutil.copy(VERSION_FILES / "version.cfg_ascend-toolkit_CANN6.0.1_310P3.txt", d / "version.cfg")
    [tk] = host.find_cann(tmp_path)
    assert tk["version"] == "6.0.1" and tk["arch"] is None
    assert tk["version_cfg"]["toolkit"] == {"running": "6.0.1", "upgrade": "6.0.1", "installed": "6.0.1"}
    assert set(tk["version_cfg"]) == {"runtime", "compiler", "opp", "toolkit", "aoe", "ncs"}


def test_old_driver_format_and_alternative_root(tmp_path):
    old = (Path(__file__).resolve().parents[1] / "fixtures/hosts/seed-310-300i/tree/usr/local/Ascend/driver/version.info")
    d = tmp_path / "usr/local/npu/driver"
    d.mkdir(parents=True)
    shutil.copy(old, d / "version.info")
    drv = host.driver_facts(tmp_path)
    assert (drv["dir"], drv["version"], drv["compatible_firmware"]) == ("/usr/local/npu/driver", "22.0.4", None)
    assert drv["info"]["compatible_version"] == "[V100R001C81,V100R001C84]"


def test_seed_310_mapping_from_saved_output(audit_host, matrix, tmp_path):
    h = audit_host("seed-310-300i")
    saved = h.root / "usr/local/share/npu-smi-fixture"
    r = probe(h, matrix, npu_smi_outputs=[saved / "info-m.txt", saved / "info.txt"])
    smi = r["npu_smi"]
    assert smi["source"] == "file" and smi["path"] is None
    assert [x["name"] for x in smi["mapping"]["rows"]] == ["MiniD"] * 4 + ["Mcu"]
    assert [(c["npu"], c["chip"], c["phy_id"], c["family"]) for c in smi["chips"]] == [
        (6, 0, 3, "310"), (6, 1, 4, "310"), (6, 2, 5, "310"), (6, 3, 6, "310")]


def _fake_npu_smi(root: Path, body: str) -> None:
    p = root / "usr/local/bin/npu-smi"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(0o755)


def test_redacted_names_resolved_through_info_m(tmp_path, matrix):
    table = (Path(__file__).resolve().parents[1] / "fixtures/hosts/broken-unhealthy-910/tree/usr/local/share/"
             "npu-smi-fixture/info.txt").read_text()
    (tmp_path / "t.txt").write_text(table)
    # info -m as the Huawei doc prints it for an Atlas 800 9010 ("Ascend 910A"), one row per NPU.
    rows = "".join(f"{n}                              0                              {n}"
                   f"                              Ascend 910A\n" for n in range(8))
    (tmp_path / "m.txt").write_text("NPU ID                         Chip ID                        Chip Logic ID"
                                    "                  Chip Name\n" + rows)
    _fake_npu_smi(tmp_path, f'case "$*" in "info") cat {tmp_path}/t.txt;; "info -m") cat {tmp_path}/m.txt;; esac\n')
    facts = host.npu_smi_facts(tmp_path, [], True, 5, matrix.rows("chips"))
    assert {c["family"] for c in facts["chips"]} == {"910"}
    assert "npu-smi info -m names it 'Ascend 910A'" in facts["chips"][0]["class_note"]


def test_npu_smi_timeout_kills_the_whole_group(tmp_path):
    # Without `exec`, sh forks sleep: killing only sh would leave sleep holding the pipe.
    _fake_npu_smi(tmp_path, "sleep 30\n")
    start = time.monotonic()
    facts = host.npu_smi_facts(tmp_path, [], True, 0.5, [])
    assert time.monotonic() - start < 5
    assert facts["source"] == "run" and facts["error"] == "npu-smi info failed: timed out after 0.5 s"
    assert facts["chips"] == []


def test_npu_smi_failure_text(tmp_path):
    _fake_npu_smi(tmp_path, 'echo "dcmi module initialize failed. ret is -8005"\nexit 255\n')
    facts = host.npu_smi_facts(tmp_path, [], True, 5, [])
    assert facts["error"] == "npu-smi info failed: exit code 255: dcmi module initialize failed. ret is -8005"


def test_npu_smi_not_executable(tmp_path):
    p = tmp_path / "usr/local/sbin/npu-smi"
    p.parent.mkdir(parents=True)
    p.write_text("not a program")
    p.chmod(0o644)
    facts = host.npu_smi_facts(tmp_path, [], True, 5, [])
    assert facts["path"] == "/usr/local/sbin/npu-smi"
    assert facts["error"].startswith("npu-smi info failed: cannot run")


def test_group_writable_and_symlinked_mount_paths(audit_host, matrix):
    h = audit_host("broken-perms")
    r = probe(h, matrix)
    assert r["runtime_paths"]["problems"] == [
        {"path": "/usr/local/bin/npu-smi", "at": "/usr/local/bin/npu-smi", "problems": ["group-writable (mode 0o775)"]}]
    dcmi = h.root / "usr/local/dcmi"
    shutil.rmtree(dcmi)
    (h.root / "opt/dcmi").mkdir(parents=True)
    dcmi.symlink_to("../../opt/dcmi")
    os.chmod(h.root / "usr/local", 0o757)
    probs = {(p["path"], p["at"]): p["problems"] for p in probe(h, matrix)["runtime_paths"]["problems"]}
    assert probs[("/usr/local/dcmi", "/usr/local/dcmi")] == ["symbolic link"]
    assert probs[("/usr/local/dcmi", "/usr/local")] == ["other-writable (mode 0o757)"]
    assert probs[("/usr/local/bin/npu-smi", "/usr/local")] == ["other-writable (mode 0o757)"]


def test_a_failing_probe_section_is_recorded(audit_host, matrix, monkeypatch):
    def boom(root):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(host, "find_cann", boom)
    r = probe(audit_host("seed-800ta2"), matrix)
    assert r["probe_errors"] == [{"section": "cann", "error": "RuntimeError: disk on fire"}]
    assert r["cann"] is None and len(r["npu_smi"]["chips"]) == 8


def test_engine_unreachable_is_a_fact(audit_host, matrix, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    r = probe(audit_host("seed-800ta2"), matrix, engine="probe")
    eng = r["docker"]["engine"]
    assert eng["probed"] is True and eng["reachable"] is False and eng["error"]


def test_live_root_reads_this_machine(matrix, tmp_path):
    r = host.probe("/", tmp_path, run_npu_smi=False, engine="skip", chip_rows=matrix.rows("chips"))
    assert r["live"] is True and r["probe_errors"] == []
    assert r["system"]["arch"] == os.uname().machine and r["system"]["kernel"] == os.uname().release
    assert r["npu_smi"]["source"] == "skipped"


@pytest.fixture
def small_shm(tmp_path):
    shm = tmp_path / "dev" / "shm"
    shm.mkdir(parents=True)
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(shm)], capture_output=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.decode().strip()}")
    yield tmp_path / "dev"
    subprocess.run(["umount", str(shm)], check=False)


def test_shm_size_from_statvfs(small_shm):
    assert host.shm_facts(small_shm) == {"path": "/dev/shm", "total_mb": 64, "free_mb": 64}


def test_fixture_names_are_prefixed():
    mine = [n for n in hosts.names() if not n.startswith("plan-")]
    assert all(n.startswith(("seed-", "broken-", "a3-", "fit-")) for n in mine), mine
