"""`provision k8s --job`: Kubernetes manifests for a JobPlan.

    ConfigMap <name>-job     the job's files (run.sh, steps/, configs/, job.json); each pod copies them into
                             <output>/provision-job on the job's storage and runs the driver from there
    torchrun / msrun kinds   a Volcano Job (batch.volcano.sh/v1alpha1): one pod per node, NODE_RANK from the
                             task index, MASTER_ADDR the first pod's name (svc plugin); a failed or evicted pod
                             restarts the job, which resumes from its outputs and checkpoints
    ray kinds (GRPO)         a KubeRay RayJob (ray.io/v1): the head and a worker group, each pod with the NPU
                             request, the driver mounts and the HCCL variables; the entrypoint runs the driver
                             on the head (RAY_ADDRESS set), which skips `ray start` and submits the trainer

Pods are built on provisioner.devices.k8s.pod_template, so device requests, read-only driver mounts,
/dev/shm, hostNetwork and the HCCL variables are the same as `provision k8s`. The job's storage (model,
data, output) is a hostPath at the same path on every node, or a PersistentVolumeClaim (--pvc).
"""

from __future__ import annotations

import json
import re

from provisioner import validate
from provisioner.devices import k8s as dk8s
from provisioner.devices.plan import DevicePlan
from provisioner.errors import ProvisionError

CONFIG_MOUNT = "/etc/provision/job"
BOOTSTRAP = "bootstrap.sh"  # in the ConfigMap only: copies the job files onto the job's storage, runs run.sh
VOLCANO_TASK = "worker"
RAY_HEAD = "ray-head"
RAY_GROUP = "npu-workers"
# Variables of the torchrun rendezvous that mean nothing on a Ray pod (Ray has its own head address).
RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK")
VOLCANO_MAX_RETRY = 3  # a restarted job resumes (steps skipped by their outputs, training from checkpoints)
RAYJOB_BACKOFF = 2
_PVC = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?):(/[A-Za-z0-9._+@=,/-]*)\Z")


