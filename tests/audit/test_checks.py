"""Audit checks in isolation: driver/CANN verdicts, firmware ranges, crash isolation, image labels."""

import copy
import json
import shutil

import pytest

from provisioner.errors import ProvisionError
from provisioner.host import audit, audit_chips, audit_driver, audit_image, audit_system, findings
from provisioner.host import probe as host
from provisioner.image import labels as image_labels
from provisioner.resolve import cached, driverfit, request


@pytest.mark.parametrize("driver, cann, verdict", [
    ("24.1.rc3", "8.2.RC1", "ok"),          # listed
    ("25.0.rc1.1", "8.2.RC1", "patch"),     # patch build of listed 25.0.RC1
    ("24.1.0.3", "8.2.RC1", "patch"),       # patch build of listed 24.1.0
    ("25.5.0", "8.2.RC1", "newer"),
    ("23.0.7", "8.2.RC1", "too-old"),
    ("23.0.7", "8.0.RC3", "too-old"),
    ("25.0.rc1.1", "8.0.RC3", "mismatch"),  # between 24.1.0 and 25.1.RC1
    ("25.2.1", "8.3.RC2", "unlisted"),      # 8.3.RC1's list applies; 25.2.RC1 is listed
    ("25.5.0", "8.3.RC2", "unknown"),
    ("24.1.rc1", "8.5.0", "too-old"),
    ("25.2.1", "8.5.0", "ok"),              # 25.2.* compatible
])
def test_driver_verdict(matrix, driver, cann, verdict):
    assert driverfit.driver_verdict(driver, matrix.cann(cann), matrix)[0] == verdict


@pytest.mark.parametrize("driver, pairs, ok", [
    ("25.0.rc1.1", [["23.0.0", "23.0.0."], ["24.0", "24.0."], ["24.1", "24.1."], ["25.0", "25.0."]], True),
    ("24.1.rc3", [["23.0.0", "23.0.0."], ["24.0", "24.0."], ["24.1", "24.1."], ["25.0", "25.0."]], True),
    ("25.2.0", [["23.0.0", "23.0.0."], ["24.0", "24.0."], ["24.1", "24.1."], ["25.0", "25.0."]], False),
    ("23.0.7", [["23.0.rc3", "23.0.rc3."], ["23.0.0", "23.0.0."]], True),   # the package's own driver
    ("23.0.rc3.2", [["23.0.rc3", "23.0.rc3."], ["23.0.0", "23.0.0."]], True),
    ("24.1.rc1", [["23.0.rc3", "23.0.rc3."], ["23.0.0", "23.0.0."]], False),
    ("23.0.rc2", [["23.0.rc3", "23.0.rc3."], ["23.0.0", "23.0.0."]], False),
    ("24.1.rc2", [["24.1.rc1", "24.1.rc3"]], True),
    ("24.1.0", [["24.1.rc1", "24.1.rc3"]], False),
    ("25.5.1", [["25.5.1", "25.5.1."]], True),
    ("25.5.2", [["25.5.1", "25.5.1."]], False),
    ("23.0.rc3", [["23.0.0", "23.0.0."]], False),
])
def test_firmware_accepts_driver(driver, pairs, ok):
    assert audit_driver.driver_accepted_by_firmware(driver, pairs) is ok


def test_bracket_pairs():
    assert host.parse_bracket_pairs("[7.0.0,7.7.99]") == [["7.0.0", "7.7.99"]]
    assert host.parse_bracket_pairs("[V100R001C29],[V100R001C30]") == [["V100R001C29"], ["V100R001C30"]]
    assert host.parse_bracket_pairs("garbage") == [] and host.parse_bracket_pairs(None) == []


def _report(**over):
    base = {
        "schema": "provision.host/1", "root": "/x", "dev_root": "/x/dev", "live": False, "probe_errors": [],
        "system": {"arch": "aarch64", "kernel": "k", "os": None, "memory_mb": None},
        "driver": {"dir": "/usr/local/Ascend/driver", "roots": ["/usr/local/Ascend/driver"], "info": {"Version": "25.2.0"},
                   "version": "25.2.0", "package_version": None, "compatible_firmware": None, "lib64": True},
        "firmware": None, "install_info": None, "cann": [],
        "npu_smi": {"source": "file", "chips": [], "info": None, "mapping": None, "error": None, "notes": []},
        "devices": {"nodes": [], "davinci_ids": []},
        "account": {"user": "HwHiAiUser", "uid": 1000, "gid": 1000, "user_gid": 1000, "group": "HwHiAiUser"},
        "docker": None, "runtime_paths": None, "shm": None,
    }
    base.update(over)
    return base


