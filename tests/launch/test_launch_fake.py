"""provision launch against the fake engine (no daemon, no root): planning with engine facts, the container
it creates, streaming, exit codes, the check, signals and clean-up."""

from __future__ import annotations

import io
import json
import os
import signal
import threading

import pytest

from provisioner.devices import plan as devices
from provisioner.devices import torchrun
from provisioner.engine.errors import EngineUnavailable
from provisioner.engine.fake import FakeEngine
from provisioner.launch import container
from provisioner.launch import run as launch
from provisioner.launch.collective import SCHEMA as COLLECTIVE

IMAGE = "provision/pytorch:test"


def _opts(host, spec="0-3", **kw) -> devices.Options:
    return devices.Options(card="300T-A2", devices=spec, root=str(host.root), dev_root=str(host.dev_root), **kw)


def _job(engine, host, shipped, target=None, **kw) -> launch.Job:
    info = launch.inspect_image(engine, IMAGE)
    plan, notes = launch.plan_for(shipped, _opts(host), info, engine=engine)
    target = target if target is not None else torchrun.Target.train(["--config", "/job/c.yaml"])
    return launch.Job(plan=plan, image=info, target=target, notes=tuple(notes), **kw)


def torchrun_like(lines_per_rank=1, code=0):
    """A program that prints as torchrun --tee 3 does: every worker line carries its rank."""

    def program(proc):
        nproc = int(proc.command[proc.command.index("--nproc-per-node") + 1]) if "torchrun" in proc.command else 1
        for rank in range(nproc):
            for n in range(lines_per_rank):
                proc.print(f"[rank{rank}]:step {n} on {proc.env.get('NPROC_PER_NODE')} chips")
        if "provisioner.launch.collective" in proc.command:
            doc = {"schema": COLLECTIVE, "status": "ok", "world_size": nproc, "backend": "gloo", "device": "cpu",
                   "busbw_peak_gbps": 1.25, "results": []}
            proc.print("[rank0]:" + json.dumps(doc, separators=(",", ":")))
        return code

    return program


@pytest.fixture
def engine():
    fake = FakeEngine()
    fake.add_image(IMAGE, labels={}, env={"PATH": "/opt/venv/bin:/usr/bin"}, program=torchrun_like())
    return fake


def test_inspect_image_errors_are_one_clear_line(engine):
    with pytest.raises(launch.ProvisionError, match="not in the local Docker engine"):
        launch.inspect_image(engine, "nope:1")
    engine.unavailable = "Connection refused"
    with pytest.raises(launch.ProvisionError, match="the engine did not answer"):
        launch.inspect_image(engine, IMAGE)


def test_plan_notes_an_image_without_a_stack_label(engine, sim_host, shipped):
    host = sim_host()
    plan, notes = launch.plan_for(shipped, _opts(host), engine.image(IMAGE), engine=engine)
    assert plan.mode == "devices" and plan.chips == (0, 1, 2, 3)
    assert notes == [f"image {IMAGE} has no org.provision.stack label; driver check skipped"]
    assert plan.notes == ()  # the engine answered and runs nothing


def test_plan_refuses_a_chip_a_running_container_holds(engine, sim_host, shipped):
    host = sim_host()
    engine.add_image("other:1", program=lambda proc: proc.wait_for_stop(30) and 0)
    holder = engine.create({"image": "other:1", "name": "holder",
                            "devices": [f"{host.dev_root}/davinci2:/dev/davinci0:rwm"]})
    holder.start()
    with pytest.raises(devices.PlanRefused, match=r"chip 2 .* is already mapped into running container 'holder'"):
        launch.plan_for(shipped, _opts(host), engine.image(IMAGE), engine=engine)
    plan, _ = launch.plan_for(shipped, _opts(host, "0-1"), engine.image(IMAGE), engine=engine)
    assert plan.chips == (0, 1)
    holder.kill()


def test_auto_mode_takes_the_ascend_runtime_only_on_the_real_dev(sim_host, shipped):
    fake = FakeEngine(runtimes=("ascend", "runc"))
    fake.add_image(IMAGE)
    _, notes = launch.plan_for(shipped, _opts(sim_host()), fake.image(IMAGE), engine=fake)
    assert not any("runtime" in n for n in notes)  # a fixture dev root asks for --device nodes


