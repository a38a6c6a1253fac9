"""`provision audit` on every fixture host: the exact findings and exit code, text golden files, options."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.host import fakehost
from tests.helpers import golden as goldens
from tests.helpers import hosts

GOLDEN = Path(__file__).resolve().parent / "golden"

# fixture -> (exit code, [(severity, check id), ...] in report order)
EXPECTED = {
    "seed-310-300i": (2, [
        ("error", "chip-inference-only"),
        ("info", "firmware-version-unknown"),
        ("info", "ascend-runtime-missing"),
    ]),
    "seed-800ta2": (0, [
        ("info", "driver-cann-ok"),
    ]),
    "seed-300ta2-kylin": (0, [
        ("info", "cann-unknown"),
        ("info", "chip-memory-unexpected"),
        ("info", "ascend-runtime-missing"),
    ]),
    "a3-16": (1, [
        ("warning", "driver-unlisted"),
        ("info", "firmware-version-unknown"),
        ("info", "ascend-runtime-missing"),
    ]),
    "broken-driver-old": (2, [
        ("error", "driver-too-old"),
        ("info", "ascend-runtime-missing"),
    ]),
    "broken-firmware": (2, [
        ("error", "firmware-driver-mismatch"),
        ("info", "ascend-runtime-missing"),
    ]),
    "broken-cann85-driver": (2, [
        ("error", "driver-too-old"),
        ("info", "firmware-version-unknown"),
        ("info", "ascend-runtime-missing"),
    ]),
    "broken-busy-chip": (1, [
        ("warning", "chip-busy"),
        ("info", "driver-cann-ok"),
        ("info", "ascend-runtime-missing"),
    ]),
    "broken-unhealthy-910": (1, [
        ("warning", "chip-health-warning"),
        ("warning", "chip-unknown"),
        ("info", "firmware-version-unknown"),
        ("info", "ascend-runtime-missing"),
    ]),
    "broken-mixed-families": (1, [
        ("warning", "chips-mixed-families"),
        ("info", "driver-cann-ok"),
        ("info", "ascend-runtime-missing"),
    ]),
    "broken-perms": (2, [
        ("error", "runtime-mount-refused"),
        ("warning", "device-not-group-readable"),
        ("warning", "hwhiaiuser-group-missing"),
        ("info", "driver-cann-ok"),
    ]),
    "broken-no-driver": (2, [
        ("error", "cann-without-driver"),
    ]),
    "fit-800ta2-24.1rc3": (0, [
        ("info", "firmware-version-unknown"),
        ("info", "ascend-runtime-missing"),
    ]),
    "fit-800ta2-24.1rc3-upgrade": (0, [
        ("info", "driver-cann-ok"),
        ("info", "ascend-runtime-missing"),
    ]),
    "fit-800ta2-23.0rc3": (1, [
        ("warning", "driver-fits-no-image"),
        ("info", "firmware-version-unknown"),
        ("info", "ascend-runtime-missing"),
    ]),
}


def smi_args(h) -> list[str]:
    """The fixture's saved npu-smi output, as an operator passes it for another system's tree (the audit never
    runs the tree's own npu-smi)."""
    return [a for f in fakehost.saved_npu_smi(h.root) for a in ("--npu-smi-output", str(f))]


def run_audit(h, *args, capsys):
    rc = main(["audit", "--root", str(h.root), "--dev-root", str(h.dev_root), *smi_args(h), "--json", *args])
    out = capsys.readouterr()
    assert out.err == ""
    doc = json.loads(out.out)
    assert doc["exit_code"] == rc
    return rc, doc


def ids(doc):
    return [(f["severity"], f["id"]) for f in doc["findings"]]


def messages(doc):
    return {f["id"]: f["message"] for f in doc["findings"]}


def test_every_audit_fixture_has_expectations():
    assert set(EXPECTED) == {n for n in hosts.names() if not n.startswith("plan-")}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_findings_and_exit_code(name, audit_host, capsys):
    rc, doc = run_audit(audit_host(name), capsys=capsys)
    code, expected = EXPECTED[name]
    assert (rc, ids(doc)) == (code, expected)
    assert doc["schema"] == "provision.audit/1"
    assert doc["summary"] == {"errors": sum(s == "error" for s, _ in expected),
                              "warnings": sum(s == "warning" for s, _ in expected),
                              "infos": sum(s == "info" for s, _ in expected)}
    for f in doc["findings"]:
        assert f["message"] and "\n" not in f["message"] and "\n" not in f["remedy"] and f["check"]


def test_a_driver_that_fits_no_official_image_is_a_warning_with_the_upgrade(audit_host, capsys):
    rc, doc = run_audit(audit_host("fit-800ta2-23.0rc3"), capsys=capsys)
    found = next(f for f in doc["findings"] if f["id"] == "driver-fits-no-image")
    assert found["message"] == ("driver 23.0.rc3 is older than every CANN with an official image for chip 910b: the"
                                " oldest, CANN 7.0.0, needs HDK 23.0.3 or 23.0.1 (paired)")
    assert found["remedy"].startswith("upgrade the Ascend HDK (driver and firmware): CANN 9.1.0, the newest with an"
                                      " image, lists 26.0.RC1 or 26.1.0 (paired)")
    assert "--base-image" in found["remedy"]
    # the same host with a driver that runs an official image: no such warning
    rc, doc = run_audit(audit_host("fit-800ta2-24.1rc3"), capsys=capsys)
    assert "driver-fits-no-image" not in {f["id"] for f in doc["findings"]}


def test_messages_name_the_versions(audit_host, capsys):
    _, doc = run_audit(audit_host("broken-driver-old"), capsys=capsys)
    msg = messages(doc)["driver-too-old"]
    assert "driver 23.0.7 is too old for CANN 8.0.RC3 (nnae" in msg and "24.1.RC3 (paired)" in msg
    remedy = doc["findings"][0]["remedy"]
    assert "provision resolve --card 800T-A2 --driver 23.0.7" in remedy
    _, doc = run_audit(audit_host("broken-firmware"), capsys=capsys)
    assert messages(doc)["firmware-driver-mismatch"] == (
        "firmware 7.1.0.11.220 does not accept driver 24.1.rc1 (its compatible_version_drv is"
        " [23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.])")
    _, doc = run_audit(audit_host("broken-cann85-driver"), capsys=capsys)
    assert "it needs 25.5.0 or 25.5.1 (paired); also 25.5.*, 25.3.*, 25.2.*, 25.0.*" in messages(doc)["driver-too-old"]
    _, doc = run_audit(audit_host("broken-busy-chip"), capsys=capsys)
    assert messages(doc)["chip-busy"] == "chip(s) in use: NPU 3: pid 1203463 python3.10"
    _, doc = run_audit(audit_host("broken-perms"), capsys=capsys)
    assert messages(doc)["device-not-group-readable"] == (
        "device nodes not group read/write: davinci0-7, davinci_manager, devmm_svm, hisi_hdc (mode 0o600)")


def test_inference_task_clears_the_310_host(audit_host, capsys):
    rc, doc = run_audit(audit_host("seed-310-300i"), "--task", "inference", capsys=capsys)
    assert rc == 0 and ("error", "chip-inference-only") not in ids(doc)


@pytest.mark.parametrize("name, card, expect", [
    ("seed-310-300i", "800T-A2", ("error", "card-family-mismatch")),
    ("seed-800ta2", "300I", ("error", "card-family-mismatch")),
    ("seed-800ta2", "a3", ("error", "card-family-mismatch")),
    ("seed-800ta2", "800I-A2", ("error", "card-inference-only")),
    ("a3-16", "800T-A3", None),
    ("seed-300ta2-kylin", "300T-A2", None),
])
def test_card_belief_is_checked(name, card, expect, audit_host, capsys):
    rc, doc = run_audit(audit_host(name), "--card", card, capsys=capsys)
    got = [x for x in ids(doc) if x[1].startswith("card-")]
    assert got == ([expect] if expect else [])
    if expect:
        assert rc == 2


def test_card_mismatch_message(audit_host, capsys):
    _, doc = run_audit(audit_host("seed-310-300i"), "--card", "800T-A2", capsys=capsys)
    assert messages(doc)["card-family-mismatch"] == (
        "--card 800T-A2 is Ascend 910B (Atlas A2), but this host has Ascend 310 (npu-smi names: 310)")


@pytest.mark.parametrize("name, mode, expect, code", [
    ("a3-16", "runtime", [("error", "ascend-runtime-missing")], 2),
    ("seed-800ta2", "runtime", [], 0),
    ("seed-800ta2", "cdi", [("error", "cdi-spec-missing")], 2),
    ("seed-800ta2", "devices", [], 0),
])
def test_mode(name, mode, expect, code, audit_host, capsys):
    rc, doc = run_audit(audit_host(name), "--mode", mode, capsys=capsys)
    assert [x for x in ids(doc) if x[1].startswith(("ascend-runtime", "cdi-"))] == expect
    assert rc == code


def test_cdi_spec_present(audit_host, capsys):
    h = audit_host("seed-800ta2")
    (h.root / "etc/cdi").mkdir(parents=True)
    (h.root / "etc/cdi/ascend.yaml").write_text('cdiVersion: "0.8.0"\nkind: ascend.com/npu\ndevices: []\n')
    rc, doc = run_audit(h, "--mode", "cdi", capsys=capsys)
    assert rc == 0
    assert doc["host"]["docker"]["cdi"][0] == {"dir": "/etc/cdi", "exists": True, "specs": ["ascend.yaml"],
                                               "ascend_specs": ["ascend.yaml"]}


def test_saved_output_instead_of_running(audit_host, capsys, tmp_path):
    h = audit_host("seed-800ta2")
    saved = tmp_path / "smi.txt"
    saved.write_text((h.root / "usr/local/share/npu-smi-fixture/info.txt").read_text())
    (h.root / "usr/local/bin/npu-smi").unlink()
    rc = main(["audit", "--root", str(h.root), "--dev-root", str(h.dev_root), "--npu-smi-output", str(saved), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["host"]["npu_smi"]["source"] == "file" and len(doc["host"]["npu_smi"]["chips"]) == 8
    rc = main(["audit", "--root", str(h.root), "--dev-root", str(h.dev_root), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert ("warning", "npu-smi-absent") in ids(doc) and rc == 1


def test_unknown_npu_smi_text_is_a_warning(audit_host, capsys, tmp_path):
    h = audit_host("seed-800ta2")
    junk = tmp_path / "junk.txt"
    junk.write_text("Usage: npu-smi [OPTIONS]\nSomething new\n")
    rc, doc = run_audit(h, "--npu-smi-output", str(junk), capsys=capsys)
    assert ("warning", "npu-smi-unparsed") in ids(doc)
    assert ("error", "device-nodes-missing") not in ids(doc) and rc == 1


def test_another_tree_is_never_executed(audit_host, capsys, tmp_path):
    # --root is another system's disk: its npu-smi (here one that would leave a mark) is never run; the audit
    # says so and asks for the saved output instead.
    h = audit_host("seed-800ta2")
    mark = tmp_path / "ran"
    (h.root / "usr/local/bin/npu-smi").write_text(f"#!/bin/sh\ntouch {mark}\n")
    rc = main(["audit", "--root", str(h.root), "--dev-root", str(h.dev_root), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert not mark.exists() and rc == 0
    assert doc["host"]["npu_smi"]["source"] == "not-run" and ("info", "npu-smi-not-run") in ids(doc)
    assert "--npu-smi-output" in {f["id"]: f for f in doc["findings"]}["npu-smi-not-run"]["remedy"]


def test_engine_unreachable_finding(audit_host, capsys, monkeypatch):
    from provisioner.host import audit
    from provisioner.host import probe as host
    from provisioner.matrix import loader

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    h = audit_host("seed-800ta2")
    m = loader.load()
    rep = host.probe(h.root, h.dev_root, run_tree_programs=True, engine="probe", chip_rows=m.rows("chips"))
    doc = audit.audit(rep, m)
    assert ("info", "docker-engine-unreachable") in ids(doc) and doc["exit_code"] == 0
    doc = audit.audit(rep, m, audit.AuditOptions(mode="devices"))
    assert ("warning", "docker-engine-unreachable") in ids(doc)


@pytest.mark.parametrize("args, message", [
    (["--root", "/nonexistent/x"], "provision: error: --root /nonexistent/x: not a directory"),
    (["--card", "nosuchcard"], "provision: error: unknown card 'nosuchcard'"),
    (["--npu-smi-output", "/nonexistent/smi.txt"], "provision: error: --npu-smi-output /nonexistent/smi.txt: no such file"),
    (["--mode", "magic"], "provision: error: Invalid value for '--mode'"),
])
def test_bad_input_is_one_line_exit_2(args, message, capsys):
    rc = main(["audit", "--json", *args])
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    assert out.err.startswith(message) and out.err.count("\n") == 1


def test_image_without_engine_is_one_line(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    rc = main(["audit", "--root", str(tmp_path), "--image", "provision/x:1"])
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    assert out.err.startswith("provision: error: --image provision/x:1: Docker engine not reachable")
    assert out.err.count("\n") == 1


def _normalized(text: str, h) -> str:
    return text.replace(str(h.root), "<root>")


@pytest.mark.parametrize("name", ["seed-800ta2", "seed-310-300i", "broken-driver-old", "broken-perms",
                                  "fit-800ta2-23.0rc3"])
def test_text_report_golden(name, audit_host, capsys):
    h = audit_host(name)
    rc = main(["audit", "--root", str(h.root), "--dev-root", str(h.dev_root), *smi_args(h)])
    text = _normalized(capsys.readouterr().out, h)
    assert rc == EXPECTED[name][0]
    goldens.check(GOLDEN / f"audit-{name}.txt", text)


@pytest.mark.mknod
def test_cli_subprocess_exit_codes(audit_host_real):
    # The installed entry point, as a user runs it: exit code follows the worst finding.
    for name in ("seed-800ta2", "a3-16", "broken-driver-old"):
        h = audit_host_real(name)
        res = subprocess.run([sys.executable, "-m", "provisioner.cli", "audit", "--root", str(h.root),
                              "--dev-root", str(h.dev_root), *smi_args(h)], capture_output=True, text=True)
        assert res.returncode == EXPECTED[name][0], res.stderr
        assert re.search(rf"\(exit {EXPECTED[name][0]}\)\n$", res.stdout)
