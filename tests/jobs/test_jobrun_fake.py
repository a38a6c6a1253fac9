"""`provision launch --job` and `provision k8s --job` through main() over the fake engine (no daemon, no root):
the job container the launch creates (mounts, labels, variables, the driver command), the job directory it
writes first, step states read from the driver's lines, exit codes, Ctrl-C, dry runs, refusals, and the
image's stack label read from the engine. The real driver runs in test_driver.py; the real engine in
test_launch_job_docker.py and test_ray_docker.py."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
from pathlib import Path

import pytest
import yaml

from provisioner.cli import main
from provisioner.engine.fake import FakeEngine
from tests.helpers import hosts
from tests.jobs.conftest import alpaca, tiny_model, write_job

IMAGE = "provision-jobs-test/fake-llm:unit"
CHECKOUT = "/opt/frameworks/MindSpeed-LLM"  # where the image's checkouts label says it keeps MindSpeed-LLM
PLAIN = "provision-jobs-test/plain:unit"
STEPS = ("convert", "preprocess", "train", "export")


def driver(fail: str | None = None, hold: str | None = None, started: threading.Event | None = None, seen=None):
    """A stand-in for the job's run.sh: prints the driver's step lines; `fail` fails that step (exit 3),
    `hold` blocks in that step until docker stop (exit 143)."""

    def program(proc) -> int:
        if seen is not None:
            seen.update(command=proc.command, env=proc.env, payload=proc.container.payload,
                        driver_written=os.path.isfile(proc.command[-1]))
        for step in STEPS:
            proc.print(f"[provision-job] step {step}: start")
            if step == fail:
                proc.print(f"[provision-job] step {step}: failed (exit 3)", "stderr")
                return 3
            if step == hold:
                if started is not None:
                    started.set()
                if proc.wait_for_stop(30):
                    proc.print(f"[provision-job] step {step}: stopped")
                    return 143
            proc.print(f"[provision-job] step {step}: ok")
        return 0

    return program


@pytest.fixture
def engine(monkeypatch, stacks):
    """The fake engine, answering wherever provision connects to one (launch, engine facts)."""
    fake = FakeEngine()
    from provisioner.image import labels as image_labels

    extra = stacks["llm"]["extras"]["mindspeed_llm"]
    label = {image_labels.STACK_LABEL: json.dumps(stacks["llm"], separators=(",", ":")),
             image_labels.FRAMEWORK_SET_LABEL: extra["set"], image_labels.FRAMEWORK_KIND_LABEL: extra["kind"],
             image_labels.CHECKOUTS_LABEL: json.dumps({"mindspeed_llm": {"commit": extra["commits"]["mindspeed_llm"],
                                                                         "ref": extra["mindspeed_llm"], "path": CHECKOUT}})}
    fake.add_image(IMAGE, labels=label, env={"PATH": "/opt/venv/bin:/usr/bin"}, program=driver())
    no_llm = json.loads(json.dumps(stacks["llm"]))
    del no_llm["extras"]["mindspeed_llm"]
    fake.add_image(PLAIN, labels={"org.provision.stack": json.dumps(no_llm, separators=(",", ":"))})
    monkeypatch.setattr("provisioner.engine.connect", lambda timeout=30.0, ping=True: fake)
    return fake


@pytest.fixture
def host(tmp_path, stacks):
    """A simulated 4-chip 300T-A2 host whose driver is the one the image's CANN pairs with."""
    h = hosts.materialize("plan-300ta2-4", tmp_path / "host", null_numbers=True)
    info = h.root / "usr/local/Ascend/driver/version.info"
    info.write_text(re.sub(r"(?m)^Version=.*$", f"Version={stacks['llm']['driver']['paired'][0]}", info.read_text()))
    return h


@pytest.fixture
def job(tmp_path) -> Path:
    model = tiny_model(tmp_path / "models" / "tiny")
    data = alpaca(tmp_path / "data" / "alpaca.json")
    return write_job(tmp_path / "job", (
        f"kind: mindspeed-llm-sft\nname: tiny-sft\nmodel: {model}\ndata: {{path: {data}}}\n"
        "parallel: {tensor: 2, pipeline: 1, data: 2}\n"
        "train: {seq_length: 256, global_batch_size: 8, steps: 6, save_interval: 2}\n"
        f"output: {tmp_path / 'out'}\nenv: {{HCCL_CONNECT_TIMEOUT: '1800'}}\n"), config=None)


