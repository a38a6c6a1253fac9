"""`provision launch --job` against the real engine: a 4-chip MindSpeed-LLM SFT job (TP2 x DP2) over the fake
MindSpeed-LLM checkout in an image that carries it, on a simulated 300T-A2 host; Ctrl-C midway, then the
same command resumes from the first missing output. Refusals come back as one line and exit 2."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.jobs.conftest import alpaca, patched_host, records, tiny_model, write_job
from tests.launch.conftest import TEST_LABEL

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def job_label(docker_client):
    import uuid

    tag = f"{TEST_LABEL}={uuid.uuid4().hex[:12]}"
    yield ["--label", tag]
    left = docker_client.containers.list(all=True, filters={"label": tag})
    for c in left:
        c.remove(force=True)
    assert not left, f"containers left behind: {[c.name for c in left]}"


def _job(tmp_path: Path, steps: int = 6) -> Path:
    model = tiny_model(tmp_path / "models" / "tiny")
    data = alpaca(tmp_path / "data" / "alpaca.json")
    return write_job(tmp_path / "job", (
        f"kind: mindspeed-llm-sft\nname: tiny-sft\nmodel: {model}\ndata: {{path: {data}}}\n"
        "parallel: {tensor: 2, pipeline: 1, data: 2}\n"
        f"train: {{seq_length: 256, global_batch_size: 8, steps: {steps}, save_interval: 2}}\n"
        f"output: {tmp_path / 'out'}\nenv: {{HCCL_CONNECT_TIMEOUT: '1800'}}\n"), config=None)


def _argv(host, image: str, job: Path, *extra: str, devices: str = "0-3") -> list[str]:
    return [sys.executable, "-m", "provisioner.cli", "launch", "--card", "300T-A2", "--devices", devices,
            "--root", str(host.root), "--dev-root", str(host.dev_root), "--image", image, "--job", str(job),
            "-e", "TORCH_DEVICE_BACKEND_AUTOLOAD=0", *extra]


def test_sft_job_runs_is_interrupted_and_resumes(fake_llm_image, stacks, tmp_path, job_label, docker_client):
    label = json.loads(docker_client.images.get(fake_llm_image).labels["org.provision.stack"])
    host = patched_host("plan-300ta2-4", tmp_path / "host", label)
    job = _job(tmp_path)
    out = tmp_path / "out"
    record = out / "calls.jsonl"
    tracker = out / "checkpoints" / "tp2-pp1" / "latest_checkpointed_iteration.txt"
    argv = _argv(host, fake_llm_image, job, "-e", f"FAKE_RECORD={record}", *job_label, "--json")

    proc = subprocess.Popen(argv + ["-e", "FAKE_STEP_SECONDS=1.5"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 400
    while proc.poll() is None and time.monotonic() < deadline:
        if tracker.exists() and tracker.read_text() == "2":
            proc.send_signal(signal.SIGINT)  # Ctrl-C
            break
        time.sleep(0.2)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr[-4000:]
    doc = json.loads(stdout)
    assert doc["schema"] == "provision.launch-job/1" and doc["status"] == "interrupted" and doc["signal"] == "SIGINT"
    assert {s["id"]: s["status"] for s in doc["steps"]} == {"convert": "ok", "preprocess": "ok", "train": "interrupted",
                                                            "export": "not-run"}
    assert doc["kept"] is False and not docker_client.containers.list(all=True, filters={"name": doc["container"]})
    stopped_at = int(tracker.read_text())
    assert 2 <= stopped_at < 6
    env = doc["environment"]
    assert env["HCCL_CONNECT_TIMEOUT"] == "1800" and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert env["NPROC_PER_NODE"] == "4"
    ranks = [r for r in records(record) if r["script"] == "posttrain_gpt.py"]
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3] and {r["world"] for r in ranks} == {4}
    assert ranks[0]["env"]["HCCL_CONNECT_TIMEOUT"] == "1800" and ranks[0]["env"]["TASK_QUEUE_ENABLE"] == "2"

    res = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-4000:]
    doc = json.loads(res.stdout)
    assert doc["status"] == "ok" and doc["exit_code"] == 0
    assert {s["id"]: s["status"] for s in doc["steps"]} == {"convert": "skipped", "preprocess": "skipped", "train": "ok",
                                                            "export": "ok"}
    assert f"resuming training from iteration {stopped_at} of 6" in res.stderr
    calls = records(record)
    resumed = [r for r in calls if r["script"] == "posttrain_gpt.py"][4:]
    assert len(resumed) == 4 and {r["start"] for r in resumed} == {stopped_at}
    assert all("--finetune" not in r["argv"] for r in resumed)
    assert [c["script"] for c in calls].count("preprocess_data.py") == 1
    assert tracker.read_text() == "6" and (out / "hf" / "config.json").is_file()
    job_json = json.loads((out / "provision-job" / "job.json").read_text())
    assert job_json["kind"] == "mindspeed-llm-sft" and job_json["digest"] == doc["job"]["digest"]


def test_refusals_are_one_line_and_exit_2(fake_llm_image, provision_image, tmp_path, docker_client):
    """Against the labels `provision build` really wrote (the dry run and the other refusals run over the fake
    engine in test_jobrun_fake.py)."""
    label = json.loads(docker_client.images.get(fake_llm_image).labels["org.provision.stack"])
    host = patched_host("plan-300ta2-4", tmp_path / "host", label)
    job = _job(tmp_path)

    def refused(argv) -> str:
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert res.returncode == 2 and res.stderr.count("\n") == 1 and res.stdout == "", res.stderr
        return res.stderr

    # the image's stack lacks the job's framework: the plain provision image has no MindSpeed-LLM
    msg = refused(_argv(host, provision_image, job))
    assert f"image {provision_image} cannot run a mindspeed-llm-sft job: its stack has no MindSpeed-LLM" in msg
    assert "provision build --card 300T-A2 --recipe mindspeed-llm --with apex" in msg
    # TP x PP x DP != chips
    msg = refused(_argv(host, fake_llm_image, job, devices="0-1"))
    assert "TP2 x PP1 x DP2 uses 4 chips but the launch has 2" in msg
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_sft_job_across_two_nodes_with_torchrun(fake_llm_image, tmp_path, docker_client, job_label):
    """TP2 x DP2 over two "nodes" (two containers, 2 chips each, one Docker network): node 0 prepares,
    node 1 waits for the shared outputs, both join torchrun's rendezvous at node 0 for training."""
    import threading
    import uuid

    label = json.loads(docker_client.images.get(fake_llm_image).labels["org.provision.stack"])
    job = _job(tmp_path, steps=2)
    record = tmp_path / "out" / "calls.jsonl"
    net = docker_client.networks.create(f"provision-jobs-test-{uuid.uuid4().hex[:8]}", driver="bridge")
    head = f"provision-jobs-test-sft-{uuid.uuid4().hex[:6]}"
    results: dict[int, subprocess.CompletedProcess] = {}

    def node(rank: int) -> None:
        host = patched_host("plan-300ta2-4", tmp_path / f"host{rank}", label)
        argv = _argv(host, fake_llm_image, job, "--nnodes", "2", "--node-rank", str(rank), "--master-addr", head,
                     "--network", net.name, "--name", head if rank == 0 else f"{head}-node1",
                     "-e", f"FAKE_RECORD={record}", *job_label, "--json", devices="0-1" if rank == 0 else "2-3")
        results[rank] = subprocess.run(argv, capture_output=True, text=True, timeout=600)

    try:
        threads = [threading.Thread(target=node, args=(r,)) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=660)
    finally:
        net.remove()
    for rank in (0, 1):
        assert results[rank].returncode == 0, f"node {rank}:\n{results[rank].stderr[-4000:]}"
    docs = {r: json.loads(results[r].stdout) for r in (0, 1)}
    assert [s["status"] for s in docs[0]["steps"]] == ["ok", "ok", "ok", "ok"]
    node1 = {s["id"]: s["status"] for s in docs[1]["steps"]}
    assert node1.pop("train") == "ok" and set(node1.values()) <= {"done-on-node-0", "skipped"}
    ranks = [r for r in records(record) if r["script"] == "posttrain_gpt.py"]
    assert sorted(r["rank"] for r in ranks) == [0, 1, 2, 3] and {r["world"] for r in ranks} == {4}
    assert {r["env"]["MASTER_ADDR"] for r in ranks} == {head} and {r["env"]["NNODES"] for r in ranks} == {"2"}
    assert [c["script"] for c in records(record)].count("preprocess_data.py") == 1  # node 0 only
