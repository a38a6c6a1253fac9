"""Golden job directories and manifests for the seeds' jobs (examples/jobs/), validated.

    seed000-grpo-8chips    GRPO of Qwen2.5-7B, MindSpeed-RL, 8 chips of an 800T-A2 (KubeRay RayJob, head only)
    seed000-grpo-2nodes    the same on 2 nodes x 8 chips (RayJob with a worker group)
    seed003-sft-mindspeed  full SFT, MindSpeed-LLM, TP2 x DP2 on 4 chips (Volcano Job)
    seed003-sft-mindspore  full SFT, MindSpore Transformers, data 2 x model 2 on 4 chips (Volcano Job)

Each case renders the job directory (run.sh, steps/, configs/) and the `provision k8s --job` manifests; the
ConfigMap passes kubernetes-validate, the pod templates too (as v1 PodTemplates), the Volcano Job and the
RayJob pass their CRD schemas (tests/jobs/crds/, strict). Regenerate:
    PROVISION_REGEN=1 .venv/bin/python -m pytest tests/jobs/test_golden.py
"""

from __future__ import annotations

import gzip
import hashlib
import os
import shutil
from pathlib import Path

import pytest
import yaml

from provisioner.devices import plan as devices
from provisioner.devices.plan import MultiNode
from provisioner.jobs import k8s as jobk8s
from provisioner.jobs import plan as jobplan
from provisioner.jobs import spec as jobspec
from tests.helpers import hosts
from tests.jobs.conftest import EXAMPLES, QWEN7B_CONFIG

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden"
CRDS = HERE / "crds"
REGEN = bool(os.environ.get("PROVISION_REGEN"))
IMAGES = {"rl": "provision/mindspeed-llm:mindspeed-rl-2.0.0", "llm": "provision/mindspeed-llm:2.3.0",
          "mindformers": "provision/mindspore:2.7.1-mindformers-1.7.0"}

# case: (example job file, stack, devices, nodes)
CASES = {
    "seed000-grpo-8chips": ("seed000-grpo-qwen25-7b.yaml", "rl", "0-7", 1),
    "seed000-grpo-2nodes": ("seed000-grpo-qwen25-7b-2nodes.yaml", "rl", "0-7", 2),
    "seed003-sft-mindspeed": ("seed003-sft-qwen25-7b-mindspeed.yaml", "llm", "0-3", 1),
    "seed003-sft-mindspore": ("seed003-sft-qwen25-7b-mindspore.yaml", "mindformers", "0-3", 1),
}
CRD_FILES = {
    "batch.volcano.sh_jobs.yaml.gz": "75ac757b0df888cad69edecc93551d55d3e3bb130c7a7579c790afa1e2589c48",
    "ray.io_rayjobs.yaml.gz": "01a5cf3b17c1769fda44af7e82debcd98722f0c27b9ab84d084681c6649121f5",
}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("fake hosts need root to mknod device nodes")
    return hosts.materialize("plan-800ta2-8", tmp_path_factory.mktemp("host"))


def render_case(name: str, shipped, stacks, host, tmp: Path):
    example, stack, spec_devices, nnodes = CASES[name]
    tmp.mkdir(parents=True, exist_ok=True)
    job_file = tmp / example
    shutil.copyfile(QWEN7B_CONFIG, tmp / "config.json")
    job_file.write_text((EXAMPLES / example).read_text() + "model_config: config.json\n")
    job = jobspec.load(str(job_file))
    dplan = devices.plan(shipped, devices.Options(card="800T-A2", devices=spec_devices, root=str(host.root),
                                                  dev_root=str(host.dev_root), multi=MultiNode(nnodes),
                                                  check_in_use=False))
    jplan = jobplan.build(shipped, job, card="800T-A2", chips_per_node=len(dplan.chips), nnodes=nnodes,
                          stack=stacks[stack], image=IMAGES[stack])
    docs = jobk8s.manifests(jplan, dplan, IMAGES[stack])
    return jplan, docs, jobk8s.render(docs, jplan, dplan)


def _compare(path: Path, text: str) -> None:
    if REGEN:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"{path} missing: run with PROVISION_REGEN=1"
    assert path.read_text() == text, f"{path} differs (review, then regenerate with PROVISION_REGEN=1)"


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_job_directory_and_manifests(name, shipped, stacks, host, tmp_path):
    jplan, _, text = render_case(name, shipped, stacks, host, tmp_path)
    base = GOLDEN / name
    for rel, body in sorted(jplan.files.items()):
        _compare(base / rel, body)
    _compare(base / "manifests.yaml", text)
    if not REGEN:
        on_disk = {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file()}
        assert on_disk == set(jplan.files) | {"manifests.yaml"}, "stale golden files"