def _chip(npu, name, family, health="OK", procs=()):
    return {"npu": npu, "chip": 0, "phy_id": None, "name": name, "family": family, "model": name, "health": health,
            "class_note": None, "processes": list(procs), "memory_mb": 65536}


def ids(doc):
    return [(f["severity"], f["id"]) for f in doc["findings"]]


def test_a_crashing_check_becomes_a_finding_and_the_rest_run(matrix):
    def broken(ctx):
        raise KeyError("surprise")

    checks = [("first", audit_chips.check_chip_health), ("broken", broken), ("last", audit_chips.check_chip_busy)]
    rep = _report(npu_smi={"source": "file", "chips": [_chip(0, "910B2", "910b", "Alarm", [{"pid": 9, "name": "py"}])]})
    doc = audit.audit(rep, matrix, checks=checks)
    assert ids(doc) == [("error", "chip-unhealthy"), ("warning", "check-crashed"), ("warning", "chip-busy")]
    crashed = doc["findings"][1]
    assert crashed["check"] == "broken" and "KeyError: 'surprise'" in crashed["message"]
    assert doc["exit_code"] == 2


def test_every_registered_check_survives_an_empty_report(matrix):
    empty = {"schema": "provision.host/1", "root": "/", "probe_errors": []}
    doc = audit.audit(empty, matrix, audit.AuditOptions(card="800T-A2", mode="runtime", image_stack={}))
    assert "check-crashed" not in [f["id"] for f in doc["findings"]]


def test_health_states(matrix):
    rep = _report(npu_smi={"source": "file", "chips": [_chip(0, "910B2", "910b", "Critical"),
                                                        _chip(1, "910B2", "910b", "Warning"),
                                                        _chip(2, "910B2", "910b", "OK")]})
    doc = audit.audit(rep, matrix, checks=[("h", audit_chips.check_chip_health)])
    assert [(f["id"], f["message"]) for f in doc["findings"]] == [
        ("chip-unhealthy", "NPU 0: health Critical"), ("chip-health-warning", "NPU 1: health Warning")]


def test_shm_threshold_comes_from_the_matrix(matrix):
    doc = audit.audit(_report(shm={"path": "/dev/shm", "total_mb": 64, "free_mb": 64}), matrix,
                      checks=[("shm", audit_system.check_shm)])
    assert [(f["id"], f["message"]) for f in doc["findings"]] == [("shm-small", "/dev/shm is 64 MB, below 2048 MB")]
    doc = audit.audit(_report(shm={"path": "/dev/shm", "total_mb": 4096, "free_mb": 10}), matrix,
                      checks=[("shm", audit_system.check_shm)])
    assert doc["findings"] == []


def test_device_numbering_checks(matrix):
    chips = [dict(_chip(n, "Ascend910", "a3"), phy_id=n) for n in range(4)]
    nodes = [{"name": f"davinci{n}", "type": "char", "mode": "0o660", "gid": 1000} for n in (0, 1, 2, 5)]
    nodes += [{"name": "davinci_manager", "type": "char", "mode": "0o660", "gid": 1000},
              {"name": "hisi_hdc", "type": "char", "mode": "0o660", "gid": 1001}]
    rep = _report(npu_smi={"source": "file", "chips": chips, "info": {"second_id": "Phy-ID"}},
                  devices={"nodes": nodes, "davinci_ids": [0, 1, 2, 5]})
    doc = audit.audit(rep, matrix, checks=[("d", audit_system.check_devices)])
    assert [(f["id"], f["message"]) for f in doc["findings"]] == [
        ("device-nodes-missing", "/dev/devmm_svm missing"),
        ("device-ids-mismatch", "npu-smi Phy-ID ids [0, 1, 2, 3] differ from /dev/davinci ids [0, 1, 2, 5]"),
        ("device-group-unexpected", "device nodes not in the HwHiAiUser group (gid 1000): hisi_hdc (gid 1001)"),
    ]


# ------------------------------------------------------------------ image


def resolved(matrix, **options):
    return copy.deepcopy(cached.cached_resolve(matrix, request.build(matrix, **options)))


@pytest.fixture
def seed_report(audit_host, matrix):
    h = audit_host("seed-800ta2")
    return host.probe(h.root, h.dev_root, runtime_mounts=audit.runtime_mounts(matrix), chip_rows=matrix.rows("chips"))


def image_doc(matrix, report, stack, **kw):
    return audit.audit(report, matrix, audit.AuditOptions(image="provision/test:1", image_stack=stack, **kw),
                       checks=[("image", audit_image.check_image)])


def test_image_that_fits(matrix, seed_report):
    stack = resolved(matrix, card="800T-A2", driver="25.0.rc1.1", arch="aarch64")
    doc = image_doc(matrix, seed_report, stack)
    assert [f["id"] for f in doc["findings"]] == ["image-driver-cann-ok", "image-fits"]
    assert doc["exit_code"] == 0 and doc["image"]["stack_id"] == stack["id"] and doc["image"]["recommended"] is None


