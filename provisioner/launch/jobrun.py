"""`provision launch --job`: run a framework job's steps in one container per node, with the device plan.

    JobPlan (provisioner.jobs.plan) ─▶ <output>/provision-job/ (run.sh, steps/, configs/, job.json)
        ─▶ one container: `bash run.sh` with the plan's devices, mounts, HCCL variables and NODE_RANK
        ─▶ the driver runs each step whose outputs are missing, logging `[provision-job] step ...` lines
        ─▶ per-step results, exit code, cleanup on Ctrl-C (as provision launch)

The model directory and the data file's directory are mounted read-only at their own paths, the output
directory read-write; a job spanning nodes runs this on every node with its --node-rank (shared storage
at the same paths; `storage: local` is for one node). Container start, log streaming, signals and removal are
provisioner.launch.run's, through any provisioner.engine Engine (Docker, or the fake in unit tests).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import TextIO

from provisioner.devices import torchrun
from provisioner.devices.plan import DevicePlan
from provisioner.engine.base import Engine
from provisioner.engine.types import ImageInfo
from provisioner.errors import ProvisionError
from provisioner.launch import container
from provisioner.launch import run as launch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.jobs.plan import JobPlan

SCHEMA = "provision.launch-job/1"
JOB_LABEL = "org.provision.job"
MARK = re.compile(r"^\[provision-job\] step (?P<id>[\w-]+): (?P<what>skip|start|ok|failed on node 0|failed|stopped"
                  r"|waiting|done on node 0|node 0 did not)")
_STATUS = {"skip": "skipped", "start": "running", "ok": "ok", "failed": "failed", "stopped": "interrupted",
           "waiting": "waiting",
           "done on node 0": "done-on-node-0", "failed on node 0": "failed-on-node-0", "node 0 did not": "timed-out"}


@dataclass
class JobRun:
    """What `launch --job` runs on this node."""

    plan: JobPlan
    devices: DevicePlan
    image: ImageInfo
    env: dict[str, str] = field(default_factory=dict)  # -e
    volumes: list[tuple[str, str, str]] = field(default_factory=list)  # -v, besides the job's own
    network: str | None = None
    keep: bool = False
    name: str | None = None
    stop_timeout: int = container.STOP_TIMEOUT_S
    labels: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    init: bool = True


def job_mounts(plan) -> list[tuple[str, str, str]]:
    """(host, container, mode) binds of the job's storage: provisioner.jobs.plan.mounts, each at its own path,
    so the scripts' paths are the same inside and out."""
    from provisioner.jobs.plan import mounts

    return [(path, path, mode) for _, path, mode in mounts(plan.spec)]


def image_framework(info: ImageInfo) -> dict | None:
    """The image's framework labels (set, kind, locked environment, checkouts), or None for an image without."""
    from provisioner.image.labels import framework_from_labels

    return framework_from_labels(info.labels)


def check_host(plan) -> list[str]:
    """What this host lacks for the job (the launch refuses): the model directory, the data file, the disk
    space its output needs (provisioner.jobs.disk, where this host can read it)."""
    from provisioner.jobs import disk as jobdisk

    spec = plan.spec
    reasons = []
    if not os.path.isdir(spec.model):
        reasons.append(f"{spec.at('model')}: model directory {spec.model} does not exist on this host (it is mounted"
                       " read-only into the container)")
    if not os.path.isfile(spec.data.path):
        reasons.append(f"{spec.at('data.path')}: data file {spec.data.path} does not exist on this host")
    if os.path.exists(spec.output) and not os.path.isdir(spec.output):
        reasons.append(f"{spec.at('output')}: output {spec.output} exists and is not a directory")
    elif plan.disk:
        reasons += jobdisk.check(spec, plan.disk)
    return reasons


def write_files(plan) -> list[str]:
    """Write the job directory (scripts, configs, job.json), each file atomically; notes for the user."""
    from provisioner.jobs.plan import job_json

    notes = []
    job_dir = plan.job_dir
    previous = _previous_digest(job_dir)
    if previous and previous != plan.digest():
        notes.append(f"the job's scripts changed since the last run in {job_dir} ({previous} -> {plan.digest()});"
                     " steps are still skipped by their outputs")
    files = dict(plan.files)
    files["job.json"] = job_json(plan)
    for rel, text in sorted(files.items()):
        _write(os.path.join(job_dir, rel), text, 0o755 if rel.endswith(".sh") else 0o644)
    return notes


def _previous_digest(job_dir: str) -> str | None:
    try:
        with open(os.path.join(job_dir, "job.json"), encoding="utf-8") as fh:
            return json.load(fh).get("digest")
    except (OSError, ValueError, AttributeError):
        return None