def _strict(schema):
    """The CRD schema with unknown fields refused (additionalProperties: false wherever fields are named)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def crd_validator(file: str, version: str):
    import jsonschema

    crd = yaml.safe_load(gzip.decompress((CRDS / file).read_bytes()))
    served = next(v for v in crd["spec"]["versions"] if v["name"] == version)
    assert served["served"], f"{file}: {version} is not served"
    return jsonschema.Draft7Validator(_strict(served["schema"]["openAPIV3Schema"]))


def validate(doc: dict) -> list[str]:
    import kubernetes_validate

    if doc["apiVersion"] == "ray.io/v1":
        validator = crd_validator("ray.io_rayjobs.yaml.gz", "v1")
        templates = [doc["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]] + [
            g["template"] for g in doc["spec"]["rayClusterSpec"].get("workerGroupSpecs", [])]
    elif doc["apiVersion"] == "batch.volcano.sh/v1alpha1":
        validator = crd_validator("batch.volcano.sh_jobs.yaml.gz", "v1alpha1")
        templates = [t["template"] for t in doc["spec"]["tasks"]]
    else:
        for version in ("1.25.0", kubernetes_validate.latest_version()):
            kubernetes_validate.validate(doc, version, strict=True)
        return []
    errors = [f"{'/'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(doc)]
    for n, template in enumerate(templates):
        pod = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"{doc['metadata']['name']}-{n}"},
               "template": template}
        for version in ("1.25.0", kubernetes_validate.latest_version()):
            kubernetes_validate.validate(pod, version, strict=True)
    return errors


def test_crd_files_are_the_published_ones():
    for file, digest in CRD_FILES.items():
        assert hashlib.sha256(gzip.decompress((CRDS / file).read_bytes())).hexdigest() == digest, file


@pytest.mark.parametrize("name", sorted(CASES))
def test_manifests_validate(name, shipped, stacks, host, tmp_path):
    _, docs, text = render_case(name, shipped, stacks, host, tmp_path)
    kinds = [d["kind"] for d in docs]
    assert kinds == ["ConfigMap", "RayJob" if "grpo" in name else "Job"]
    for doc in docs:
        assert validate(doc) == [], doc["kind"]
    assert [d for d in yaml.safe_load_all(text) if d] == docs  # the rendered file holds exactly these documents


def test_strict_validation_catches_a_misspelt_field(shipped, stacks, host, tmp_path):
    _, docs, _ = render_case("seed000-grpo-2nodes", shipped, stacks, host, tmp_path)
    rayjob = docs[1]
    rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replica"] = 1  # not `replicas`
    assert any("replica" in e for e in validate(rayjob))
    _, docs, _ = render_case("seed003-sft-mindspeed", shipped, stacks, host, tmp_path / "b")
    vcjob = docs[1]
    vcjob["spec"]["minAvaliable"] = 1
    assert any("minAvaliable" in e for e in validate(vcjob))


def test_seed_000_grpo_on_two_nodes(shipped, stacks, host, tmp_path):
    jplan, docs, _ = render_case("seed000-grpo-2nodes", shipped, stacks, host, tmp_path)
    cm, rayjob = docs
    cluster = rayjob["spec"]["rayClusterSpec"]
    (group,) = cluster["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 1)
    assert cluster["headGroupSpec"]["rayStartParams"]["resources"] == "'{\"NPU\": 8}'"
    for pod in (cluster["headGroupSpec"]["template"], group["template"]):
        c = pod["spec"]["containers"][0]
        assert c["resources"]["limits"] == {"huawei.com/Ascend910": "8"} and "args" not in c
        env = {e["name"]: e for e in c["env"]}
        assert env["HCCL_IF_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
        assert env["HCCL_CONNECT_TIMEOUT"]["value"] == "1800"  # the job file's value wins over the plan default
        assert env["HCCL_WHITELIST_DISABLE"]["value"] == "1" and "MASTER_ADDR" not in env and "NODE_RANK" not in env
        mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
        assert mounts["/usr/local/Ascend/driver/lib64"]["readOnly"] and mounts["/models/Qwen2.5-7B"]["readOnly"]
        assert "/output/qwen25-7b-grpo-2nodes" in mounts and pod["spec"]["hostNetwork"] is True
    assert rayjob["spec"]["entrypoint"] == "bash /etc/provision/job/bootstrap.sh"
    assert cm["data"]["configs__grpo.yaml"] == jplan.files["configs/grpo.yaml"]
    grpo = yaml.safe_load(jplan.files["configs/grpo.yaml"])
    assert grpo["rl_config"]["actor_resource"]["num_npus"] == 16
    assert (grpo["actor_config"]["tensor_model_parallel_size"], grpo["generate_config"]["infer_tensor_parallel_size"]) == (4, 4)
    model = yaml.safe_load(jplan.files["configs/model/job_model.yaml"])["job_model"]
    assert (model["num_layers"], model["num_query_groups"], model["padded_vocab_size"]) == (28, 4, 152064)


def test_seed_003_volcano_job(shipped, stacks, host, tmp_path):
    jplan, docs, _ = render_case("seed003-sft-mindspeed", shipped, stacks, host, tmp_path)
    job = docs[1]
    assert job["spec"]["minAvailable"] == 1 and job["spec"]["maxRetry"] == 3
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    c = pod["containers"][0]
    assert c["args"] == ["bash", "/etc/provision/job/bootstrap.sh"] and "command" not in c
    assert c["resources"]["requests"] == {"huawei.com/Ascend910": "4"}
    train = jplan.files["steps/03-train.sh"]
    for flag in ("--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 1", "--sequence-parallel",
                 "--use-flash-attn", "--use-fused-rmsnorm", "--use-fused-swiglu", "--use-fused-rotary-pos-emb",
                 "--use-distributed-optimizer", "--use-mcore-models", "--num-query-groups 4", "--stage sft"):
        assert flag in train
    ms = render_case("seed003-sft-mindspore", shipped, stacks, host, tmp_path / "ms")[0]
    cfg = yaml.safe_load(ms.files["configs/finetune.yaml"])
    assert cfg["parallel_config"]["data_parallel"] == 2 and cfg["parallel_config"]["model_parallel"] == 2
    assert cfg["model"]["model_config"]["num_layers"] == 28 and cfg["context"]["max_device_memory"] == "58GB"
    assert "--worker_num=4" in ms.files["steps/02-train.sh"]


def test_provision_k8s_job_cli(host, stacks, tmp_path, capsys):
    """The command end to end (main(), in this process: the host's device nodes are simulated): manifests on
    stdout; a bad split refused in one line, exit 2."""
    import json

    from provisioner.cli import main

    stack = tmp_path / "stack.json"
    stack.write_text(json.dumps(stacks["llm"]))
    job = tmp_path / "job.yaml"
    shutil.copyfile(QWEN7B_CONFIG, tmp_path / "config.json")
    job.write_text((EXAMPLES / "seed003-sft-qwen25-7b-mindspeed.yaml").read_text() + "model_config: config.json\n")
    base = ["k8s", "--card", "800T-A2", "--root", str(host.root), "--dev-root", str(host.dev_root), "--job", str(job),
            "--stack", str(stack), IMAGES["llm"]]
    rc = main(base[:5] + ["--devices", "0-3"] + base[5:])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert [d["kind"] for d in yaml.safe_load_all(out) if d] == ["ConfigMap", "Job"]
    rc = main(base[:5] + ["--devices", "0-7"] + base[5:])
    out, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1 and out == ""
    assert "TP2 x PP1 x DP2 uses 4 chips but the launch has 8" in err


def test_header_notes_stay_on_their_comment_lines(shipped, stacks, host, tmp_path):
    """A note carries the job file's name as given: a newline in it cannot start a YAML line of its own."""
    jplan, docs, _ = render_case("seed003-sft-mindspeed", shipped, stacks, host, tmp_path)
    jplan.notes.append(f"{tmp_path}/j\nkind: Evil/job.yaml:9: a note")
    dplan = devices.plan(shipped, devices.Options(card="800T-A2", devices="0-3", root=str(host.root),
                                                  dev_root=str(host.dev_root), check_in_use=False))
    text = jobk8s.render(docs, jplan, dplan)
    head = text.split("\n---\n")[0].splitlines()
    assert all(line.startswith("# ") for line in head) and "kind: Evil" not in [line.strip() for line in text.splitlines()]
    assert any("j\\x0akind: Evil" in line for line in head)
    assert [d["kind"] for d in yaml.safe_load_all(text) if d] == ["ConfigMap", "Job"]


def test_provision_k8s_job_cli_checks_namespace_and_image_and_refuses_name_and_volcano(host, stacks, tmp_path, capsys):
    """`k8s --job` checks --namespace and the image reference as the plain path does, and refuses --name and
    --volcano (the job file's name: and kind decide them) instead of ignoring them: one line, exit 2."""
    import json

    from provisioner.cli import main

    stack = tmp_path / "stack.json"
    stack.write_text(json.dumps(stacks["llm"]))
    job = tmp_path / "job.yaml"
    shutil.copyfile(QWEN7B_CONFIG, tmp_path / "config.json")
    job.write_text((EXAMPLES / "seed003-sft-qwen25-7b-mindspeed.yaml").read_text() + "model_config: config.json\n")
    base = ["k8s", "--card", "800T-A2", "--devices", "0-3", "--root", str(host.root), "--dev-root", str(host.dev_root),
            "--job", str(job), "--stack", str(stack)]

    def refused(*extra) -> str:
        rc = main([*base, *extra])
        out, err = capsys.readouterr()
        assert rc == 2 and out == "" and err.count("\n") == 1, (rc, err)
        return err

    assert "--namespace: not a valid DNS label" in refused("--namespace", "Bad_NS!", IMAGES["llm"])
    assert "image" in refused("img with space")
    assert "give no COMMAND, --config, --name or --volcano" in refused("--name", "other", IMAGES["llm"])
    assert "--name or --volcano" in refused("--volcano", IMAGES["llm"])
    assert main([*base, "--namespace", "team-a", IMAGES["llm"]]) == 0
    out, err = capsys.readouterr()
    assert [d["metadata"]["namespace"] for d in yaml.safe_load_all(out) if d] == ["team-a", "team-a"]