def test_a_run_streams_ranks_and_removes_its_container(engine, sim_host, shipped):
    job = _job(engine, sim_host(), shipped, check=True, run_id="r1")
    out, err = io.StringIO(), io.StringIO()
    doc = launch.run(job, engine, out=out, err=err)
    assert doc["status"] == "ok" and launch.exit_code(doc) == 0 and doc["ranks_seen"] == [0, 1, 2, 3]
    assert doc["check"]["result"]["world_size"] == 4 and doc["check"]["container"] == "provision-launch-r1-check"
    assert "[rank3]:step 0 on 4 chips" in out.getvalue()
    assert "collective check in provision-launch-r1-check" in err.getvalue()
    assert engine.containers(all=True) == []  # both containers removed
    assert engine.calls.count("create provision-launch-r1-check") == 1 and "create provision-launch-r1" in engine.calls


def test_the_container_gets_the_plan(engine, sim_host, shipped):
    seen = {}

    def program(proc):
        seen.update(env=proc.env, command=proc.command)
        return 0

    engine.programs[IMAGE] = program
    job = _job(engine, sim_host(), shipped, run_id="r2", env={"X": "1"}, keep=True)
    doc = launch.run(job, engine, out=None, err=None)
    payload = engine.container("provision-launch-r2").payload
    assert doc["kept"] is True and payload["State"]["Status"] == "exited"
    host_cfg = payload["HostConfig"]
    assert len(host_cfg["Devices"]) == 7 and host_cfg["IpcMode"] == "host" and host_cfg["Init"] is True
    assert all(b.endswith(":ro") for b in host_cfg["Binds"])
    assert payload["Config"]["Labels"]["org.provision.launch"] == "r2"
    assert seen["env"]["X"] == "1" and seen["env"]["NPROC_PER_NODE"] == "4" and seen["env"]["PATH"] == "/opt/venv/bin:/usr/bin"
    assert seen["command"][:4] == ["torchrun", "--nproc-per-node", "4", "--standalone"]


def test_a_failing_worker_is_named_and_its_code_returned(engine, sim_host, shipped):
    def program(proc):
        proc.print("[rank0]:step 1")
        proc.print("[rank1]:Traceback (most recent call last):", "stderr")
        proc.print("[rank1]:RuntimeError: HCCL init failed", "stderr")
        return 1

    engine.programs[IMAGE] = program
    doc = launch.run(_job(engine, sim_host(), shipped), engine, out=None, err=None)
    assert doc["status"] == "failed" and launch.exit_code(doc) == 1
    assert doc["error"] == "rank 1: RuntimeError: HCCL init failed"


def test_a_failed_check_stops_the_run(engine, sim_host, shipped):
    engine.programs[IMAGE] = torchrun_like(code=1)
    doc = launch.run(_job(engine, sim_host(), shipped, check=True), engine, out=None, err=None)
    assert doc["status"] == "check-failed" and launch.exit_code(doc) == 1
    assert doc["container"] == doc["check"]["container"]  # the run never started
    assert engine.containers(all=True) == []


def test_sigterm_stops_and_removes_the_container(engine, sim_host, shipped):
    started = threading.Event()

    def program(proc):
        started.set()
        proc.print("[rank0]:waiting")
        return 143 if proc.wait_for_stop(30) else 0

    engine.programs[IMAGE] = program
    threading.Thread(target=lambda: started.wait(10) and os.kill(os.getpid(), signal.SIGTERM), daemon=True).start()
    doc = launch.run(_job(engine, sim_host(), shipped, stop_timeout=5), engine, out=None, err=io.StringIO())
    assert doc["status"] == "interrupted" and doc["signal"] == "SIGTERM" and launch.exit_code(doc) == 143
    assert engine.containers(all=True) == []


