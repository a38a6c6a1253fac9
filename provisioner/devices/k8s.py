"""Render a DevicePlan as Kubernetes manifests: a batch/v1 Job, or a Volcano Job.

The chips themselves come from the device plugin (a resource request of the
family's name, e.g. huawei.com/Ascend910: 8); the plan supplies the count, the
read-only hostPath mounts (the plugin maps nodes but no driver files), the
group, /dev/shm and the launch environment. Multi-node jobs use hostNetwork,
take HCCL_IF_IP from status.hostIP and the node rank from the pod's index.

Each pod runs what `provision launch` runs for the same plan (devices/torchrun.py):
torchrun with one worker per chip of the pod, --standalone on one node; across
nodes --nnodes, and --node-rank / --master-addr / --master-port as $(NODE_RANK),
$(MASTER_ADDR), $(MASTER_PORT), which Kubernetes expands from the pod's env (the
Job's completion index or Volcano's task index; the first pod's DNS name under
the headless Service, or Volcano's svc plugin). The command goes in `args`, so the
image's entrypoint (CANN's environment) still runs first. `--config FILE` ships the
trainer config, checked against the trainer's schema, in a ConfigMap mounted
read-only where torchrun's trainer reads it.
"""

from __future__ import annotations

import re

from provisioner import validate
from provisioner.devices import torchrun
from provisioner.devices.plan import DevicePlan
from provisioner.errors import ProvisionError

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
TASK = "worker"
# API shapes (Kubernetes Job "Completion mode"; Volcano env/svc plugins).
JOB_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
VOLCANO_INDEX_FIELD = "metadata.annotations['volcano.sh/task-index']"
CONFIG_VOLUME = "trainer-config"


def trainer_config(path: str) -> str:
    """The trainer config FILE, checked against the trainer's schema (names, types, values; its paths are the
    pods' and are not looked for here), as the YAML text the ConfigMap carries; one clear line when it fails."""
    from provisioner.train.config import portable_text

    try:
        return portable_text(path)
    except ProvisionError as exc:
        raise ProvisionError(f"--config {path}: {exc}") from None


def _quantity(size: str) -> str:
    from provisioner.devices.plan import shm_bytes

    n = shm_bytes(size)
    for unit, mult in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


def _volumes(plan: DevicePlan) -> tuple[list[dict], list[dict]]:
    volumes: list[dict] = []
    mounts: list[dict] = []
    used: dict[str, int] = {}
    for m in plan.mounts:
        used[m.id] = used.get(m.id, 0) + 1
        name = m.id if used[m.id] == 1 else f"{m.id}-{used[m.id]}"
        volumes.append({"name": name, "hostPath": {"path": m.host, "type": "Directory" if m.kind == "dir" else "File"}})
        mounts.append({"name": name, "mountPath": m.container, "readOnly": True})
    shm: dict = {"medium": "Memory"}
    if plan.shm_size:
        shm["sizeLimit"] = _quantity(plan.shm_size)
    volumes.append({"name": "shm", "emptyDir": shm})
    mounts.append({"name": "shm", "mountPath": plan.settings["shm_path"]})
    return volumes, mounts


def _env(plan: DevicePlan, rank_field: str, master: str) -> list[dict]:
    out: list[dict] = []
    for e in plan.env:
        if e.name == "NODE_RANK":
            out.append({"name": e.name, "valueFrom": {"fieldRef": {"fieldPath": rank_field}}})
        elif e.name == "MASTER_ADDR":
            out.append({"name": e.name, "value": plan.multi.master_addr or master})
        elif e.value is not None:
            out.append({"name": e.name, "value": e.value})
        elif e.k8s_field and plan.network == "host":
            out.append({"name": e.name, "valueFrom": {"fieldRef": {"fieldPath": e.k8s_field}}})
    return out


def _pod(plan: DevicePlan, image: str, command: list[str], labels: dict, rank_field: str, master: str,
         subdomain: str | None = None) -> dict:
    if not plan.k8s_resource:
        raise ProvisionError(f"no Kubernetes resource name is known for chip family {plan.family}")
    count = str(len(plan.chips))
    volumes, mounts = _volumes(plan)
    container: dict = {"name": "train", "image": image, "args": command}
    env = _env(plan, rank_field, master)
    if env:
        container["env"] = env
    container["resources"] = {"limits": {plan.k8s_resource: count}, "requests": {plan.k8s_resource: count}}
    container["volumeMounts"] = mounts
    spec: dict = {"restartPolicy": "Never"}
    if subdomain:
        spec["subdomain"] = subdomain
    if plan.network == "host":
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"
    if plan.group_add:
        spec["securityContext"] = {"supplementalGroups": list(plan.group_add)}
    spec["containers"] = [container]
    spec["volumes"] = volumes
    return {"metadata": {"labels": dict(labels)}, "spec": spec}


def volcano_job(meta: dict, nnodes: int, task: str, pod: dict, **policy) -> dict:
    """A Volcano Job of `nnodes` replicas of `pod` in one task: the env plugin gives each pod its index and,
    across nodes, the svc plugin the host names the master address uses. `policy` (maxRetry, policies) goes
    between minAvailable and the plugins."""
    plugins: dict[str, list] = {"env": [], "svc": []} if nnodes > 1 else {"env": []}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": nnodes,
            **policy,
            "plugins": plugins,
            "tasks": [{"name": task, "replicas": nnodes, "template": pod}],
        },
    }


def pod_template(plan: DevicePlan, image: str, command: list[str], labels: dict, rank_field: str, master: str,
                 subdomain: str | None = None) -> dict:
    """One pod template for the plan (what `provision k8s --job` builds its Volcano Job and RayJob pods on)."""
    return _pod(plan, image, command, labels, rank_field, master, subdomain)


