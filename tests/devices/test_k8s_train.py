"""`provision k8s` runs the bundled trainer across its pods: torchrun with the pod's chips, the rank and the
master from Kubernetes, the trainer config checked and shipped in a ConfigMap; manifests validated against the
real schemas (kubernetes-validate for the core kinds, the Volcano Job CRD at its pinned commit, strict)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import yaml

from provisioner.devices import k8s, torchrun
from provisioner.devices.plan import MultiNode
from provisioner.errors import ProvisionError
from tests.devices.test_device_cli import host_args, one_error_line, run
from tests.helpers import k8spod
from tests.jobs.test_golden import validate as validate_kinds

CONFIG = {
    "model": "/data/models/qwen",  # the pods' paths: not on this machine
    "data": "/data/sft.jsonl",
    "output_dir": "/data/out",
    "method": "lora",
    "lora": {"r": 16},
    "max_steps": 50,
    "learning_rate": "2e-5",  # YAML 1.1 reads this as a string; the schema reads a number
}


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(CONFIG, sort_keys=False))
    return path


def two_nodes(make_plan):
    return make_plan("plan-800ta2-8", "800T-A2", "0-7", check_in_use=False, multi=MultiNode(2))


def container(doc: dict) -> dict:
    spec = doc["spec"]
    template = spec["tasks"][0]["template"] if doc["apiVersion"].startswith("batch.volcano.sh/") else spec["template"]
    (c,) = template["spec"]["containers"]
    return c


def pod_spec(doc: dict) -> dict:
    spec = doc["spec"]
    return (spec["tasks"][0]["template"] if doc["apiVersion"].startswith("batch.volcano.sh/") else spec["template"])["spec"]


@pytest.mark.parametrize("volcano", [False, True], ids=["job", "volcano"])
def test_two_pods_run_torchrun_as_launch_would_on_each_node(make_plan, config_file, volcano):
    plan = two_nodes(make_plan)
    docs = k8s.manifests(plan, "img:1", name="sft", volcano=volcano, config_text=k8s.trainer_config(str(config_file)))
    assert [d["kind"] for d in docs] == (["ConfigMap", "Job"] if volcano else ["ConfigMap", "Service", "Job"])
    for doc in docs:
        assert validate_kinds(doc) == [], doc["kind"]
    job = docs[-1]
    c = container(job)
    assert "command" not in c  # args: the image's entrypoint (CANN's environment) runs first
    index_key = "volcano.sh/task-index" if volcano else "batch.kubernetes.io/job-completion-index"
    master = "sft-worker-0.sft" if volcano else "sft-0.sft"
    path = "/etc/provision/train/train.yaml"
    for index in (0, 1):
        env = k8spod.environment(c, {index_key: str(index)}, host_ip=f"10.0.0.{index + 1}")
        # What this pod runs is what `provision launch` runs as node `index` of the same plan.
        node = replace(plan, multi=MultiNode(2, index, master, "29500"))
        assert k8spod.args(c, env) == torchrun.command(node, torchrun.Target.train(["--config", path]), 8)
        assert k8spod.args(c, env)[:12] == ["torchrun", "--nproc-per-node", "8", "--nnodes", "2", "--node-rank",
                                            str(index), "--master-addr", master, "--master-port", "29500", "--tee"]
        assert env["NPROC_PER_NODE"] == "8" and env["HCCL_IF_IP"] == f"10.0.0.{index + 1}"
        for k, v in torchrun.LAUNCH_ENV.items():
            assert env[k] == v
    # the master's name is the first pod's: the Service (or Volcano's svc plugin) makes it resolvable
    if volcano:
        assert set(job["spec"]["plugins"]) == {"env", "svc"}
    else:
        service = docs[1]
        assert service["spec"]["clusterIP"] == "None" and pod_spec(job)["subdomain"] == service["metadata"]["name"]
        assert job["spec"]["completionMode"] == "Indexed"


@pytest.mark.parametrize("volcano", [False, True], ids=["job", "volcano"])
def test_the_config_map_is_mounted_read_only_where_the_trainer_reads_it(make_plan, config_file, volcano):
    docs = k8s.manifests(two_nodes(make_plan), "img:1", name="sft", volcano=volcano,
                         config_text=k8s.trainer_config(str(config_file)))
    cm, job = docs[0], docs[-1]
    c, spec = container(job), pod_spec(job)
    path = c["args"][c["args"].index("--config") + 1]
    mount = next(m for m in c["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    assert mount["readOnly"] is True
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["configMap"]["name"] == cm["metadata"]["name"] == "sft-config"
    (item,) = volume["configMap"]["items"]
    assert f"{mount['mountPath']}/{item['path']}" == path
    shipped = yaml.safe_load(cm["data"][item["key"]])
    # exactly the keys the file sets, with the values the trainer's schema read
    assert shipped == {**CONFIG, "data": ["/data/sft.jsonl"], "learning_rate": 2e-5}


def test_one_node_runs_torchrun_standalone_with_the_chips(make_plan, config_file):
    plan = make_plan("plan-300ta2-4", "300T-A2", "0-3", check_in_use=False)
    (cm, job) = k8s.manifests(plan, "img:1", config_text=k8s.trainer_config(str(config_file)))
    assert container(job)["args"] == ["torchrun", "--nproc-per-node", "4", "--standalone", "--tee", "3", "-m",
                                       "provisioner.train", "--config", "/etc/provision/train/train.yaml"]
    assert validate_kinds(cm) == [] and validate_kinds(job) == []


def test_a_command_given_runs_instead_and_still_sees_the_config(make_plan, config_file):
    docs = k8s.manifests(two_nodes(make_plan), "img:1", ["python", "my.py"], name="sft", volcano=True,
                         config_text=k8s.trainer_config(str(config_file)))
    c = container(docs[-1])
    assert c["args"] == ["python", "my.py"]
    assert any(m["mountPath"] == "/etc/provision/train" for m in c["volumeMounts"])


@pytest.mark.parametrize("body, fragment", [
    ("model: /m\ndata: /d.jsonl\noutput_dir: /o\nlearning_rat: 1\n", "learning_rat: unknown key (did you mean 'learning_rate'?)"),
    ("model: /m\ndata: /d.jsonl\noutput_dir: /o\nstrategy: zero9\n", "strategy: must be one of"),
    ("model: /m\ndata: /d.txt\noutput_dir: /o\n", "expected a .json or .jsonl file"),
    ("data: /d.jsonl\noutput_dir: /o\n", "model: required"),
    ("- a\n- b\n", "config must be a mapping"),
    ("model: /m\ndata: /d.jsonl\noutput_dir: /o\nmethod: grpo\ngrpo: {rewards: [math, math]}\n", "'math' is listed twice"),
])
def test_a_bad_trainer_config_is_refused_in_one_line(tmp_path, body, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    with pytest.raises(ProvisionError) as exc:
        k8s.trainer_config(str(path))
    assert fragment in str(exc.value) and str(exc.value).startswith(f"--config {path}:")
    assert "\n" not in str(exc.value)


def test_k8s_cli_config_file(capsys, plan_hosts, config_file, tmp_path):
    hosts = host_args(plan_hosts, "plan-800ta2-8")
    rc, out, _ = run(capsys, "k8s", "--card", "800T-A2", "--devices", "0-7", "--nnodes", "2", *hosts,
                     "--config", str(config_file), "--json", "img:1")
    doc = json.loads(out)
    assert rc == 0 and [d["kind"] for d in doc["manifests"]] == ["ConfigMap", "Service", "Job"]
    rc, out, _ = run(capsys, "k8s", "--card", "800T-A2", "--devices", "0-7", "--nnodes", "2", *hosts,
                     "--config", str(config_file), "--volcano", "img:1")
    assert rc == 0 and f"# trainer config: {config_file}, checked" in out
    assert [d["kind"] for d in yaml.safe_load_all(out) if d] == ["ConfigMap", "Job"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: /m\ndata: /d.jsonl\noutput_dir: /o\nmicro_batch_size: 0\n")
    one_error_line(*run(capsys, "k8s", "--card", "800T-A2", "--devices", "0-7", *hosts, "--config", str(bad), "img:1"),
                   "micro_batch_size: must be >= 1")
    one_error_line(*run(capsys, "k8s", "--card", "800T-A2", "--devices", "0-7", *hosts, "--config",
                        str(tmp_path / "none.yaml"), "img:1"), "config file not found")