def test_image_needing_a_newer_driver_gets_a_recommendation(matrix, seed_report):
    stack = resolved(matrix, card="800T-A2", cann="9.1.0", arch="aarch64")
    doc = image_doc(matrix, seed_report, stack)
    assert [f["id"] for f in doc["findings"]] == ["image-driver-too-old", "image-recommendation"]
    assert "provision/test:1 (CANN 9.1.0)" in doc["findings"][0]["message"]
    rec = doc["image"]["recommended"]["stack"]
    assert driverfit.driver_verdict("25.0.rc1.1", matrix.cann(rec["cann"]["version"]), matrix)[0] in ("ok", "patch")
    assert doc["findings"][1]["remedy"] == "provision build --card 800T-A2 --driver 25.0.rc1.1 --arch aarch64 --task train --framework pytorch"
    assert rec["base_image"]["ref"] in doc["findings"][1]["message"]


def test_image_for_another_chip_and_arch(matrix, seed_report):
    stack = resolved(matrix, card="800T-A3", driver="25.0.rc1.1", arch="x86_64")
    doc = image_doc(matrix, seed_report, stack)
    assert [f["id"] for f in doc["findings"]] == [
        "image-arch-mismatch", "image-chip-mismatch", "image-driver-cann-ok", "image-recommendation"]
    assert doc["findings"][0]["message"] == "provision/test:1 is built for x86_64; this host is aarch64"
    assert doc["exit_code"] == 2


def test_label_driver_list_is_trusted_over_the_matrix(matrix, seed_report):
    stack = resolved(matrix, card="800T-A2", driver="25.0.rc1.1", arch="aarch64")
    stack["driver"] = {"paired": ["26.1.0"], "compatible": []}
    doc = image_doc(matrix, seed_report, stack)
    assert doc["findings"][0]["id"] == "image-driver-too-old"


def test_inference_image_on_training_host_task_from_label(matrix, audit_host):
    h = audit_host("seed-310-300i")
    rep = host.probe(h.root, h.dev_root, chip_rows=matrix.rows("chips"))
    stack = resolved(matrix, card="300I-Pro", task="inference", arch="aarch64")
    doc = audit.audit(rep, matrix, audit.AuditOptions(image="i", image_stack=stack))
    found = [f["id"] for f in doc["findings"]]
    assert "chip-inference-only" not in found  # the image's task is inference
    assert "image-chip-mismatch" in found      # 310P image on a 310 host


def test_invalid_label(matrix, seed_report):
    doc = image_doc(matrix, seed_report, {"not": "a stack"})
    assert [f["id"] for f in doc["findings"]] == ["image-label-invalid"]


def test_stack_from_labels(matrix):
    stack = resolved(matrix, card="800T-A2", arch="aarch64")
    labels = {image_labels.STACK_LABEL: json.dumps(stack, separators=(",", ":")), image_labels.STACK_ID_LABEL: stack["id"]}
    assert image_labels.stack_from_labels(labels) == stack
    with pytest.raises(ProvisionError, match="has no org.provision.stack label"):
        image_labels.stack_from_labels({}, "img")
    with pytest.raises(ProvisionError, match="not valid JSON"):
        image_labels.stack_from_labels({image_labels.STACK_LABEL: "{nope"}, "img")


def test_findings_exit_code_rule():
    f = findings
    assert f.exit_code([]) == 0
    assert f.exit_code([f.info("a", "x")]) == 0
    assert f.exit_code([f.info("a", "x"), f.warning("b", "y")]) == 1
    assert f.exit_code([f.warning("b", "y"), f.error("c", "z")]) == 2
    assert [x.id for x in f.ordered([f.info("i", ""), f.error("e", ""), f.warning("w", "")])] == ["e", "w", "i"]
    assert f.error("x", "two\nlines", "fix\n it").message == "two lines"
    with pytest.raises(ValueError):
        f.Finding("fatal", "x", "y")


# --------------------------------------------------- seed-800ta2, one change at a time


def _rm(p):
    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()


def _move_driver(root):
    (root / "usr/local/npu").mkdir(parents=True)
    shutil.move(root / "usr/local/Ascend/driver", root / "usr/local/npu/driver")


def _copy_driver(root):
    shutil.copytree(root / "usr/local/Ascend/driver", root / "usr/local/npu/driver")


def _edit(path, old, new):
    path.write_text(path.read_text().replace(old, new))


def _no_ranges(root):
    (root / "usr/local/Ascend/driver/version.info").write_text("Version=25.2.0\n")
    (root / "usr/local/Ascend/firmware/version.info").write_text("Version=7.8.0.5.216\n")