def test_an_intended_stop_reads_as_one_line(engine, sim_host, shipped):
    """What torchrun prints because it was stopped stays out of the user's terminal; the rest shows."""
    from pathlib import Path

    sample = (Path(__file__).resolve().parents[1] / "fixtures" / "torchrun" / "stopped-by-sigterm.log").read_text()
    ready = [line for line in sample.splitlines() if "ready" in line]
    started = threading.Event()

    def program(proc):
        for line in ready:
            proc.print(line)
        started.set()
        proc.wait_for_stop(30)
        proc.print("[rank0]:checkpoint saved")
        for line in sample.splitlines()[len(ready):]:
            proc.print(line)
        return 143

    engine.programs[IMAGE] = program
    threading.Thread(target=lambda: started.wait(10) and os.kill(os.getpid(), signal.SIGINT), daemon=True).start()
    out, err = io.StringIO(), io.StringIO()
    doc = launch.run(_job(engine, sim_host(), shipped, stop_timeout=5), engine, out=out, err=err)
    assert doc["status"] == "interrupted" and launch.exit_code(doc) == 130
    assert out.getvalue().splitlines() == [*ready, "[rank0]:checkpoint saved"]
    assert [line for line in err.getvalue().splitlines() if "stopping" in line] == []  # a quick stop: no notice
    assert launch.describe(doc) == [f"interrupted by SIGINT after {doc['duration_s']:.1f} s: container"
                                    f" {doc['container']} removed; exit 130"]
    assert doc["log_tail"][-1].endswith("SignalException: Process 7 got signal: 15")  # kept for the record


def test_a_slow_stop_says_what_it_waits_for(engine, sim_host, shipped, monkeypatch):
    import time

    monkeypatch.setattr(container, "ANNOUNCE_STOP_S", 0.2)
    started = threading.Event()

    def program(proc):
        started.set()
        proc.wait_for_stop(30)
        time.sleep(1.0)  # a job that takes its time to shut down
        return 143

    engine.programs[IMAGE] = program
    threading.Thread(target=lambda: started.wait(10) and os.kill(os.getpid(), signal.SIGTERM), daemon=True).start()
    err = io.StringIO()
    doc = launch.run(_job(engine, sim_host(), shipped, stop_timeout=5), engine, out=None, err=err)
    assert doc["status"] == "interrupted"
    assert f"SIGTERM: stopping {doc['container']} (up to 5 s; signal again to kill it now)" in err.getvalue()


def test_an_engine_lost_mid_run_is_one_line(engine, sim_host, shipped):
    job = _job(engine, sim_host(), shipped)
    engine.unavailable = "Connection refused"
    with pytest.raises(launch.ProvisionError, match="the engine could not run provision-launch-"):
        launch.run(job, engine, out=None, err=None)
    with pytest.raises(EngineUnavailable):
        engine.info()


def test_a_failed_run_is_explained_and_a_good_one_never_loads_the_explainer(engine, sim_host, shipped, monkeypatch):
    import sys

    def program(proc):  # rank 5's device error, then rank 0's time-out (texts of tests/fixtures/explain/README.md)
        proc.print("[rank5]:[ERROR] 2025-11-08-21:35:27 (PID:1234255, Device:5, RankID:5) ERR00100 PTA call acl api failed", "stderr")
        proc.print("[rank5]:[Error]: The aicore execution is abnormal. ", "stderr")
        proc.print("[rank0]:EI0002: [PID: 1234250] 2025-11-08-22:05:29.586.187 The wait execution of the Notify register"
                   " times out. Reason: The Notify register has not received the Notify record from remote rank: [unknown].",
                   "stderr")
        return 1

    for name in [m for m in sys.modules if m.startswith("provisioner.explain")]:
        monkeypatch.delitem(sys.modules, name)
    host = sim_host()
    doc = launch.run(_job(engine, host, shipped), engine, out=None, err=None)
    assert doc["explanation"] is None and not any(m.startswith("provisioner.explain") for m in sys.modules)
    engine.programs[IMAGE] = program
    doc = launch.run(_job(engine, host, shipped), engine, out=None, err=None)
    found = doc["explanation"]
    assert found["first_failing_rank"] == 5 and found["cause_id"] == "aicore-exception"
    assert [c["rank"] for c in found["consequences"]] == [0]
    lines = launch.describe(doc)
    assert lines[0].startswith("run ") and lines[1] == "explain: first failure: rank 5 (device 5, pid 1234255) at 2025-11-08 21:35:27.000000"
