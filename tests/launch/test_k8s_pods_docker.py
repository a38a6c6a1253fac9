"""The pods `provision k8s` renders, run as two local containers: one 2-node training run of the bundled trainer.

No cluster here, so the test plays the kubelet for a 2-pod Indexed Job: each pod's environment from the
manifest (its completion index, status.hostIP = this host), its args expanded from that environment
(tests/helpers/k8spod.py), the ConfigMap's file mounted read-only where the manifest mounts it, the hostPath
mounts from the simulated host, the chips the device plugin would map (mknod nodes with /dev/null's
numbers), hostNetwork, and the master's DNS name resolving to node 0 (both share the host's network, as
hostNetwork pods on one node would). The trainer runs on CPU (gloo) in the shared test image.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import yaml

from provisioner.devices import k8s, runline
from provisioner.devices import plan as devices
from provisioner.devices.plan import MultiNode
from tests.helpers import k8spod
from tests.launch.conftest import TEST_LABEL

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.mknod]
NPROC = 2
STEPS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job_dir(tmp: Path) -> Path:
    from provisioner.demo.job import CONFIG, prepare_job

    job = tmp / "job"
    prepare_job(job)  # a tiny random Qwen2, learnable Alpaca records (nothing downloaded)
    (job / "out").mkdir(mode=0o777)
    (job / "out").chmod(0o777)  # the image may run as a non-root user
    config = {k: v for k, v in CONFIG.items() if k != "eval_split"}
    config.update(max_steps=STEPS, save_steps=STEPS)
    (job / "k8s-train.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return job


def _pod_kwargs(plan, job: dict, index: int, host, job_dir: Path, files: Path, image: str, tag: str) -> dict:
    """docker-py create() kwargs for pod `index` of the Job, as the kubelet would start it on this host."""
    spec = job["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    env = k8spod.environment(c, {"batch.kubernetes.io/job-completion-index": str(index)}, host_ip="127.0.0.1")
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"  # CPU: torch_npu without CANN (tests/launch/conftest.py CPU_ENV)
    volumes, tmpfs = {}, {}
    by_name = {v["name"]: v for v in spec["volumes"]}
    for m in c["volumeMounts"]:
        v = by_name[m["name"]]
        mode = "ro" if m.get("readOnly") else "rw"
        if "hostPath" in v:
            volumes[os.path.join(str(host.root), v["hostPath"]["path"].lstrip("/"))] = {"bind": m["mountPath"], "mode": mode}
        elif "configMap" in v:
            volumes[str(files)] = {"bind": m["mountPath"], "mode": mode}
        else:
            tmpfs[m["mountPath"]] = ""
    volumes[str(job_dir)] = {"bind": "/job", "mode": "rw"}  # the job's shared storage (a PVC on a cluster)
    master = env["MASTER_ADDR"]
    assert master == "sft-0.sft"  # the headless Service's name for pod 0: node 0's container here
    return dict(
        image=image, command=k8spod.args(c, env), environment=env, volumes=volumes, tmpfs=tmpfs,
        devices=runline.docker_kwargs(plan, image, [])["devices"],
        group_add=[str(g) for g in spec["securityContext"]["supplementalGroups"]],
        network_mode="host" if spec.get("hostNetwork") else None, extra_hosts={master: "127.0.0.1"},
        labels={TEST_LABEL: tag}, name=f"provision-k8s-test-{tag}-{index}",
    )


def test_two_pods_of_the_rendered_job_train_as_one_world(launch_image, real_host, shipped, docker_client, tmp_path):
    import uuid

    host = real_host("plan-300ta2-4", "k8s")
    port = str(_free_port())
    plan = devices.plan(shipped, devices.Options(
        card="300T-A2", devices="0,1", root=str(host.root), dev_root=str(host.dev_root), check_in_use=False,
        engine_skipped="test", multi=MultiNode(2, master_port=port), socket_ifname="=lo"))
    job_dir = _job_dir(tmp_path)
    docs = k8s.manifests(plan, launch_image, name="sft", config_text=k8s.trainer_config(str(job_dir / "k8s-train.yaml")))
    cm, _, job = docs
    files = tmp_path / "configmap"
    files.mkdir()
    for key, text in cm["data"].items():
        (files / key).write_text(text)
    tag = uuid.uuid4().hex[:12]
    containers = [docker_client.containers.create(**_pod_kwargs(plan, job, i, host, job_dir, files, launch_image, tag))
                  for i in (0, 1)]
    try:
        for c in containers:
            c.start()
        codes = [c.wait(timeout=600)["StatusCode"] for c in containers]
        logs = [c.logs().decode(errors="replace") for c in containers]
    finally:
        for c in containers:
            c.remove(force=True)
    assert codes == [0, 0], "\n=====\n".join(x[-4000:] for x in logs)
    summary = json.loads((job_dir / "out" / "summary.json").read_text())
    assert summary["world_size"] == 2 * NPROC and summary["steps"] == STEPS, summary
    # torchrun's rank prefix names global ranks: node 0 runs ranks 0-1, node 1 ranks 2-3
    for index, text in enumerate(logs):
        seen = {r for r in range(2 * NPROC) if f"[rank{r}]:" in text}
        assert seen and seen <= {NPROC * index + r for r in range(NPROC)}, (index, seen, text[-3000:])
