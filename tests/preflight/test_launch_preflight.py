"""`provision launch --preflight`: the host's preflight report before the launch; a failed check stops it."""

import json
from pathlib import Path

import pytest

from provisioner.cli import launching, main
from provisioner.errors import ProvisionError
from provisioner.matrix import loader
from provisioner.preflight import report

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "preflight"


def _doc(name):
    host = FIXTURES / name
    return report.run(loader.load([]), str(host / "tree"), saved=[str(host / "npu_info_before.txt")])


def test_a_failed_check_stops_the_launch(capsys):
    with pytest.raises(ProvisionError, match="preflight failed"):
        launching.preflight_verdict(_doc("preflight-ecc-error"), as_json=False)
    err = capsys.readouterr().err
    assert "FAIL  chip-ecc" in err and "NPU 5" in err
    assert launching.preflight_verdict(_doc("preflight-link-down"), as_json=True) == 2
    out = capsys.readouterr().out
    assert json.loads(out)["schema"] == "provision.preflight/1"


def test_a_clean_host_lets_the_launch_go_on(capsys):
    assert launching.preflight_verdict(_doc("preflight-clean"), as_json=False) is None
    assert "ready" in capsys.readouterr().err


def test_launch_preflight_runs_before_the_engine_is_asked(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    rc = main(["launch", "--card", "800T-A2", "--devices", "0-7", "--root", str(FIXTURES / "preflight-clean" / "tree"),
               "--image", "provision/none:latest", "--preflight", "--hccl-connect-timeout", "600"])
    err = capsys.readouterr().err
    # another host's tree: nothing measured, so no failure; the launch goes on and meets the missing engine
    assert "preflight of" in err and "N/A   chip-health" in err
    assert rc == 2 and err.strip().splitlines()[-1].startswith("provision: error:")


def test_selftest_preflight_runs_before_the_engine_is_asked(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    rc = main(["selftest", "--card", "800T-A2", "--devices", "0-7", "--root", str(FIXTURES / "preflight-clean" / "tree"),
               "--image", "provision/none:latest", "--preflight"])
    err = capsys.readouterr().err
    assert "preflight of" in err and "N/A   chip-health" in err
    assert rc == 2 and err.strip().splitlines()[-1].startswith("provision: error:")
