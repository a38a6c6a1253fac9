"""Render a DevicePlan as Kubernetes manifests: a batch/v1 Job, or a Volcano Job.

The chips themselves come from the device plugin (a resource request of the
family's name, e.g. huawei.com/Ascend910: 8); the plan supplies the count, the
read-only hostPath mounts (the plugin maps nodes but no driver files), the
group, /dev/shm and the launch environment. Multi-node jobs use hostNetwork,
take HCCL_IF_IP from status.hostIP and the node rank from the pod's index.
"""

from __future__ import annotations

import re

from provisioner import validate
from provisioner.devices.plan import DevicePlan
from provisioner.errors import ProvisionError

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
TASK = "worker"
# API shapes (Kubernetes Job "Completion mode"; Volcano env/svc plugins).
JOB_INDEX_FIELD = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
VOLCANO_INDEX_FIELD = "metadata.annotations['volcano.sh/task-index']"


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
    out = []
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
    container: dict = {"name": "train", "image": image, "command": command}
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


def manifests(
    plan: DevicePlan,
    image: str,
    command: list[str] | None = None,
    name: str = "provision-train",
    volcano: bool = False,
    config: str | None = None,
    namespace: str | None = None,
) -> list[dict]:
    # A DNS label (the Job, its Service and the pods' subdomain), short enough for the pod names derived from it.
    if not isinstance(name, str) or not _NAME.fullmatch(name) or len(name) > 52:
        raise ProvisionError(f"--name {name!r}: use lower-case letters, digits and '-', at most 52 characters")
    if namespace is not None:
        validate.dns_label(namespace, "--namespace")
    validate.image_ref(image, "image")
    s = plan.settings
    command = list(command) if command else [s["train_command"], "--config", config or s["train_config"]]
    labels = {"app.kubernetes.io/name": "provision", "app.kubernetes.io/instance": name}
    if plan.ring_label:
        labels["ring-controller.atlas"] = plan.ring_label
    labels["framework"] = s["k8s_framework_label"]
    meta: dict = {"name": name, "labels": dict(labels)}
    if namespace:
        meta["namespace"] = namespace
    n = plan.multi.nnodes
    if volcano:
        pod = _pod(plan, image, command, labels, VOLCANO_INDEX_FIELD, f"{name}-{TASK}-0.{name}")
        return [volcano_job(meta, n, TASK, pod)]
    pod = _pod(plan, image, command, labels, JOB_INDEX_FIELD, f"{name}-0.{name}", name if n > 1 else None)
    job_spec: dict = {"backoffLimit": 0, "completions": n, "parallelism": n}
    docs = []
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


def header(plan: DevicePlan, volcano: bool) -> list[str]:
    kind = "Volcano Job" if volcano else "Job"
    lines = [
        f"# Kubernetes {kind} for {plan.card['id']} ({plan.card['name']}): {len(plan.chips)} x {plan.k8s_resource}"
        f" per pod, {plan.multi.nnodes} node(s); written by provision k8s",
        "# the device plugin picks the chips; hostPath mounts follow the host this plan was read from",
    ]
    lines.extend(f"# note: {n}" for n in plan.notes)
    return [validate.comment(line) for line in lines]


def render(docs: list[dict], plan: DevicePlan, volcano: bool = False) -> str:
    import yaml

    body = "---\n".join(yaml.safe_dump(d, sort_keys=False, default_flow_style=False, width=1000) for d in docs)
    return "\n".join(header(plan, volcano)) + "\n---\n" + body