def train_command(plan: DevicePlan, config_path: str) -> list[str]:
    """torchrun around the bundled trainer, as `provision launch` starts it, with the pod's rank and master
    from its environment."""
    target = torchrun.Target.train(["--config", config_path])
    return torchrun.command(plan, target, torchrun.environment(plan, {}, {})[1], from_env=True)


def config_map(meta: dict, cm_name: str, text: str, path: str) -> tuple[dict, dict, dict]:
    """The ConfigMap holding the checked trainer config, its volume and its read-only mount (the file's folder)."""
    import posixpath

    folder, file = posixpath.split(path)
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": cm_name}, "data": {file: text}}
    volume = {"name": CONFIG_VOLUME, "configMap": {"name": cm_name, "items": [{"key": file, "path": file}]}}
    return doc, volume, {"name": CONFIG_VOLUME, "mountPath": folder, "readOnly": True}


def manifests(
    plan: DevicePlan,
    image: str,
    command: list[str] | None = None,
    name: str = "provision-train",
    volcano: bool = False,
    config_text: str | None = None,
    namespace: str | None = None,
) -> list[dict]:
    """The Job (with a headless Service across nodes) or Volcano Job running `command` (default: torchrun around
    the trainer), and with `config_text` (trainer_config()) a ConfigMap the pods read it from."""
    # A DNS label (the Job, its Service and the pods' subdomain), short enough for the pod names derived from it.
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > 52:
        raise ProvisionError(f"--name {name!r}: use lower-case letters, digits and '-', at most 52 characters")
    if namespace is not None:
        validate.dns_label(namespace, "--namespace")
    validate.image_ref(image, "image")
    s = plan.settings
    config_path = s["k8s_train_config"] if config_text is not None else s["train_config"]
    command = list(command) if command else train_command(plan, config_path)
    labels = {"app.kubernetes.io/name": "provision", "app.kubernetes.io/instance": name}
    if plan.ring_label:
        labels["ring-controller.atlas"] = plan.ring_label
    labels["framework"] = s["k8s_framework_label"]
    meta: dict = {"name": name, "labels": dict(labels)}
    if namespace:
        meta["namespace"] = namespace
    n = plan.multi.nnodes
    docs: list[dict] = []
    extra: tuple[dict, dict] | None = None
    if config_text is not None:
        cm, volume, mount = config_map(meta, f"{name}-config", config_text, s["k8s_train_config"])
        docs.append(cm)
        extra = (volume, mount)
    if volcano:
        pod = _with(plan, _pod(plan, image, command, labels, VOLCANO_INDEX_FIELD, f"{name}-{TASK}-0.{name}"), extra)
        return docs + [volcano_job(meta, n, TASK, pod)]
    pod = _pod(plan, image, command, labels, JOB_INDEX_FIELD, f"{name}-0.{name}", name if n > 1 else None)
    pod = _with(plan, pod, extra)
    job_spec: dict = {"backoffLimit": 0, "completions": n, "parallelism": n}
    if n > 1:
        # Indexed pods are named <job>-<index>; with a headless Service as their
        # subdomain, <job>-0.<job> resolves to node rank 0 (the rendezvous host).
        job_spec["completionMode"] = "Indexed"
        docs.append({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": dict(meta),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": {"job-name": name}},
        })
    job_spec["template"] = pod
    docs.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": job_spec})
    return docs


def _with(plan: DevicePlan, pod: dict, extra: tuple[dict, dict] | None) -> dict:
    """The pod of `provision k8s`: the variables `provision launch` adds for torchrun (unbuffered output, the
    rank prefix, one thread per worker) and the trainer config's volume, if any."""
    c = pod["spec"]["containers"][0]
    env = c.setdefault("env", [])
    env += [{"name": k, "value": v} for k, v in torchrun.environment(plan, {}, {})[0].items()
            if k not in {e["name"] for e in env}]
    if extra is not None:
        pod["spec"]["volumes"].append(extra[0])
        c["volumeMounts"].append(extra[1])
    return pod


def header(plan: DevicePlan, volcano: bool, config: str | None = None, custom: bool = False) -> list[str]:
    kind = "Volcano Job" if volcano else "Job"
    lines = [
        f"# Kubernetes {kind} for {plan.card['id']} ({plan.card['name']}): {len(plan.chips)} x {plan.k8s_resource}"
        f" per pod, {plan.multi.nnodes} node(s); written by provision k8s",
        "# the device plugin picks the chips; hostPath mounts follow the host this plan was read from",
    ]
    s = plan.settings
    if config is not None:
        lines.append(f"# trainer config: {config}, checked, in the ConfigMap (read-only at {s['k8s_train_config']})")
    if not custom:
        n = len(plan.chips)
        ranks = f" (world size {plan.world_size}: rank = {n} x the pod's index + local rank)" if plan.multi.nnodes > 1 else ""
        reads = "" if config is not None else f"; the trainer reads {s['train_config']} (no --config FILE given)"
        lines.append(f"# each pod runs torchrun with {n} worker(s), one per chip{ranks}{reads}")
    lines.extend(f"# note: {n}" for n in plan.notes)
    return [validate.comment(line) for line in lines]


def render(docs: list[dict], plan: DevicePlan, volcano: bool = False, config: str | None = None,
           custom: bool = False) -> str:
    """The manifests as one YAML stream under a comment header; `config`: the --config FILE given (named there);
    `custom`: the pods run a command given in place of the trainer's."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, value: str):
        # The trainer config as a literal block, readable in the manifest as in its file.
        style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    body = "---\n".join(yaml.dump(d, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=1000)
                         for d in docs)
    return "\n".join(header(plan, volcano, config, custom)) + "\n---\n" + body