MUTATIONS = {
    "no driver, no CANN": (lambda r, d: (_rm(r / "usr/local/Ascend/driver"), _rm(r / "usr/local/Ascend/ascend-toolkit")),
                           ("error", "driver-missing")),
    "driver under /usr/local/npu": (lambda r, d: _move_driver(r), ("info", "driver-alternative-root")),
    "two driver roots": (lambda r, d: _copy_driver(r), ("warning", "driver-roots-multiple")),
    "x86_64 toolkit": (lambda r, d: _edit(r / "usr/local/Ascend/ascend-toolkit/8.2.RC1/aarch64-linux/"
                                          "ascend_toolkit_install.info", "arch=aarch64", "arch=x86_64"),
                       ("warning", "cann-arch-mismatch")),
    "no HwHiAiUser user": (lambda r, d: (r / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n"),
                           ("info", "hwhiaiuser-user-missing")),
    "no HwHiAiUser at all": (lambda r, d: ((r / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n"),
                                           (r / "etc/group").write_text("root:x:0:\n")),
                             ("warning", "hwhiaiuser-missing")),
    "broken daemon.json": (lambda r, d: (r / "etc/docker/daemon.json").write_text("{oops"),
                           ("warning", "docker-daemon-json-invalid")),
    "no davinci nodes": (lambda r, d: [_rm(p) for p in d.glob("davinci[0-9]*")], ("error", "device-nodes-missing")),
    "no stated ranges": (lambda r, d: _no_ranges(r), ("info", "firmware-range-unknown")),
    "firmware file empty": (lambda r, d: (r / "usr/local/Ascend/firmware/version.info").write_text(""),
                            ("warning", "firmware-version-unknown")),
}


@pytest.mark.parametrize("what", sorted(MUTATIONS))
def test_one_change_one_finding(what, audit_host, matrix):
    h = audit_host("seed-800ta2")
    change, expect = MUTATIONS[what]
    change(h.root, h.dev_root)
    rep = host.probe(h.root, h.dev_root, runtime_mounts=audit.runtime_mounts(matrix), chip_rows=matrix.rows("chips"))
    doc = audit.audit(rep, matrix)
    assert expect in ids(doc), ids(doc)
    assert "check-crashed" not in [i for _, i in ids(doc)]


def test_runtime_registered_but_not_default(audit_host, matrix):
    h = audit_host("seed-800ta2")
    _edit(h.root / "etc/docker/daemon.json", '"default-runtime": "ascend",', "")
    rep = host.probe(h.root, h.dev_root, chip_rows=matrix.rows("chips"))
    doc = audit.audit(rep, matrix, audit.AuditOptions(mode="runtime"))
    assert ("info", "ascend-runtime-not-default") in ids(doc) and doc["exit_code"] == 0


def test_image_on_a_host_without_driver(matrix, audit_host):
    h = audit_host("broken-no-driver")
    rep = host.probe(h.root, h.dev_root, chip_rows=matrix.rows("chips"))
    stack = resolved(matrix, card="800T-A2", arch="aarch64")
    doc = image_doc(matrix, rep, stack)
    assert [f["id"] for f in doc["findings"]] == ["image-no-driver", "image-recommendation"]
    assert doc["findings"][1]["message"] == ("the matrix has no stack for this host: the host's chip family is not"
                                             " known (pass --card)")
    doc = image_doc(matrix, rep, stack, card="800T-A2")
    rec = doc["image"]["recommended"]
    assert rec["request"] == {"card": "800T-A2", "driver": None, "arch": "aarch64", "task": "train",
                              "framework": "pytorch"}
    assert f"the matrix recommends CANN {rec['stack']['cann']['version']}" in doc["findings"][1]["message"]


def test_npu_unavailable_from_mapping(matrix):
    rep = _report(npu_smi={"source": "file", "chips": [], "info": None, "notes": [], "error": None,
                           "mapping": {"rows": [{"npu": -1, "chip": 2, "logic_id": None, "name": "x", "mcu": False}]}})
    doc = audit.audit(rep, matrix, checks=[("n", audit_chips.check_npu_smi)])
    assert ids(doc) == [("warning", "npu-unavailable")]


def test_busy_chip_on_a3_names_the_die(matrix):
    chips = [dict(_chip(n // 2, "Ascend910", "a3"), chip=n % 2, phy_id=n) for n in range(4)]
    chips[3]["processes"] = [{"pid": 42, "name": "python"}]
    doc = audit.audit(_report(npu_smi={"source": "file", "chips": chips}), matrix, checks=[("b", audit_chips.check_chip_busy)])
    assert doc["findings"][0]["message"] == "chip(s) in use: NPU 1 chip 1: pid 42 python"
