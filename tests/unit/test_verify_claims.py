"""`provision matrix verify`: driver ranges against the release notes' HDK tables, job handler and script names
against the pinned framework files, launch-variable ranges against the CANN env-var reference, framework sets and
lock pins against their release notes, snapshot ages (provisioner/matrix/verify_claims.py).

Planted errors come as overlays on the shipped matrix (a temporary copy of the rows they change)."""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.matrix import loader, snapshot, verify, verify_claims

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def facts():
    return snapshot.load()


def report(facts, tmp_path, overlay: str | None = None, today=None) -> verify.Report:
    layers = []
    if overlay is not None:
        (tmp_path / "overlay.yaml").write_text(overlay)
        layers = [str(tmp_path / "overlay.yaml")]
    return verify.verify(loader.load(layers, lenient=True), facts, today)


def cli(tmp_path, overlay: str, *args) -> subprocess.CompletedProcess:
    (tmp_path / "overlay.yaml").write_text(overlay)
    return subprocess.run([sys.executable, "-m", "provisioner.cli", "matrix", "verify", "--matrix",
                           str(tmp_path / "overlay.yaml"), *args], capture_output=True, text=True, cwd=ROOT)


# CANN 9.0.0 with the HDK list it had before the 9.1.0 / 9.1.1 release notes (no 25.0.X, 25.2.X, 25.3.X)
# Upstream disagrees with the shipped data here (MindSpeed-LLM release notes @ 2b7130ca pair 26.0.0 with triton-ascend
# 3.2.1; its lock pins 3.2.0): reported by lock-pin, and fixed on the branch that re-locks MindSpeed-LLM 26.0.0.
KNOWN = {("lock-pin", "framework_envs mindspeed-llm-26.0.0-torch2.7.1-py3.10", "triton-ascend")}


def known(c) -> bool:
    c = c if isinstance(c, dict) else c.__dict__
    return (c["check"], c["subject"], c["field"]) in KNOWN


OLD_900 = "cann:\n  - version: 9.0.0\n    hdk_compatible: [25.5.*, 26.0.RC1, 25.7.RC1, 26.1.0]\n"
HANDLER = "job_data_formats:\n  - id: mindspeed-llm/alpaca\n    handler: AlpacaInstructionHandler\n"


def test_the_shipped_matrix_has_no_mismatch_of_these_kinds(facts, tmp_path):
    r = report(facts, tmp_path)
    counts = r.counts()
    assert counts["hdk"]["ok"] > 50 and counts["hdk"]["mismatch"] == 0
    assert counts["job-name"]["ok"] >= 12 and counts["job-name"]["mismatch"] == 0


def test_a_planted_wrong_driver_range_is_reported(facts, tmp_path):
    bad = [c for c in report(facts, tmp_path, OLD_900).mismatches if c.check == "hdk"]
    assert {c.found for c in bad} == {"25.0.X: Y", "25.2.X: Y", "25.3.X: Y", "26.1.1: Y"}
    assert all(c.subject == "cann 9.0.0" and "CANN 9.0.X compatible with HDK" in c.evidence for c in bad)
    assert any("RELMGMT-911 (9.1.1/release-notes.md @ 0436983c5c70" in c.evidence for c in bad)


def test_a_release_the_notes_exclude_is_reported_too(facts, tmp_path):
    text = "cann:\n  - version: 9.1.1\n    hdk_compatible: [25.0.*, 25.5.*, 25.3.*, 25.2.*, 26.0.RC1, 25.7.RC1, 26.1.0, 26.1.1]\n"
    bad = [c for c in report(facts, tmp_path, text).mismatches if c.check == "hdk"]
    assert [c.found for c in bad] == ["25.0.X: N", "25.0.X: N"]  # the 9.1.0 and the 9.1.1 notes


def test_a_paired_hdk_the_notes_name_must_be_listed(facts, tmp_path):
    bad = report(facts, tmp_path, "cann:\n  - version: 9.1.1\n    hdk_paired: [26.1.0]\n"
                 "    hdk_compatible: [25.5.*]\n").mismatches
    assert any(c.check == "hdk" and c.field == "hdk_paired" and c.found == "26.1.1 paired" for c in bad)