def launch(capsys, host, job, *extra, image=IMAGE, devices="0-3"):
    rc = main(["launch", "--card", "300T-A2", "--devices", devices, "--root", str(host.root), "--dev-root",
               str(host.dev_root), "--image", image, "--job", str(job), *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def states(doc) -> dict:
    return {s["id"]: s["status"] for s in doc["steps"]}


def test_the_job_container_gets_the_plan_and_the_job_directory(engine, host, job, tmp_path, capsys):
    seen: dict = {}
    engine.programs[IMAGE] = driver(seen=seen)
    rc, out, err = launch(capsys, host, job, "-e", "X=1", "--label", "team=llm", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "provision.launch-job/1" and doc["status"] == "ok" and doc["exit_code"] == 0
    assert states(doc) == dict.fromkeys(STEPS, "ok") and doc["failed_step"] is None
    assert doc["parallel"] == "TP2 x PP1 x DP2" and doc["devices"] == [0, 1, 2, 3] and doc["nnodes"] == 1
    out_dir, model, data_dir = tmp_path / "out", tmp_path / "models" / "tiny", tmp_path / "data"
    job_dir = out_dir / "provision-job"
    # The launch wrote the job directory before it started the container, which runs its driver.
    assert seen["driver_written"] and seen["command"] == ["bash", str(job_dir / "run.sh")]
    assert {p.name for p in (job_dir / "steps").iterdir()} == {"01-convert.sh", "02-preprocess.sh", "03-train.sh",
                                                                "04-export.sh"}
    assert json.loads((job_dir / "job.json").read_text())["digest"] == doc["job"]["digest"]
    # The steps run from where the image's framework label says its MindSpeed-LLM checkout is.
    assert f"cd {CHECKOUT}\n" in (job_dir / "steps" / "03-train.sh").read_text()
    cfg = seen["payload"]["HostConfig"]
    binds = set(cfg["Binds"])
    assert {f"{model}:{model}:ro", f"{data_dir}:{data_dir}:ro", f"{out_dir}:{out_dir}:rw"} <= binds
    assert len(cfg["Devices"]) == 7 and cfg["Init"] is True
    labels = seen["payload"]["Config"]["Labels"]
    assert labels["org.provision.job"] == "tiny-sft" and labels["org.provision.launch.role"] == "job"
    assert labels["org.provision.launch"] == doc["run_id"] and labels["team"] == "llm"
    env = seen["env"]
    # The plan's variables, the job kind's, the job file's, then -e.
    assert env["NPROC_PER_NODE"] == "4" and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert env["HCCL_CONNECT_TIMEOUT"] == "1800" and env["X"] == "1" and env["PATH"] == "/opt/venv/bin:/usr/bin"
    assert doc["environment"]["HCCL_CONNECT_TIMEOUT"] == "1800"
    assert engine.containers(all=True) == []  # removed


def test_the_job_container_takes_the_name_other_nodes_reach_it_by(engine, host, job, capsys):
    """On a Docker network node 1's --master-addr is node 0's --name: the job container must carry it as given."""
    rc, out, err = launch(capsys, host, job, "--name", "sft-head", "--keep", "--json")
    assert rc == 0, err
    assert engine.container("sft-head").payload["Config"]["Labels"]["org.provision.launch.role"] == "job"


def test_a_failing_step_is_named_and_its_code_returned(engine, host, job, capsys):
    engine.programs[IMAGE] = driver(fail="preprocess")
    rc, out, err = launch(capsys, host, job)
    assert rc == 3
    assert "[provision-job] step preprocess: failed (exit 3)" in out  # the container's output, as it came
    assert "provision launch: job tiny-sft failed in step preprocess: exit 3" in err
    rc, out, err = launch(capsys, host, job, "--json")
    doc = json.loads(out)
    assert doc["status"] == "failed" and doc["failed_step"] == "preprocess"
    assert states(doc) == {"convert": "ok", "preprocess": "failed", "train": "not-run", "export": "not-run"}


def test_ctrl_c_stops_the_job_and_removes_its_container(engine, host, job, capsys):
    started = threading.Event()
    engine.programs[IMAGE] = driver(hold="train", started=started)
    threading.Thread(target=lambda: started.wait(30) and os.kill(os.getpid(), signal.SIGINT), daemon=True).start()
    rc, out, err = launch(capsys, host, job, "--stop-timeout", "5", "--json")
    assert rc == 130, err
    doc = json.loads(out)
    assert doc["status"] == "interrupted" and doc["signal"] == "SIGINT"
    assert states(doc) == {"convert": "ok", "preprocess": "ok", "train": "interrupted", "export": "not-run"}
    assert doc["kept"] is False and engine.containers(all=True) == []


def test_dry_run_shows_the_steps_and_writes_and_starts_nothing(engine, host, job, tmp_path, capsys):
    rc, out, err = launch(capsys, host, job, "--dry-run", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["status"] == "dry-run" and [s["would"] for s in doc["steps"]] == ["run"] * 4
    assert {m["container"]: m["mode"] for m in doc["mounts"]}[str(tmp_path / "out")] == "rw"
    assert doc["command"] == ["bash", str(tmp_path / "out" / "provision-job" / "run.sh")]
    assert not (tmp_path / "out").exists() and not [c for c in engine.calls if c.startswith("create")]


def test_refusals_are_one_line_and_exit_2(engine, host, job, tmp_path, capsys):
    def refused(*extra, **kw) -> str:
        rc, out, err = launch(capsys, host, job, *extra, **kw)
        assert rc == 2 and err.count("\n") == 1 and out == "" and err.startswith("provision: "), err
        return err

    msg = refused(image=PLAIN)
    assert f"image {PLAIN} cannot run a mindspeed-llm-sft job: its stack has no MindSpeed-LLM" in msg
    assert "provision build --card 300T-A2 --recipe mindspeed-llm" in msg
    assert "TP2 x PP1 x DP2 uses 4 chips but the launch has 2" in refused(devices="0-1")
    assert "--job runs the job's own steps: give no ARGS, --module" in refused("--module", "x")
    assert "--selftest" in refused("--selftest")  # the self-test is not run before a job: refused, not ignored
    rc, out, _ = launch(capsys, host, job, "--json", devices="0-1")
    doc = json.loads(out)
    assert rc == 2 and doc["schema"] == "provision.launch-job/1" and doc["status"] == "refused"
    assert not (tmp_path / "out").exists() and not [c for c in engine.calls if c.startswith("create")]


def test_a_missing_data_file_is_refused_before_anything_starts(engine, host, job, tmp_path, capsys):
    data = tmp_path / "data" / "alpaca.json"
    data.unlink()
    rc, out, err = launch(capsys, host, job)
    assert rc == 2 and err.count("\n") == 1 and f"data file {data} does not exist on this host" in err
    assert not (tmp_path / "out").exists() and not [c for c in engine.calls if c.startswith("create")]


def test_k8s_job_reads_the_image_stack_from_the_engine(engine, host, job, capsys):
    base = ["k8s", "--card", "300T-A2", "--devices", "0-3", "--root", str(host.root), "--dev-root", str(host.dev_root),
            "--job", str(job)]
    assert main([*base, IMAGE]) == 0
    out, err = capsys.readouterr()
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in docs] == ["ConfigMap", "Job"]
    assert f"cd {CHECKOUT}\n" in docs[0]["data"]["steps__03-train.sh"]  # the framework label, read from the engine too
    assert main([*base, "not-here:1"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert "image not-here:1 is not in the local engine" in err and "give its stack with --stack FILE" in err


def test_dry_run_shows_the_disk_the_job_writes_and_a_full_output_filesystem_is_refused(engine, host, job, tmp_path,
                                                                                       capsys, monkeypatch):
    rc, out, err = launch(capsys, host, job, "--dry-run")
    assert rc == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("disk: ")]
    # tiny model; 6 steps saved every 2: 3 saves, 2 kept + 1 being written
    assert "3 checkpoints of" in line and "(train.keep_checkpoints 2, and one more while the next is written)" in line
    assert line.endswith(f"under {tmp_path / 'out'}")
    real = os.statvfs

    def full(path):  # the output's filesystem (tmp_path, the nearest existing parent) has one 4 KiB block free
        st = real(path)
        return os.statvfs_result((st.f_bsize, 4096, st.f_blocks, 1, 1, *tuple(st)[5:]))

    monkeypatch.setattr(os, "statvfs", full)
    rc, out, err = launch(capsys, host, job, "--dry-run")
    assert rc == 2 and err.count("\n") == 1 and out == "", err
    assert "the job writes about" in err and f"under {tmp_path / 'out'}, and its filesystem has 0.0 GB free" in err
    assert "lower train.keep_checkpoints or choose another output" in err
    assert not (tmp_path / "out").exists()


def test_a_failed_job_is_explained_after_its_failure_line(engine, host, job, capsys):
    def program(proc) -> int:  # the out-of-memory line of vllm-ascend#1127 (tests/fixtures/explain/README.md)
        proc.print("[provision-job] step convert: start")
        proc.print("[rank2]:RuntimeError: NPU out of memory. Tried to allocate 30.00 MiB (NPU 2; 60.96 GiB total"
                   " capacity; 60.34 GiB already allocated; 60.34 GiB current active; 14.24 MiB free; 60.60 GiB"
                   " reserved in total by PyTorch)", "stderr")
        proc.print("[provision-job] step convert: failed (exit 3)", "stderr")
        return 3

    engine.programs[IMAGE] = program
    rc, out, err = launch(capsys, host, job)
    assert rc == 3
    lines = err.splitlines()
    at = next(i for i, line in enumerate(lines) if "job tiny-sft failed in step convert" in line)
    assert lines[at + 1] == "provision launch: explain: first failure: rank 2 (device 2)"
    rc, out, err = launch(capsys, host, job, "--json")
    found = json.loads(out)["explanation"]
    assert found["first_failing_rank"] == 2 and found["cause_id"] == "npu-out-of-memory"


def test_a_grpo_job_with_sharegpt_data_is_refused_when_the_job_is_read(engine, host, stacks, tmp_path, capsys):
    """No MindSpeed-RL release has an R1 ShareGPT handler: `format: sharegpt` stops a GRPO job at --dry-run, in one
    line naming the job file's line, before any container; `format: orz` (converted by the job's data step) runs."""
    model = tiny_model(tmp_path / "models" / "tiny")
    stack = tmp_path / "stack.json"
    stack.write_text(json.dumps(stacks["rl"]))

    def grpo(fmt: str) -> Path:
        return write_job(tmp_path / f"job-{fmt}", (
            f"kind: mindspeed-rl-grpo\nname: tiny-grpo\nmodel: {model}\n"
            f"data:\n  path: {tmp_path / 'data' / 'orz.json'}\n  format: {fmt}\n"
            "parallel: {tensor: 1, pipeline: 1, data: 4}\n"
            "train: {seq_length: 256, global_batch_size: 4, steps: 2}\n"
            "grpo: {n_samples_per_prompt: 2, max_prompt_length: 128, max_response_length: 128}\n"
            f"output: {tmp_path / 'out'}\n"), config=None)

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "orz.json").write_text("[]")
    rc, out, err = launch(capsys, host, grpo("sharegpt"), "--dry-run", "--stack", str(stack))
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert "job.yaml:6: data format 'sharegpt' has no mindspeed-rl handler (known: alpaca, orz)" in err
    rc, out, err = launch(capsys, host, grpo("orz"), "--dry-run", "--stack", str(stack))
    assert rc == 0, err
    assert [line.split()[1] for line in out.splitlines() if line.startswith("run ")] == [
        "convert", "data", "preprocess", "train", "export"]
    assert not (tmp_path / "out").exists()


def test_dry_run_shows_what_keep_0_leaves_after_the_export(engine, host, job, capsys):
    """keep_checkpoints 0 with one save: --dry-run counts that save without optimizer state and says what the
    output keeps once the export has removed the checkpoints (also in the JSON: disk.kept_bytes)."""
    job.write_text(job.read_text().replace("steps: 6, save_interval: 2}", "steps: 6, keep_checkpoints: 0}"))
    rc, out, err = launch(capsys, host, job, "--dry-run")
    assert rc == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("disk: ")]
    assert "1 checkpoint of" in line and "without optimizer state (train.keep_checkpoints 0)" in line
    assert "kept after the export (the checkpoints removed)" in line
    rc, out, err = launch(capsys, host, job, "--dry-run", "--json")
    d = json.loads(out)["disk"]
    assert d["optimizer_state"] is False and d["kept_bytes"] < d["total_bytes"]
