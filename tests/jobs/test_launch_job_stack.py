"""`provision launch --job FILE --dry-run --stack FILE`: a job checked before its image exists (as `k8s --job
--stack` does), through main() with no engine at all: the stack file stands in for the image's label.

The host is the simulated 4-chip 300T-A2 of test_jobrun_fake.py (its driver the one the image's CANN pairs with),
the job its tiny MindSpeed-LLM SFT; the stacks are the resolver's (tests/jobs/conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provisioner.cli import main
from tests.jobs.test_jobrun_fake import host, job  # noqa: F401 (fixtures)

IMAGE = "provision/mindspeed-llm:not-built-yet"


@pytest.fixture(autouse=True)
def no_engine(monkeypatch):
    """Any attempt to reach a container engine fails the test: the image does not exist anywhere."""
    def refuse(*a, **k):
        raise AssertionError("the engine was asked")

    monkeypatch.setattr("provisioner.engine.connect", refuse)
    monkeypatch.setattr("provisioner.devices.enginefacts.gather", refuse)


def stack_file(tmp_path: Path, stack: dict, as_resolve_output: bool = True) -> str:
    path = tmp_path / "stack.json"
    doc = {"schema": "provision.resolve/1", "status": "ok", "stack": stack} if as_resolve_output else stack
    path.write_text(json.dumps(doc))
    return str(path)


def launch(capsys, host, job, *extra, devices="0-3"):  # noqa: F811
    rc = main(["launch", "--card", "300T-A2", "--devices", devices, "--root", str(host.root), "--dev-root",
               str(host.dev_root), "--image", IMAGE, "--job", str(job), *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_job_is_checked_against_the_stack_file_and_nothing_starts(host, job, stacks, tmp_path, capsys):  # noqa: F811
    rc, out, err = launch(capsys, host, job, "--dry-run", "--stack", stack_file(tmp_path, stacks["llm"]), "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "provision.launch-job/1" and doc["status"] == "dry-run" and doc["image"] == IMAGE
    assert [s["would"] for s in doc["steps"]] == ["run"] * 4 and doc["devices"] == [0, 1, 2, 3]
    assert doc["command"] == ["bash", str(tmp_path / "out" / "provision-job" / "run.sh")]
    assert not (tmp_path / "out").exists()
    # the image's label itself (a bare stack) reads the same; the text form lists the steps
    rc, out, err = launch(capsys, host, job, "--dry-run", "--stack", stack_file(tmp_path, stacks["llm"], False))
    assert rc == 0, err
    assert [line.split()[1] for line in out.splitlines() if line.startswith("run ")] == \
           ["convert", "preprocess", "train", "export"]


def test_a_stack_that_cannot_run_the_job_is_refused_with_the_build(host, job, stacks, tmp_path, capsys):  # noqa: F811
    plain = json.loads(json.dumps(stacks["llm"]))
    del plain["extras"]["mindspeed_llm"]
    rc, out, err = launch(capsys, host, job, "--dry-run", "--stack", stack_file(tmp_path, plain))
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert f"image {IMAGE} cannot run a mindspeed-llm-sft job: its stack has no MindSpeed-LLM" in err
    assert "provision build --card 300T-A2 --recipe mindspeed-llm" in err
    rc, out, err = launch(capsys, host, job, "--dry-run", "--stack", stack_file(tmp_path, stacks["llm"]),
                          devices="0-1")
    assert rc == 2 and err.count("\n") == 1 and "TP2 x PP1 x DP2 uses 4 chips but the launch has 2" in err
    rc, out, _ = launch(capsys, host, job, "--dry-run", "--stack", stack_file(tmp_path, plain), "--json")
    assert rc == 2 and json.loads(out)["status"] == "refused"


@pytest.mark.parametrize("args, phrase", [
    (["--stack", "s.json"], "--stack goes with --job --dry-run"),  # a real launch reads the image's label
    (["--dry-run", "--stack", "/nonexistent/stack.json"], "--stack /nonexistent/stack.json"),
])
def test_bad_use_is_one_line_and_exit_2(host, job, tmp_path, capsys, args, phrase):  # noqa: F811
    rc, out, err = launch(capsys, host, job, *args)
    assert rc == 2 and out == "" and err.count("\n") == 1 and phrase in err, err
    bad = tmp_path / "bad.json"
    for text in ("{not json", json.dumps({"stack": {"cann": "8.5.0\nFROM evil"}}), "[]"):
        bad.write_text(text)
        rc, out, err = launch(capsys, host, job, "--dry-run", "--stack", str(bad))
        assert rc == 2 and out == "" and err.count("\n") == 1 and f"--stack {bad}" in err, err


def test_without_a_job_stack_is_refused(capsys):
    rc = main(["launch", "--card", "300T-A2", "--devices", "0", "--image", IMAGE, "--stack", "s.json"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--stack goes with --job --dry-run" in err