def test_a_planted_wrong_handler_name_is_reported(facts, tmp_path):
    bad = [c for c in report(facts, tmp_path, HANDLER).mismatches if c.check == "job-name"]
    assert len(bad) == 10  # one per MindSpeed-LLM commit the sets pin (six LLM sets, the four RL sets' own)
    assert all(c.found == "no such class" and "AlpacaStyleInstructionHandler" in c.evidence for c in bad)


def test_a_planted_wrong_script_path_is_reported(facts, tmp_path):
    text = ("job_scripts:\n  - id: mindformers-1.6/qwen2\n    scripts: {alpaca_converter: research/qwen2_5/alpaca_converter.py,"
            " preprocess: research/qwen2/qwen2_preprocess.py}\n")
    bad = [c for c in report(facts, tmp_path, text).mismatches if c.check == "job-name"]
    assert [(c.field, c.found) for c in bad] == [("scripts.alpaca_converter", "absent")]


@pytest.mark.parametrize("overlay", [OLD_900, HANDLER])
def test_the_cli_exits_1_on_them(tmp_path, overlay):
    proc = cli(tmp_path, overlay, "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert {c["check"] for c in doc["claims"] if not known(c)} == ({"hdk"} if overlay == OLD_900 else {"job-name"})


def test_old_snapshots_are_a_note_and_a_warning_with_all(facts, tmp_path):
    young = report(facts, tmp_path, today=datetime.date(2026, 7, 8))
    assert young.stale == [] and not any(c.check == "snapshot" for c in young.claims)
    old = report(facts, tmp_path, today=datetime.date(2027, 6, 1))
    assert any(line.startswith("matrices/snapshots/cann-images.json is ") for line in old.stale)
    assert all(c.status == "note" for c in old.claims if c.check == "snapshot")
    assert not [c for c in old.mismatches if not known(c)]
    proc = cli(tmp_path, "{}\n", "--all")
    today = report(facts, tmp_path).stale
    assert [ln for ln in proc.stderr.splitlines() if "days old" in ln] == [f"provision: warning: {x}" for x in today]
    assert "days old" not in cli(tmp_path, "{}\n").stderr


def test_hdk_tables_are_read_from_both_forms():
    html = ("<table><tr><th>CANN</th><th>驱动版本（Ascend HDK）</th></tr><tr><td>9.1.1</td>"
            "<td><a href='x'>26.1.1</a></td></tr></table>\n<table><thead><tr><th rowspan='3'>CANN</th>"
            "<th colspan='2'>驱动版本</th></tr><tr><th>25.0.X</th><th>26.0.RC1/25.7.RC1</th></tr></thead>"
            "<tbody><tr><td>9.1.X</td><td>N</td><td>Y</td></tr></tbody></table>")
    assert snapshot.extract_hdk(html) == {"paired": {"9.1.1": ["26.1.1"]},
                                          "compatible": {"9.1.X": {"25.0.X": False, "26.0.RC1/25.7.RC1": True}}}
    pipe = ("|CANN版本  |  配套Ascend HDK版本|\n|--|--|\n| [CANN 9.0.0](https://a) | [Ascend HDK 26.0.RC1 ](https://b)"
            "<br> [Ascend HDK 25.5.2](https://c) |\n")
    assert snapshot.extract_hdk(pipe)["paired"] == {"9.0.0": ["26.0.RC1", "25.5.2"]}
    assert verify_claims._covers("9.0.X", "9.0.1") and not verify_claims._covers("9.0.X", "9.0.0-beta.1")
    assert verify_claims._representatives("26.0.RC1/25.7.RC1") == ["26.0.RC1", "25.7.RC1"]


# ------------------------------------------------------------------ env ranges (env-reference.json)


def test_every_launch_variable_is_checked_or_reported_unchecked(facts, tmp_path):
    r = report(facts, tmp_path)
    env = [c for c in r.claims if c.check == "env"]
    names = {row["name"] for row in loader.load().rows("audit_env")}
    assert {c.subject.split(" ", 1)[1] for c in env} == names
    assert not [c for c in env if c.status == "mismatch"]
    unchecked = {c.subject for c in env if c.status == "unchecked"}
    pages = {n for n, rec in facts.env_ref.items() if rec.get("page")}
    assert unchecked == {f"audit_env {n}" for n in names - pages} and len(pages) >= 24
    # unchecked is not passing: not among the checked claims, counted apart
    assert r.counts()["env"]["unchecked"] == len(unchecked) and r.as_json()["unchecked"] >= len(unchecked)
    assert r.checked == sum(1 for c in r.claims if c.status in ("ok", "mismatch"))


def test_a_planted_wrong_env_range_is_reported(facts, tmp_path):
    bad = report(facts, tmp_path, "audit_env:\n  - name: HCCL_RDMA_RETRY_CNT\n    max: 8\n").mismatches
    [c] = [c for c in bad if c.check == "env"]
    assert (c.subject, c.field, c.claimed, c.found) == ("audit_env HCCL_RDMA_RETRY_CNT", "range", "[1, 8] default 7",
                                                        "[1, 7] default 7")
    assert "envref_07_0092" in c.evidence and "取值范围为[1,7]" in c.evidence


def test_a_wrong_bound_for_one_chip_family_is_reported(facts, tmp_path):
    text = ("audit_env:\n  - name: HCCL_EXEC_TIMEOUT\n    by_family:\n      - families: [\"910\", 310p]\n"
            "        min: 1\n        max: 20000\n")
    bad = [c for c in report(facts, tmp_path, text).mismatches if c.check == "env"]
    assert sorted(c.field for c in bad) == ["range on 310p", "range on 910"]
    assert all(c.found == "[1, 17340] default 1836" for c in bad)


def test_a_documented_value_the_row_refuses_and_a_missing_default_are_reported(facts, tmp_path):
    text = "audit_env:\n  - name: HCCL_DETERMINISTIC\n    values: [\"0\", \"1\", \"true\", \"false\"]\n    default: \"0\"\n"
    bad = {c.field: c for c in report(facts, tmp_path, text).mismatches if c.check == "env"}
    assert set(bad) == {"values", "default"} and "the row refuses strict" in bad["values"].evidence
    assert bad["default"].found == "false"


def test_a_variable_without_a_recorded_page_is_unchecked_not_passing(facts, tmp_path):
    r = report(facts, tmp_path, "audit_env:\n  - name: HCCL_NEW_KNOB\n    kind: int\n    min: 0\n"
                                "    source: https://example.org/hccl-new-knob\n")
    [c] = [c for c in r.claims if c.subject == "audit_env HCCL_NEW_KNOB"]
    assert c.status == "unchecked" and "no entry" in c.evidence and c not in r.mismatches


def test_the_cli_exits_1_on_a_planted_env_range(tmp_path):
    proc = cli(tmp_path, "audit_env:\n  - name: HCCL_MULTI_QP_THRESHOLD\n    min: 0\n", "--json")
    assert proc.returncode == 1, proc.stderr
    claims = [c for c in json.loads(proc.stdout)["claims"] if not known(c)]
    assert [(c["check"], c["claimed"], c["found"]) for c in claims] == [
        ("env", "[0, 8192] default 512", "[1, 8192] default 512")]


def test_env_pages_are_read_by_pattern():
    assert snapshot.extract_env("该环境变量需要配置为整数，取值范围[120,7200]，默认值为120，单位s。") == {
        "min": 120, "max": 7200, "default": "120", "quote": "该环境变量需要配置为整数，取值范围[120,7200]，默认值为120，单位s。"}
    assert snapshot.extract_env("针对Atlas 训练系列产品,单位为s,取值范围为:(0, 17340],默认值为1836。")["min"] == 1
    got = snapshot.extract_env("The value of this environment variable ranges from [0, 255] and must be an integral"
                               " multiple of 4. The default value is 132.")
    assert (got["min"], got["max"], got["default"]) == (0, 255, "132")
    assert snapshot.extract_env("an integer ranging from 5 to 20. The default value is 20.")["max"] == 20
    assert snapshot.extract_env("no numbers here") == {}


# --------------------------------------------------- lock pins (release-pins.json)

ENV_2610 = "framework_envs mindspeed-llm-26.1.0-torch2.7.1-py3.10"


def test_the_sets_agree_with_their_release_notes(facts, tmp_path):
    r = report(facts, tmp_path)
    pins = [c for c in r.claims if c.check == "lock-pin"]
    assert {c.field for c in pins if c.status == "ok"} >= {"cann", "torch", "torch_npu_product", "python"}
    assert [c for c in r.mismatches if c.check == "lock-pin" and not known(c)] == []
    # 26.0.0's lock is held to 3.2.1 (release notes @ 2b7130ca); 26.1.0's leaves triton-ascend out: a note
    [c26] = [c for c in pins if c.subject == "framework_envs mindspeed-llm-26.0.0-torch2.7.1-py3.10"]
    assert c26.found == "3.2.1" and c26.status == ("ok" if c26.claimed == "3.2.1" else "mismatch")
    [c261] = [c for c in pins if c.subject == ENV_2610]
    assert (c261.status, c261.claimed, c261.found) == ("note", "not in the lock", "3.2.2")


def test_a_planted_wrong_lock_pin_is_reported(facts, tmp_path):
    text = f"framework_envs:\n  - id: {ENV_2610.split()[1]}\n    layers:\n      base: [\"triton-ascend==3.2.0\"]\n"
    [c] = [c for c in report(facts, tmp_path, text).mismatches if c.subject == ENV_2610]
    assert (c.check, c.field, c.claimed, c.found) == ("lock-pin", "triton-ascend", "3.2.0", "3.2.2")
    assert "MindSpeed-LLM @ 2b7130ca7bea" in c.evidence and "release_notes_llm.md" in c.evidence



def test_the_26_1_0_triton_ascend_claim_says_which_file_holds_and_why(facts, tmp_path):
    """issue 26.4: the release notes @ 2b7130ca pair 26.1.0 with triton-ascend 3.2.2, the install guide at that tag
    shows 3.2.1; the 26.1.0 branch corrected the guide to 3.2.2 (04ac75c14519). The claim's evidence says so."""
    [c] = [c for c in report(facts, tmp_path).claims if c.subject == ENV_2610 and c.field == "triton-ascend"]
    assert c.found == "3.2.2"
    assert "install_guide.md @ 2b7130ca" in c.evidence and "triton-ascend==3.2.1" in c.evidence
    assert "corrected it to 3.2.2 in 04ac75c14519" in c.evidence and "lock 3.2.2" in c.evidence
    # a note only where the snapshot keeps one: 26.0.0's claim has none
    [c26] = [c for c in report(facts, tmp_path).claims
             if c.subject == "framework_envs mindspeed-llm-26.0.0-torch2.7.1-py3.10" and c.field == "triton-ascend"]
    assert "corrected" not in c26.evidence

def test_a_planted_wrong_cann_pairing_is_reported(facts, tmp_path):
    bad = report(facts, tmp_path, "llm_bundles:\n  - id: mindspeed-llm-2.3.0\n    cann: [8.3.RC1]\n").mismatches
    [c] = [c for c in bad if c.check == "lock-pin" and not known(c)]
    assert (c.subject, c.field, c.found) == ("llm_bundles mindspeed-llm-2.3.0", "cann", "8.5.0")


def test_the_cli_exits_1_on_a_planted_lock_pin(tmp_path):
    text = f"framework_envs:\n  - id: {ENV_2610.split()[1]}\n    layers:\n      base: [\"triton-ascend==3.2.1\"]\n"
    proc = cli(tmp_path, text, "--json")
    assert proc.returncode == 1, proc.stderr
    claims = [c for c in json.loads(proc.stdout)["claims"] if not known(c)]
    assert [(c["check"], c["subject"], c["claimed"], c["found"]) for c in claims] == [
        ("lock-pin", ENV_2610, "3.2.1", "3.2.2")]


def test_release_note_tables_are_read():
    text = ("**表 1**\n\n| MindSpeed LLM版本 | Megatron版本 | PyTorch版本 | TorchNPU版本 | CANN版本 | Triton-Ascend版本 |"
            " Python版本 |\n|--|--|--|--|--|--|--|\n| master（在研版本）| core_v0.12.1 | 2.7.1 | 在研版本 | 在研版本 | 在研版本 |"
            " Python3.10 |\n| 26.0.0（商用） | core_v0.12.1 | 2.7.1 | 26.0.0 | 9.0.0 | 3.2.1 | Python3.10 |\n\n"
            "|MindSpeed LLM版本|CANN版本|\n|--|--|\n|26.0.0|CANN 8.5.0|\n")
    assert snapshot.extract_release_pins(text) == {"26.0.0": {"torch": "2.7.1", "torch_npu": "26.0.0", "cann": "9.0.0",
                                                              "triton-ascend": "3.2.1", "python": "3.10"}}
