"""The Ray launch path for real: `provision launch --job` of a GRPO job on two "nodes" (two containers on the
local engine, each with the 8 simulated chips of an 800T-A2 host, on one Docker network). Node 0 runs the
preparation steps, starts the Ray head and, once node 1 has joined with its 8 NPUs, runs MindSpeed-RL's
cli/train_grpo.py (here the fake checkout's: a real Ray driver that checks the cluster and places one task
per node); node 1 waits for the shared outputs, joins the head, and leaves when training is complete.
Ray comes from the package index (tests/jobs/ray-image)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from tests.jobs.conftest import alpaca, patched_host, records, tiny_model, write_job
from tests.launch.conftest import TEST_LABEL

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def network(docker_client):
    net = docker_client.networks.create(f"provision-jobs-test-{uuid.uuid4().hex[:8]}", driver="bridge")
    yield net.name
    net.reload()
    for c in net.containers:
        net.disconnect(c, force=True)
    net.remove()


def _grpo_job(tmp_path: Path) -> Path:
    model = tiny_model(tmp_path / "models" / "tiny")
    data = alpaca(tmp_path / "data" / "prompts.json", n=32)
    return write_job(tmp_path / "job", (
        f"kind: mindspeed-rl-grpo\nname: tiny-grpo\nmodel: {model}\n"
        f"data: {{path: {data}, map_keys: {{prompt: instruction, query: input, response: output}}}}\n"
        "parallel: {tensor: 1, pipeline: 1, data: 16}\n"
        "train: {seq_length: 256, global_batch_size: 16, steps: 4, save_interval: 2}\n"
        "grpo: {n_samples_per_prompt: 2, max_prompt_length: 128, max_response_length: 128}\n"
        f"output: {tmp_path / 'out'}\n"), config=None)


# A Ray image of its own and two containers: the `full` tier (make test-all).
@pytest.mark.full
def test_grpo_on_a_two_node_ray_cluster(ray_image, docker_client, network, tmp_path):
    stack = json.loads(docker_client.images.get(ray_image).labels["org.provision.stack"])
    job = _grpo_job(tmp_path)
    record = tmp_path / "out" / "calls.jsonl"
    tag = f"{TEST_LABEL}={uuid.uuid4().hex[:12]}"
    head = f"provision-jobs-test-head-{uuid.uuid4().hex[:6]}"
    results: dict[int, subprocess.CompletedProcess] = {}

    def node(rank: int) -> None:
        host = patched_host("plan-800ta2-8" if rank == 0 else "plan-800ta2-8-node1", tmp_path / f"host{rank}", stack)
        argv = [sys.executable, "-m", "provisioner.cli", "launch", "--card", "800T-A2", "--devices", "0-7",
                "--root", str(host.root), "--dev-root", str(host.dev_root), "--image", ray_image, "--job", str(job),
                "--nnodes", "2", "--node-rank", str(rank), "--master-addr", head, "--network", network,
                "--name", head if rank == 0 else f"{head}-node1", "--shm-size", "1g",
                "-e", f"FAKE_RECORD={record}", "--label", tag, "--json"]
        results[rank] = subprocess.run(argv, capture_output=True, text=True, timeout=900)

    try:
        threads = [threading.Thread(target=node, args=(r,)) for r in (0, 1)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=960)
    finally:
        left = docker_client.containers.list(all=True, filters={"label": tag})
        for c in left:
            c.remove(force=True)
    assert not left, f"containers left behind: {[c.name for c in left]}"
    docs = {}
    for rank in (0, 1):
        res = results[rank]
        assert res.returncode == 0, f"node {rank}:\n{res.stderr[-5000:]}"
        docs[rank] = json.loads(res.stdout)
    assert {s["id"]: s["status"] for s in docs[0]["steps"]} == {"convert": "ok", "preprocess": "ok", "train": "ok",
                                                                "export": "ok"}
    node1 = {s["id"]: s["status"] for s in docs[1]["steps"]}
    assert node1.pop("train") == "ok"  # it joined the head and stayed until training was complete
    # node 0 runs these; node 1 waits for them on the shared output (or finds them done when it gets there)
    assert set(node1.values()) <= {"done-on-node-0", "skipped"}
    assert docs[0]["environment"]["MASTER_ADDR"] == head and docs[1]["environment"]["NODE_RANK"] == "1"
    assert "Ray cluster ready: 16 NPUs on 2 node(s)" in results[0].stderr
    assert "joined the Ray cluster" in results[1].stderr

    calls = records(record)
    (trainer,) = [c for c in calls if c["script"] == "train_grpo.py"]
    assert trainer["npus"] == 16 and trainer["start"] == 0
    # STRICT_SPREAD placed one task on each node's 8 NPUs: two containers, two addresses
    assert len({n["host"] for n in trainer["nodes"]}) == 2 and len({n["ip"] for n in trainer["nodes"]}) == 2
    for seen in trainer["nodes"]:
        assert seen["davinci"] == [f"davinci{i}" for i in range(8)]
        # the job's runtime_env.yaml reached every Ray worker (MindSpeed-RL's ray.init(runtime_env=...))
        assert seen["HCCL_CONNECT_TIMEOUT"] == "1800" and seen["RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"] == "true"
    cfg = trainer["config"]
    assert cfg["rl_config"]["actor_resource"]["num_npus"] == 16 and cfg["generate_config"]["infer_tensor_parallel_size"] == 1
    prep = next(c for c in calls if c["script"] == "preprocess_data.py")
    assert prep["config"]["handler_name"] == "R1AlpacaStyleInstructionHandler" and prep["records"] == 32
    out = tmp_path / "out"
    assert (out / "checkpoints" / "tp1-pp1" / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert (out / "hf" / "config.json").is_file()
