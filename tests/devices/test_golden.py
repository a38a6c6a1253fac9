"""Golden files: run lines, docker-py kwargs, CDI specs and K8s manifests for the five reference systems,
all planned from fixture host trees and shown with the host's real paths (plan.rebase()).

Regenerate: PROVISION_REGEN=1 .venv/bin/python -m pytest tests/devices/test_golden.py
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from provisioner.devices import cdi, k8s, runline
from provisioner.devices.plan import MultiNode
from tests.devices.conftest import GOLDEN, golden

TRAIN = ["provision-train", "--config", "/workspace/train.yaml"]

# name: (fixture host, card, devices, run-cmd options, k8s options)
CASES = {
    "300ta2-x4": ("plan-300ta2-4", "300T-A2", "0-3", {}, {}),
    "800ta2-x8": (
        "plan-800ta2-8", "800T-A2", "0-7",
        {"multi": MultiNode(2, 1, "10.0.0.1"), "hccl_if_ip": "10.0.0.2"},
        {"multi": MultiNode(2)},
    ),
    "a3-x16": (
        "plan-a3-16", "800T-A3", "0-15",
        {"multi": MultiNode(4, 0, "10.0.1.1"), "socket_ifname": "=eth0", "shm_size": "64g"},
        {"multi": MultiNode(4), "socket_ifname": "=eth0", "shm_size": "64g"},
    ),
    "300ipro-x1": ("plan-300ipro-1", "300I-Pro", "0", {"task": "inference"}, {"task": "inference"}),
    "950-x1": ("plan-950-1", "350", "0", {}, {}),
}


def image(name: str) -> str:
    return f"provision/train:{name}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_run_line(make_plan, name):
    host, card, spec, run_kw, _ = CASES[name]
    plan = make_plan(host, card, spec, **run_kw).rebase()
    golden(f"{name}.run.sh", runline.shell(plan, image(name), TRAIN))
    kwargs = runline.docker_kwargs(plan, image(name), TRAIN)
    golden(f"{name}.kwargs.json", json.dumps(kwargs, indent=2) + "\n")


def test_runtime_mode_line(make_plan):
    plan = make_plan("plan-800ta2-8", "800T-A2", "4,5", mode="runtime").rebase()
    golden("800ta2-x2-runtime.run.sh", runline.shell(plan, image("800ta2-x2"), TRAIN))
    golden("800ta2-x2-runtime.kwargs.json", json.dumps(runline.docker_kwargs(plan, image("800ta2-x2"), TRAIN), indent=2) + "\n")


@pytest.mark.parametrize("name", sorted(CASES))
def test_cdi_spec(make_plan, name):
    host, card, _, _, _ = CASES[name]
    plan = make_plan(host, card, "all", task=None, check_in_use=False).rebase()
    golden(f"{name}.cdi.yaml", cdi.render(plan, "yaml"))


# The 2-node case ships a trainer config (provision k8s --config train.yaml): the ConfigMap and its mount.
K8S_CONFIG = {"800ta2-x8": "model: /data/qwen\ndata: /data/sft.jsonl\noutput_dir: /data/out\nmax_steps: 100\n"}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("volcano", [False, True], ids=["job", "volcano"])
def test_k8s_manifests(make_plan, name, volcano, tmp_path, monkeypatch):
    host, card, spec, _, k8s_kw = CASES[name]
    plan = make_plan(host, card, spec, check_in_use=False, **k8s_kw).rebase()
    config = None
    if name in K8S_CONFIG:
        monkeypatch.chdir(tmp_path)
        Path("train.yaml").write_text(K8S_CONFIG[name])
        config = "train.yaml"
    docs = k8s.manifests(plan, image(name), name=f"train-{name}", volcano=volcano,
                         config_text=k8s.trainer_config(config) if config else None)
    golden(f"{name}.{'vcjob' if volcano else 'job'}.yaml", k8s.render(docs, plan, volcano, config))


def _manifest_files() -> list[Path]:
    return sorted(GOLDEN.glob("*.job.yaml")) + sorted(GOLDEN.glob("*.vcjob.yaml"))


def test_every_golden_manifest_passes_kubernetes_validate_and_the_volcano_crd():
    # Core kinds with kubernetes-validate (1.25.0 and the latest, strict); a Volcano Job against the CRD's
    # openAPIV3Schema at its pinned commit (tests/jobs/crds/ORIGIN.md), its pod templates as v1 PodTemplates.
    from tests.jobs.test_golden import validate

    files = _manifest_files()
    assert len(files) == 2 * len(CASES)
    for path in files:
        for doc in yaml.safe_load_all(path.read_text()):
            assert validate(doc) == [], f"{path.name}: {doc['kind']}"


def test_kubernetes_validate_cli_accepts_the_job_files():
    # The tool end to end, as a user would run it (strict; core kinds only).
    files = [str(p) for p in sorted(GOLDEN.glob("*.job.yaml"))]
    exe = Path(sys.executable).with_name("kubernetes-validate")
    run = subprocess.run([str(exe), "--strict", "--quiet", *files], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


def test_kubernetes_validate_catches_a_broken_manifest():
    import kubernetes_validate

    doc = next(yaml.safe_load_all((GOLDEN / "300ta2-x4.job.yaml").read_text()))
    doc["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["readonly"] = True  # misspelt key
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, "1.25.0", strict=True)


def test_volcano_job_shape():
    docs = list(yaml.safe_load_all((GOLDEN / "a3-x16.vcjob.yaml").read_text()))
    (job,) = docs
    spec = job["spec"]
    assert (job["apiVersion"], job["kind"], spec["schedulerName"]) == ("batch.volcano.sh/v1alpha1", "Job", "volcano")
    assert spec["minAvailable"] == 4 and spec["tasks"][0]["replicas"] == 4
    assert set(spec["plugins"]) == {"env", "svc"}
    pod = spec["tasks"][0]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.annotations['volcano.sh/task-index']"
    assert env["MASTER_ADDR"]["value"] == "train-a3-x16-worker-0.train-a3-x16"
    assert env["HCCL_IF_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    assert pod["hostNetwork"] is True
    assert pod["containers"][0]["resources"]["limits"] == {"huawei.com/Ascend910": "16"}
