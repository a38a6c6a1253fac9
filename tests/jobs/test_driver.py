"""The rendered driver (run.sh) and step scripts, run for real with bash on this machine: a MindSpeed-LLM SFT
job over the fake MindSpeed-LLM checkout (tests/jobs/fake), torchrun with 4 gloo workers, stopped midway
with SIGTERM (what `docker stop` sends) and run again: finished steps are skipped, training resumes from
its last checkpoint, nothing is left running."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from provisioner.jobs import plan, spec
from provisioner.launch import jobrun
from tests.jobs.conftest import FAKE, alpaca, records, tiny_model, write_job

pytestmark = pytest.mark.slow
VENV_BIN = str(Path(sys.executable).parent)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_sft_job(tmp_path: Path, steps: int = 6, save: int = 2, extra: str = "") -> Path:
    model = tiny_model(tmp_path / "models" / "tiny")
    data = alpaca(tmp_path / "data" / "alpaca.json")
    text = (f"kind: mindspeed-llm-sft\nname: tiny-sft\nmodel: {model}\ndata: {{path: {data}}}\n"
            "parallel: {tensor: 2, pipeline: 1, data: 2}\n"
            f"train: {{seq_length: 256, global_batch_size: 8, steps: {steps}, save_interval: {save}}}\n"
            f"output: {tmp_path / 'out'}\nframework_dir: {FAKE / 'mindspeed-llm'}\n{extra}")
    return write_job(tmp_path / "job", text, config=None)


def _plan(shipped, stacks, path: Path):
    p = plan.build(shipped, spec.load(str(path)), card="300T-A2", chips_per_node=4, nnodes=1, stack=stacks["llm"])
    jobrun.write_files(p)
    return p


def _run(p, env: dict, stop_when=None) -> tuple[int, list[str]]:
    proc = subprocess.Popen(["bash", os.path.join(p.job_dir, "run.sh")], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    deadline = time.monotonic() + 240
    while proc.poll() is None and time.monotonic() < deadline:
        if stop_when and stop_when():
            proc.send_signal(signal.SIGTERM)  # the driver only, as docker stop signals the container's init
            stop_when = None
        time.sleep(0.2)
    rc = proc.wait(timeout=60)
    reader.join(timeout=10)
    return rc, lines


def test_stopped_midway_then_resumed(tmp_path, shipped, stacks):
    p = _plan(shipped, stacks, fake_sft_job(tmp_path))
    record = tmp_path / "calls.jsonl"
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "FAKE_RECORD": str(record),
           "FAKE_STEP_SECONDS": "1.0", "MASTER_PORT": str(_free_port()), "NPROC_PER_NODE": "4"}
    tracker = Path(p.paths["checkpoints"]) / "latest_checkpointed_iteration.txt"

    rc, lines = _run(p, env, stop_when=lambda: tracker.exists() and tracker.read_text() in ("2", "4"))
    text = "".join(lines)
    assert rc == 143, text
    assert "[provision-job] step convert: ok" in text and "[provision-job] step preprocess: ok" in text
    assert "[provision-job] step train: stopped" in text and "step export" not in text
    stopped_at = int(tracker.read_text())
    assert 2 <= stopped_at < 6 and not os.path.exists(p.steps[2].outputs[0])
    trainers = [r for r in records(record) if r["script"] == "posttrain_gpt.py"]
    assert len(trainers) == 4 and {r["rank"] for r in trainers} == {0, 1, 2, 3}
    for r in trainers:  # SIGTERM reached the step's whole process group: no worker is left
        with pytest.raises(ProcessLookupError):
            os.kill(r["pid"], 0)

    rc, lines = _run(p, {**env, "MASTER_PORT": str(_free_port()), "FAKE_STEP_SECONDS": "0"})
    text = "".join(lines)
    assert rc == 0, text
    assert "step convert: skip (outputs present)" in text and "step preprocess: skip (outputs present)" in text
    assert f"resuming training from iteration {stopped_at} of 6" in text
    assert "step export: ok" in text and "all steps done" in text
    calls = records(record)
    assert [c["script"] for c in calls].count("convert_ckpt.py") == 2  # hf -> mcore once, mcore -> hf once
    assert [c["script"] for c in calls].count("preprocess_data.py") == 1
    first, second = trainers[0], [c for c in calls if c["script"] == "posttrain_gpt.py"][4]
    assert "--finetune" in first["argv"] and first["start"] == 0
    assert "--finetune" not in second["argv"] and second["start"] == stopped_at
    assert second["argv"][second["argv"].index("--load") + 1] == p.paths["checkpoints"]
    assert tracker.read_text() == "6"
    # train.keep_checkpoints 2 (the default): iterations 2, 4 and 6 were saved, the oldest is gone
    assert sorted(d.name for d in tracker.parent.glob("iter_*")) == ["iter_0000004", "iter_0000006"]
    assert "removing checkpoint iter_0000002 (train.keep_checkpoints: 2)" in text
    export = Path(p.paths["export"])
    assert (export / "config.json").is_file() and (export / "tokenizer.json").is_file()
    assert not Path(p.paths["export"] + ".partial").exists()

    rc, lines = _run(p, env)  # a third run has nothing left to do
    assert rc == 0 and "".join(lines).count("skip (outputs present)") == 4


def test_keep_0_ends_with_the_final_weights_only(tmp_path, shipped, stacks):
    """train.keep_checkpoints 0, no save_interval: the one save (the last iteration) is written without optimizer
    state, the export writes the Hugging Face weights and then removes the checkpoints; a second run skips all."""
    job = fake_sft_job(tmp_path, steps=4, save=4)
    job.write_text(job.read_text().replace("save_interval: 4}", "keep_checkpoints: 0}"))
    p = _plan(shipped, stacks, job)
    record = tmp_path / "calls.jsonl"
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "FAKE_RECORD": str(record),
           "MASTER_PORT": str(_free_port()), "NPROC_PER_NODE": "4"}
    rc, lines = _run(p, env)
    text = "".join(lines)
    assert rc == 0, text
    (trainer,) = [c for c in records(record) if c["script"] == "posttrain_gpt.py" and c["rank"] == 0]
    assert {"--no-save-optim", "--no-save-rng"} <= set(trainer["argv"])
    assert f"removing the checkpoints in {p.paths['checkpoints']} (train.keep_checkpoints: 0" in text
    assert not os.path.exists(p.paths["checkpoints"])
    export = Path(p.paths["export"])
    assert (export / "model.safetensors").is_file() and (export / "config.json").is_file()
    assert sorted(os.listdir(p.spec.output)) == ["checkpoints", "data", "hf", "provision-job", "weights"]
    assert os.listdir(os.path.dirname(p.paths["checkpoints"])) == []  # the job's save dir (tp2-pp1) is gone
    rc, lines = _run(p, env)
    assert rc == 0 and "".join(lines).count("skip (outputs present)") == 4


def test_a_failing_step_stops_the_job_and_marks_it(tmp_path, shipped, stacks):
    p = _plan(shipped, stacks, fake_sft_job(tmp_path))
    os.unlink(p.spec.data.path)  # preprocess_data.py exits 1: no input
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ['PATH']}", "FAKE_RECORD": str(tmp_path / "calls.jsonl")}
    rc, lines = _run(p, env)
    text = "".join(lines)
    assert rc == 1 and "step preprocess: failed (exit 1)" in text and "step train" not in text
    assert (Path(p.job_dir) / "status" / "preprocess.failed").read_text().strip() == "1"
    assert not Path(p.paths["data_dir"]).exists() and Path(p.paths["data_dir"] + ".partial").is_dir()
    assert "fake: input" in (Path(p.job_dir) / "logs" / "preprocess.node0.log").read_text()


def test_every_rendered_script_parses(tmp_path, shipped, stacks):
    p = _plan(shipped, stacks, fake_sft_job(tmp_path))
    for rel in p.files:
        if rel.endswith(".sh"):
            res = subprocess.run(["bash", "-n", os.path.join(p.job_dir, rel)], capture_output=True, text=True)
            assert res.returncode == 0, f"{rel}: {res.stderr}"