def _write(path: str, text: str, mode: int) -> None:
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".provision-", dir=folder)
    except OSError as exc:
        raise ProvisionError(f"cannot write the job files in {folder} ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        os.unlink(tmp)
        raise ProvisionError(f"cannot write {path} ({exc.strerror})") from None


def environment(job: JobRun) -> tuple[dict[str, str], int]:
    """Launch defaults, then the job kind's and the job file's variables, then -e."""
    user = {**job.plan.env, **job.env}
    return torchrun.environment(job.devices, user, job.image.env)


def command(plan) -> list[str]:
    from provisioner.jobs.plan import DRIVER

    return ["bash", os.path.join(plan.job_dir, DRIVER)]


def run(job: JobRun, engine: Engine, out: TextIO | None = sys.stdout, err: TextIO | None = sys.stderr) -> dict:
    """Run the driver on this node; the provision.launch-job/1 summary."""
    plan = job.plan
    env, _ = environment(job)
    steps: dict[str, dict] = {s.id: {"id": s.id, "title": s.title, "run": s.run, "status": "not-run"} for s in plan.steps}
    order = [s.id for s in plan.steps]

    def on_line(line: str) -> None:
        m = MARK.match(line)
        if m and m["id"] in steps:
            steps[m["id"]]["status"] = _STATUS[m["what"]]

    base = launch.Job(plan=job.devices, image=job.image, target=None, env={}, volumes=job_mounts(plan) + list(job.volumes),
                      network=job.network, init=job.init, keep=job.keep, name=job.name, stop_timeout=job.stop_timeout,
                      labels={**job.labels, JOB_LABEL: plan.spec.name}, notes=job.notes)
    kw = launch.container_kwargs(base, "job", command(plan), env)
    started = time.monotonic()
    container.say(err, f"run {base.run_id}: job {plan.spec.name} ({plan.kind['id']}, node {job.devices.multi.node_rank}"
              f" of {plan.nnodes}) in {kw['name']}: $ {' '.join(command(plan))}")
    with container.SignalGuard() as guard:
        result = container.run_container(engine, kw, "job", guard, out, err, job.keep, job.stop_timeout, on_line=on_line)
    for s in steps.values():
        if s["status"] in ("running", "waiting"):
            s["status"] = "interrupted" if result.signal else "failed"
    if result.signal:
        status = "interrupted"
    else:
        status = "ok" if result.exit_code == 0 else "failed"
    failed = next((s for s in steps.values() if s["status"] in ("failed", "failed-on-node-0", "timed-out")), None)
    env_all = {**dict(job.devices.runtime_env), **{e.name: e.value for e in job.devices.env if e.value is not None}, **env}
    return {
        "schema": SCHEMA,
        "status": status,
        "run_id": base.run_id,
        "job": {"name": plan.spec.name, "kind": plan.kind["id"], "file": plan.spec.source, "digest": plan.digest(),
                "dir": plan.job_dir},
        "image": {"ref": job.image.ref, "id": job.image.id, "stack_id": (job.devices.stack or {}).get("id")},
        "card": job.devices.card,
        "devices": list(job.devices.chips),
        "node_rank": job.devices.multi.node_rank,
        "nnodes": plan.nnodes,
        "parallel": plan.spec.parallel.label(),
        "memory": plan.memory,
        "steps": [steps[i] for i in order],
        "failed_step": failed["id"] if failed else None,
        "command": result.command,
        "container": result.container,
        "kept": result.kept,
        "exit_code": result.exit_code,
        "signal": result.signal,
        "duration_s": round(time.monotonic() - started, 3),
        "error": result.error,
        "log_tail": result.tail,
        "environment": env_all,
        "notes": list(job.notes) + list(plan.notes) + list(job.devices.notes),
        "explanation": launch.explanation(result if launch.failed(result) else None),
    }


def exit_code(doc: dict) -> int:
    code = doc["exit_code"]
    if code is None:
        return 1
    return int(code)


def describe(doc: dict) -> list[str]:
    lines = [f"step {s['id']}: {s['status']}" for s in doc["steps"]]
    where = doc["container"] + (" kept" if doc["kept"] else " removed")
    took = f"{doc['duration_s']:.1f} s"
    if doc["status"] == "interrupted":
        lines.append(f"interrupted by {doc['signal']} after {took}: container {where}; exit {doc['exit_code']};"
                     f" run the same command again to resume")
    elif doc["status"] == "ok":
        lines.append(f"job {doc['job']['name']} finished: exit 0 in {took} (container {where}); outputs in"
                     f" {os.path.dirname(doc['job']['dir'])}")
    else:
        step = f" in step {doc['failed_step']}" if doc["failed_step"] else ""
        why = f"; {doc['error']}" if doc["error"] else ""
        lines.append(f"job {doc['job']['name']} failed{step}: exit {doc['exit_code']} after {took}{why}"
                     f" (logs in {doc['job']['dir']}/logs; container {where})")
    return lines + launch.explanation_lines(doc)


def dry_run(plan, devices, image_ref: str) -> dict:
    """What would run, without writing or starting anything."""
    from provisioner.jobs.plan import existing_outputs

    done = existing_outputs(plan)
    doc = plan.to_dict()
    doc["schema"] = SCHEMA
    doc["status"] = "dry-run"
    doc["image"] = image_ref
    doc["devices"] = list(devices.chips)
    doc["node_rank"] = devices.multi.node_rank
    doc["mounts"] = [{"host": h, "container": c, "mode": m} for h, c, m in job_mounts(plan)]
    doc["steps"] = [s.to_dict() | {"would": "skip" if done[s.id] else "run"} for s in plan.steps]
    doc["command"] = command(plan)
    return doc