def parse_pvc(items: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    """--pvc CLAIM:/mount/path -> [(claim, mount)]."""
    out = []
    for item in items:
        m = _PVC.match(item)
        if not m:
            raise ProvisionError(f"--pvc {item!r}: write CLAIM:/MOUNT/PATH (a claim name, an absolute path)")
        out.append((m[1], m[3].rstrip("/") or "/"))
    return out


def manifests(jplan, dplan: DevicePlan, image: str, namespace: str | None = None,
              pvcs: list[tuple[str, str]] | None = None) -> list[dict]:
    name = jplan.spec.name
    labels = {"app.kubernetes.io/name": "provision", "app.kubernetes.io/instance": name,
              "app.kubernetes.io/component": jplan.kind["id"]}
    if dplan.ring_label:
        labels["ring-controller.atlas"] = dplan.ring_label
    labels["framework"] = dplan.settings["k8s_framework_label"]
    meta: dict = {"name": name, "labels": dict(labels)}
    if namespace:
        meta["namespace"] = namespace
    cm_name = f"{name}-job"
    ray = jplan.kind["launcher"] == "ray"
    cm, items = config_map(jplan, cm_name, meta, bootstrap(jplan, ray))
    volumes, mounts = storage(jplan, pvcs or [])
    volumes.append({"name": "job-files", "configMap": {"name": cm_name, "items": items}})
    mounts.append({"name": "job-files", "mountPath": CONFIG_MOUNT, "readOnly": True})
    boot = ["bash", f"{CONFIG_MOUNT}/{BOOTSTRAP}"]
    if ray:
        return [cm, rayjob(jplan, dplan, image, meta, labels, volumes, mounts, boot)]
    return [cm, volcano_job(jplan, dplan, image, meta, labels, volumes, mounts, boot)]


def config_map(jplan, cm_name: str, meta: dict, boot: str) -> tuple[dict, list[dict]]:
    from provisioner.jobs.plan import job_json

    files = dict(jplan.files)
    files["job.json"] = job_json(jplan)
    files[BOOTSTRAP] = boot
    data, items = {}, []
    for path in sorted(files):
        key = path.replace("/", "__")
        data[key] = files[path]
        items.append({"key": key, "path": path})
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": cm_name}, "data": data}
    return doc, items


def bootstrap(jplan, ray: bool) -> str:
    from provisioner.jobs import render

    env = render._env()
    return env.get_template("jobs/k8s-bootstrap.sh.j2").render(
        job={"name": jplan.spec.name}, paths=jplan.paths, mount=CONFIG_MOUNT, ray=ray)


def storage(jplan, pvcs: list[tuple[str, str]]) -> tuple[list[dict], list[dict]]:
    """Volumes for the job's mounts (provisioner.jobs.plan.mounts, as `launch --job` binds them): a claim that
    covers a path serves it, else a hostPath at the same path (shared storage mounted alike on every node)."""
    from provisioner.jobs.plan import mounts

    wanted = mounts(jplan.spec)
    volumes: list[dict] = []
    out: list[dict] = []
    used: list[str] = []
    for n, (claim, mount) in enumerate(pvcs):
        if any(_inside(path, mount) for _, path, _ in wanted):
            volumes.append({"name": f"pvc-{n}", "persistentVolumeClaim": {"claimName": claim}})
            out.append({"name": f"pvc-{n}", "mountPath": mount})
            used.append(mount)
    for role, path, mode in wanted:
        if any(_inside(path, m) for m in used):
            continue
        kind = "Directory" if mode == "ro" else "DirectoryOrCreate"
        volumes.append({"name": f"job-{role}", "hostPath": {"path": path, "type": kind}})
        entry: dict = {"name": f"job-{role}", "mountPath": path}
        if mode == "ro":
            entry["readOnly"] = True
        out.append(entry)
    return volumes, out


def _inside(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _job_pod(jplan, dplan: DevicePlan, image: str, labels: dict, rank_field: str, master: str, args: list[str],
             volumes: list[dict], mounts: list[dict], container_name: str, drop: tuple[str, ...] = (),
             subdomain: str | None = None) -> dict:
    import copy

    volumes, mounts = copy.deepcopy(volumes), copy.deepcopy(mounts)
    pod = dk8s.pod_template(dplan, image, [], labels, rank_field, master, subdomain)
    spec = pod["spec"]
    c = spec["containers"][0]
    c.pop("args")
    c["name"] = container_name
    c["args"] = list(args)  # the image's entrypoint (CANN environment) stays in front
    # The job kind's and the job file's variables win over the device plan's defaults, as in `launch --job`.
    env = [e for e in c.get("env", []) if e["name"] not in drop and e["name"] not in jplan.env]
    env += [{"name": k, "value": v} for k, v in sorted(jplan.env.items())]
    c["env"] = env
    c["volumeMounts"] = c["volumeMounts"] + mounts
    spec["volumes"] = spec["volumes"] + volumes
    return pod


def volcano_job(jplan, dplan: DevicePlan, image: str, meta: dict, labels: dict, volumes, mounts, boot: list[str]) -> dict:
    name, n = jplan.spec.name, jplan.nnodes
    master = f"{name}-{VOLCANO_TASK}-0.{name}"
    pod = _job_pod(jplan, dplan, image, labels, dk8s.VOLCANO_INDEX_FIELD, master, boot, volumes, mounts, "job")
    return dk8s.volcano_job(meta, n, VOLCANO_TASK, pod, maxRetry=VOLCANO_MAX_RETRY,
                            policies=[{"event": "PodEvicted", "action": "RestartJob"},
                                      {"event": "PodFailed", "action": "RestartJob"}])


def rayjob(jplan, dplan: DevicePlan, image: str, meta: dict, labels: dict, volumes, mounts, boot: list[str]) -> dict:
    npu = json.dumps({"NPU": len(dplan.chips)})
    # KubeRay's own quoting for custom resources; it opens the dashboard to the pod network itself
    # (ray-operator/controllers/ray/common/pod.go sets dashboard-host when absent).
    start = {"resources": f"'{npu}'"}
    head = _job_pod(jplan, dplan, image, labels, "", "", [], volumes, mounts, "ray-head", RENDEZVOUS)
    head["spec"]["containers"][0].pop("args")  # KubeRay writes the ray start command
    workers = []
    if jplan.nnodes > 1:
        worker = _job_pod(jplan, dplan, image, labels, "", "", [], volumes, mounts, "ray-worker", RENDEZVOUS)
        worker["spec"]["containers"][0].pop("args")
        n = jplan.nnodes - 1
        workers.append({"groupName": RAY_GROUP, "replicas": n, "minReplicas": n, "maxReplicas": n,
                        "rayStartParams": {"resources": f"'{npu}'"}, "template": worker})
    cluster: dict = {"headGroupSpec": {"rayStartParams": start, "template": head}}
    if workers:
        cluster["workerGroupSpecs"] = workers
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": meta,
        "spec": {
            "entrypoint": " ".join(boot),
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 600,
            "backoffLimit": RAYJOB_BACKOFF,
            "rayClusterSpec": cluster,
        },
    }


def header(jplan, dplan: DevicePlan) -> list[str]:
    kind = "KubeRay RayJob" if jplan.kind["launcher"] == "ray" else "Volcano Job"
    lines = [
        f"# {kind} for provision job {jplan.spec.name} ({jplan.kind['id']}, {jplan.spec.parallel.label()}):"
        f" {jplan.nnodes} pod(s) x {len(dplan.chips)} {dplan.k8s_resource} on {dplan.card['id']}; written by provision k8s --job",
        f"# model {jplan.spec.model}, data {jplan.spec.data.path}, output {jplan.spec.output}: the same paths on every node",
        f"# memory estimate: {jplan.memory['total_mb'] / 1024:.1f} GB of {(jplan.memory['hbm_mb'] or 0) / 1024:.0f} GB per chip",
    ]
    lines.extend(f"# note: {n}" for n in list(jplan.notes) + list(dplan.notes))
    # A note names the job file as given on the command line: it must not leave its comment line.
    return [validate.comment(line) for line in lines]


def render(docs: list[dict], jplan, dplan: DevicePlan) -> str:
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data) -> bool:
            return True

    def text(dumper, value: str):
        # Scripts and configs as literal blocks, readable in the manifest as in the job directory.
        style = "|" if "\n" in value and not any(line != line.rstrip() for line in value.splitlines()) else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    body = "---\n".join(yaml.dump(d, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=1000) for d in docs)
    return "\n".join(header(jplan, dplan)) + "\n---\n" + body
