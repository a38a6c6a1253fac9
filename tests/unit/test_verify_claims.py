"""`provision matrix verify`: driver ranges against the release notes' HDK tables, job handler and script names
against the pinned framework files, snapshot ages (provisioner/matrix/verify_claims.py).

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
    assert len(bad) == 9  # one per MindSpeed-LLM commit the sets pin (six LLM sets, the three RL sets' own)
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
    assert {c["check"] for c in doc["claims"]} == ({"hdk"} if overlay == OLD_900 else {"job-name"})


def test_old_snapshots_are_a_note_and_a_warning_with_all(facts, tmp_path):
    young = report(facts, tmp_path, today=datetime.date(2026, 7, 8))
    assert young.stale == [] and not any(c.check == "snapshot" for c in young.claims)
    old = report(facts, tmp_path, today=datetime.date(2027, 6, 1))
    assert any(line.startswith("matrices/snapshots/cann-images.json is ") for line in old.stale)
    assert all(c.status == "note" for c in old.claims if c.check == "snapshot") and not old.mismatches
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
