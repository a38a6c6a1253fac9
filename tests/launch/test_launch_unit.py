"""provision launch without an engine: container kwargs, the summary document, signals, bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from provisioner.cli import main
from provisioner.devices import torchrun
from provisioner.engine.types import ImageInfo
from provisioner.launch import run as launch

IMAGE = ImageInfo("img:tag", "sha256:abc", {}, {})


def job(plan, **kw) -> launch.Job:
    kw.setdefault("target", torchrun.Target.train(["--config", "c.yaml"]))
    return launch.Job(plan=plan, image=IMAGE, run_id="r1", **kw)


def test_container_kwargs_add_command_env_labels_and_mounts(make_plan, tmp_path):
    plan = make_plan("0-3")
    j = job(plan, volumes=[(str(tmp_path), "/data", "ro")], workdir="/data", env={"A": "1"})
    env, nproc = torchrun.environment(plan, j.env, {})
    kw = launch.container_kwargs(j, "run", torchrun.command(plan, j.target, nproc), env)
    assert kw["name"] == "provision-launch-r1" and kw["image"] == "img:tag"
    assert kw["command"][:6] == ["torchrun", "--nproc-per-node", "4", "--standalone", "--tee", "3"]
    assert kw["labels"] == {"org.provision.launch": "r1", "org.provision.launch.role": "run"}
    labelled = launch.container_kwargs(job(plan, labels=launch.parse_labels(["team=nlp", "x"])), "run", ["x"], {})
    assert labelled["labels"] == {"team": "nlp", "x": "", "org.provision.launch": "r1", "org.provision.launch.role": "run"}
    assert kw["init"] is True and kw["working_dir"] == "/data" and kw["ipc_mode"] == "host"
    assert kw["volumes"][str(tmp_path)] == {"bind": "/data", "mode": "ro"}
    assert len(kw["devices"]) == 7  # davinci0-3, davinci_manager, devmm_svm, hisi_hdc
    e = kw["environment"]
    assert e["HCCL_CONNECT_TIMEOUT"] == "3600" and e["NPROC_PER_NODE"] == "4" and e["A"] == "1"
    assert e["OMP_NUM_THREADS"] == "1" and "ASCEND_RT_VISIBLE_DEVICES" not in e
    check = launch.container_kwargs(j, "check", ["x"], env)
    assert check["name"] == "provision-launch-r1-check" and check["labels"]["org.provision.launch.role"] == "check"


def test_a_volume_cannot_shadow_a_plan_mount(make_plan, tmp_path):
    plan = make_plan("0")
    j = job(plan, volumes=[(str(tmp_path), "/usr/local/Ascend/driver/lib64", "ro")])
    with pytest.raises(launch.ProvisionError, match="already mounted from .*driver/lib64 by the plan"):
        launch.container_kwargs(j, "run", ["x"], {})


def _result(role, code, sig=None, doc=None, container="c"):
    r = launch.RunResult(role, container, ["cmd", role], exit_code=code, signal=sig, duration_s=1.0)
    r.collective = doc
    return r


GOOD = {"status": "ok", "world_size": 4, "backend": "gloo", "device": "cpu", "busbw_peak_gbps": 0.5}


@pytest.mark.parametrize("check, main_, status, code", [
    (None, (0,), "ok", 0),
    (None, (3,), "failed", 3),
    ((0, None, GOOD), (0,), "ok", 0),
    ((1, None, dict(GOOD, status="wrong-sum")), None, "check-failed", 1),
    ((0, None, None), None, "check-failed", 1),  # exit 0 without a result is not a pass
    ((130, "SIGINT", None), None, "interrupted", 130),
    ((0, None, GOOD), (143, "SIGTERM"), "interrupted", 143),
])
def test_summary_status_and_exit_code(make_plan, check, main_, status, code):
    plan = make_plan("0-3")
    c = _result("check", check[0], check[1], check[2], "c-check") if check else None
    m = _result("run", *main_) if main_ else None
    doc = launch.summary(job(plan, check=c is not None), c, m, 4, {"A": "1"}, 2.5)
    assert doc["schema"] == "provision.launch/1" and doc["status"] == status
    assert launch.exit_code(doc) == code
    assert doc["devices"] == [0, 1, 2, 3] and doc["container_ids"] == [0, 1, 2, 3] and doc["nproc_per_node"] == 4
    assert doc["run_id"] == "r1" and doc["image"]["ref"] == "img:tag" and doc["duration_s"] == 2.5
    assert (doc["check"] is None) == (c is None)
    text = " | ".join(launch.describe(doc))
    if status == "check-failed":
        assert "check FAILED" in text and "the run was not started" in text
    if status == "interrupted":
        assert f"interrupted by {(m or c).signal}" in text
    if doc["check"] and doc["check"]["result"] and status == "ok":
        assert "check ok: all_reduce across 4 ranks (gloo on cpu), peak bus bandwidth 0.500 GB/s" in text


def test_signal_guard_records_instead_of_dying():
    before = signal.getsignal(signal.SIGTERM)
    with launch.SignalGuard() as guard:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        assert guard.wake.wait(5)
    assert guard.received == [signal.SIGTERM, signal.SIGINT]
    assert guard.exit_code == 143 and guard.name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.fixture
def no_engine(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")


@pytest.mark.parametrize("extra, phrase", [
    (["--check-only", "--", "--config", "x"], "--check-only runs only the collective check"),
    (["--module", "m", "--exec", "--", "python"], "--module and --exec: choose one"),
    (["--exec"], "--exec needs the command after `--`"),
    (["-e", "1A=2"], "-e '1A=2': write KEY=VALUE"),
    (["-v", "/nonexistent-dir:/x"], "/nonexistent-dir does not exist"),
    (["--nnodes", "2"], "--nnodes > 1 needs --master-addr"),
    (["--label", "org.provision.launch=x"], "a key not starting with org.provision.launch"),
    ([], "provision launch needs a running Docker engine"),
])
def test_bad_input_is_one_line_exit_2(no_engine, sim_host, capsys, extra, phrase):
    h = sim_host()
    rc = main(["launch", "--card", "300T-A2", "--devices", "0-3", "--root", str(h.root), "--dev-root", str(h.dev_root),
               "--image", "img", *extra])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.startswith("provision: error: ") and err.count("\n") == 1 and phrase in err, err


def test_help_is_fast_and_imports_nothing_heavy():
    code = ("import sys; from provisioner.cli import main; rc = main(['launch', '--help']);"
            "heavy = [m for m in ('docker', 'torch', 'yaml', 'jinja2') if m in sys.modules];"
            "print('HEAVY', heavy); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and "HEAVY []" in proc.stdout, proc.stdout + proc.stderr
    assert "--check-only" in proc.stdout and "--exec" in proc.stdout
