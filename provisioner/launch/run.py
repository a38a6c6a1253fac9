"""`provision launch`: run a device plan in Docker with torchrun inside, and clean up after it.

    plan (devices.plan) ─▶ container kwargs (runline.docker_kwargs + command, env, labels)
        ─▶ create ─▶ start ─▶ stream logs (rank-prefixed lines) ─▶ wait ─▶ exit code ─▶ remove

An optional self-test (`provisioner.train.selftest` under torchrun: the chips, the
attention, the fused optimizer, HCCL and three training steps with the job's own
trainer config) and an optional collective check (`provisioner.launch.collective`),
each in its own container, run first and stop the launch when they fail. Each container
runs through launch.container (signals stop and remove it; an intended stop reads as one
closing line), and this module builds the summary document. Every container carries the label
`org.provision.launch=<run id>`, so leftovers can always be found. The engine is
reached through provisioner.engine (any Engine: the Docker one, or the fake in
unit tests); nothing here imports the Docker SDK.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, field, replace
from typing import TextIO

from provisioner.devices import runline, torchrun
from provisioner.devices.plan import DevicePlan
from provisioner.engine.base import Engine
from provisioner.engine.errors import EngineError, EngineUnavailable, ImageNotFound, short
from provisioner.engine.types import ImageInfo
from provisioner.errors import ProvisionError
from provisioner.launch import logstream
from provisioner.launch.collective import SCHEMA as COLLECTIVE_SCHEMA
from provisioner.launch.container import STOP_TIMEOUT_S, RunResult, SignalGuard, run_container, say

SELFTEST_SCHEMA = "provision.selftest/1"

SCHEMA = "provision.launch/1"
LABEL = "org.provision.launch"
ROLE_LABEL = "org.provision.launch.role"
WORKLOAD_ROLES = ("run", "job")
ENGINE_TIMEOUT_S = 30
FACTS_TIMEOUT_S = 5.0


@dataclass
class Job:
    """One launch: what to run, in which image, on which plan."""

    plan: DevicePlan
    image: ImageInfo
    target: torchrun.Target | None  # None: only the self-test and/or the check
    check: bool = False
    check_args: tuple[str, ...] = ()
    selftest: bool = False
    selftest_args: tuple[str, ...] = ()  # the trainer config (--config FILE, key=value) it tests
    env: dict[str, str] = field(default_factory=dict)  # -e, over the launch defaults
    volumes: list[tuple[str, str, str]] = field(default_factory=list)  # (host, container, ro|rw)
    workdir: str | None = None
    network: str | None = None  # overrides the plan's (host on multi-node)
    init: bool = True  # docker --init: a real PID 1 passes signals on and reaps workers
    keep: bool = False
    name: str | None = None
    stop_timeout: int = STOP_TIMEOUT_S
    run_id: str = field(default_factory=lambda: os.urandom(6).hex())  # 12 hex digits (uuid would import platform)
    notes: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)  # --label, besides launch's own

    @property
    def container_name(self) -> str:
        return self.name or f"provision-launch-{self.run_id}"


# -- engine ---------------------------------------------------------------------------------


def connect(timeout: int = ENGINE_TIMEOUT_S) -> Engine:
    """The local engine, or one clear line saying there is none."""
    from provisioner import engine

    try:
        return engine.connect(timeout)
    except EngineUnavailable as exc:
        raise ProvisionError(f"provision launch needs a running Docker engine ({exc})") from None


def inspect_image(engine: Engine, ref: str) -> ImageInfo:
    try:
        return engine.image(ref)
    except ImageNotFound:
        raise ProvisionError(f"--image {ref}: not in the local Docker engine (build it with `provision build`,"
                             " or docker pull / docker load it)") from None
    except EngineError as exc:
        raise ProvisionError(f"--image {ref}: the engine did not answer ({short(exc, 200)})") from None


def image_stack(info: ImageInfo) -> tuple[dict | None, str | None]:
    """The image's Stack from its label (None and a note when it has none)."""
    from provisioner.image.labels import label_stack

    return label_stack(info.labels, info.ref)


def plan_for(matrix, opts, info: ImageInfo, mode: str = "auto",
             engine: Engine | None = None) -> tuple[DevicePlan, list[str]]:
    """Plan the launch: engine facts (chips in use, runtimes), the image's stack, the mode."""
    from provisioner.devices import enginefacts
    from provisioner.devices import plan as devices

    notes: list[str] = []
    facts = enginefacts.gather(timeout=FACTS_TIMEOUT_S, engine=engine)
    stack, note = image_stack(info)
    if note:
        notes.append(note)
    runtime_name = next(r["value"] for r in matrix.rows("device_settings") if r["id"] == "runtime_name")
    if mode == "auto":
        # The runtime maps the host's real /dev nodes; another --dev-root asks for those nodes instead.
        if facts.reachable and runtime_name in facts.runtimes and os.path.abspath(opts.dev_root) == "/dev":
            mode = "runtime"
            notes.append(f"--mode auto: the engine has the {runtime_name} runtime")
        else:
            mode = "devices"
    plan = devices.plan(matrix, replace(opts, mode=mode, stack=stack, engine=facts))
    env = {e.name: e.value for e in plan.env}
    if plan.multi.nnodes > 1 and not any(env.get(k) for k in ("HCCL_IF_IP", "HCCL_SOCKET_IFNAME")):
        notes.append("no --hccl-if-ip / --socket-ifname: HCCL takes the first non-docker NIC by name;"
                     " set one on hosts with several NICs")
    return plan, notes


def parse_labels(items: list[str] | tuple[str, ...]) -> dict[str, str]:
    """--label KEY=VALUE (KEY alone: an empty value, as docker does); launch's own keys are reserved."""
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if not key or key.startswith(LABEL):
            raise ProvisionError(f"--label {item!r}: write KEY=VALUE with a key not starting with {LABEL}")
        out[key] = value
    return out


def container_kwargs(job: Job, role: str, command: list[str], env: dict[str, str]) -> dict:
    """docker-py `containers.create` kwargs: the plan's, plus the command, env, volumes and labels.

    The workload's container (a run or a job) takes the name as given: other nodes reach it by that name
    (--master-addr on a Docker network). The short-lived side containers (check, selftest) add their role."""
    name = job.container_name + ("" if role in WORKLOAD_ROLES else f"-{role}")
    kw = runline.docker_kwargs(job.plan, job.image.ref, command, name)
    kw["environment"] = {**kw["environment"], **env}
    taken = {v["bind"]: h for h, v in kw["volumes"].items()}
    for host, inside, mode in job.volumes:
        if inside in taken:
            raise ProvisionError(f"-v {host}:{inside}: {inside} is already mounted from {taken[inside]} by the plan")
        if host in kw["volumes"]:
            raise ProvisionError(f"-v {host}:{inside}: {host} is already mounted (docker-py allows one place per host path)")
        kw["volumes"][host] = {"bind": inside, "mode": mode}
        taken[inside] = host
    kw["labels"] = {**job.labels, LABEL: job.run_id, ROLE_LABEL: role}
    kw["init"] = job.init
    if job.network:
        kw["network_mode"] = job.network
    if job.workdir:
        kw["working_dir"] = job.workdir
    return kw


# -- the whole launch -----------------------------------------------------------------------


def run(job: Job, engine: Engine, out: TextIO | None = sys.stdout, err: TextIO | None = sys.stderr) -> dict:
    """Run the check (if asked) and the job; return the `provision.launch/1` summary document."""
    extra_env, nproc = torchrun.environment(job.plan, job.env, job.image.env)
    start = torchrun.launcher(job.image.labels)
    started = time.monotonic()
    selftest: RunResult | None = None
    check: RunResult | None = None
    main: RunResult | None = None
    with SignalGuard() as guard:
        if job.selftest:
            cmd = torchrun.command(job.plan, torchrun.Target.selftest(job.selftest_args), nproc, start)
            kw = container_kwargs(job, "selftest", cmd, extra_env)
            found_st: dict = {}
            say(err, f"run {job.run_id}: self-test in {kw['name']}: $ {_join(cmd)}")
            selftest = run_container(engine, kw, "selftest", guard, out, err, job.keep, job.stop_timeout,
                                     on_line=lambda line: _document(line, SELFTEST_SCHEMA, found_st))
            selftest.selftest = found_st.get("doc")
        if job.check and (selftest is None or passed(selftest)):
            cmd = torchrun.command(job.plan, torchrun.Target.check(job.check_args), nproc, start)
            kw = container_kwargs(job, "check", cmd, extra_env)
            found: dict = {}
            say(err, f"run {job.run_id}: collective check in {kw['name']}: $ {_join(cmd)}")
            check = run_container(engine, kw, "check", guard, out, err, job.keep, job.stop_timeout,
                                  on_line=lambda line: _document(line, COLLECTIVE_SCHEMA, found))
            check.collective = found.get("doc")
        if job.target is not None and (selftest is None or passed(selftest)) and (
                check is None or passed(check)):
            cmd = torchrun.command(job.plan, job.target, nproc, start)
            kw = container_kwargs(job, "run", cmd, extra_env)
            say(err, f"run {job.run_id}: {job.target.kind} in {kw['name']}: $ {_join(cmd)}")
            main = run_container(engine, kw, "run", guard, out, err, job.keep, job.stop_timeout)
    # Everything launch sets in the container: the plan's variables, then its own and -e.
    env = {**dict(job.plan.runtime_env), **{e.name: e.value for e in job.plan.env if e.value is not None}, **extra_env}
    return summary(job, check, main, nproc, env, time.monotonic() - started, selftest)


def passed(result: RunResult) -> bool:
    """The collective check or self-test exited 0 and its document says ok (every sum right; every check passed
    or does not apply)."""
    doc = result.selftest if result.role == "selftest" else result.collective
    return result.exit_code == 0 and not result.signal and (doc or {}).get("status") == "ok"


def _document(line: str, schema: str, found: dict) -> None:
    _, text = logstream.strip_rank(line)
    if text.startswith('{"schema":"' + schema):
        try:
            found["doc"] = json.loads(text)
        except ValueError:
            pass


def summary(job: Job, check: RunResult | None, main: RunResult | None, nproc: int, env: dict, took: float,
            selftest: RunResult | None = None) -> dict:
    last = main or check or selftest
    assert last is not None
    if last.signal:
        status = "interrupted"
    elif selftest and not passed(selftest):
        status = "selftest-failed"
    elif check and not passed(check):
        status = "check-failed"
    else:
        status = "ok" if last.exit_code == 0 else "failed"
    m = job.plan.multi
    doc = {
        "schema": SCHEMA,
        "status": status,
        "run_id": job.run_id,
        "image": {"ref": job.image.ref, "id": job.image.id, "stack_id": (job.plan.stack or {}).get("id")},
        "card": job.plan.card,
        "devices": list(job.plan.chips),
        "container_ids": list(range(len(job.plan.chips))),
        "mode": job.plan.mode,
        "nproc_per_node": nproc,
        "nnodes": m.nnodes,
        "node_rank": m.node_rank,
        "master_addr": m.master_addr,
        "master_port": m.master_port,
        "command": last.command,
        "container": last.container,
        "kept": last.kept,
        "exit_code": last.exit_code,
        "signal": last.signal,
        "duration_s": round(took, 3),
        "ranks_seen": last.ranks,
        "error": last.error,
        "log_tail": last.tail,
        "check": None,
        "selftest": None,
        "check_only": job.target is None,
        "environment": env,
        "notes": list(job.notes) + list(job.plan.notes),
        "explanation": explanation(next((r for r in (selftest, check, main) if r is not None and failed(r)), None)),
    }
    if selftest:
        doc["selftest"] = {
            "container": selftest.container,
            "command": selftest.command,
            "exit_code": selftest.exit_code,
            "signal": selftest.signal,
            "duration_s": selftest.duration_s,
            "kept": selftest.kept,
            "result": selftest.selftest,
            "error": selftest.error,
        }
    if check:
        doc["check"] = {
            "container": check.container,
            "command": check.command,
            "exit_code": check.exit_code,
            "signal": check.signal,
            "duration_s": check.duration_s,
            "kept": check.kept,
            "result": check.collective,
            "error": check.error,
        }
    return doc


def failed(result: RunResult) -> bool:
    """The container exited non-zero by itself (not stopped by a signal)."""
    return not result.signal and result.exit_code not in (0, None)


def explanation(result: RunResult | None) -> dict | None:
    """Why a failed container failed (`provision.explain/1` over its last lines; provisioner.explain is imported
    here only, on failure, so a launch that works never loads it)."""
    if result is None or not result.log:
        return None
    from provisioner.explain import explain_lines

    return explain_lines(result.log, f"{result.role} output ({result.container})")


def explanation_lines(doc: dict) -> list[str]:
    """The explanation's closing lines for a person (none when the run did not fail or it found nothing)."""
    found = doc.get("explanation")
    if not found or found["status"] == "clean":
        return []
    from provisioner.explain import analyze

    return ["explain: " + line for line in analyze.render(found, events=6)]


def exit_code(doc: dict) -> int:
    """The container's exit code (torchrun's), 128 + signal number when interrupted, 1 for a check that
    exited 0 without a good result."""
    code = doc["exit_code"]
    if code is None or (code == 0 and doc["status"] not in ("ok",)):
        return 1
    return int(code)


def describe(doc: dict) -> list[str]:
    """The closing lines for a person (stderr)."""
    lines = []
    st = doc.get("selftest")
    if st:
        res = st["result"]
        if res and res.get("status") == "ok":
            ran = sum(c["status"] == "ok" for c in res["checks"])
            lines.append(f"self-test ok: {ran} checks passed on {res['world_size']} worker(s), "
                         f"{len(res['checks']) - ran} not applicable")
        elif not st["signal"]:
            failed = [c["id"] for c in (res or {}).get("checks", []) if c["status"] == "fail"]
            why = f"failed checks: {', '.join(failed)}" if failed else (st["error"] or "no result printed")
            skipped = "; the run was not started" if doc["container"] == st["container"] and not doc["check_only"] else ""
            lines.append(f"self-test FAILED (exit {st['exit_code']}): {why}{skipped}")
    chk = doc["check"]
    if chk:
        res = chk["result"]
        if res and res.get("status") == "ok":
            lines.append(f"check ok: all_reduce across {res['world_size']} ranks ({res['backend']} on {res['device']}),"
                         f" peak bus bandwidth {res['busbw_peak_gbps']:.3f} GB/s")
        elif not chk["signal"]:
            why = "wrong sums" if res else (chk["error"] or "no result printed")
            skipped = "; the run was not started" if not doc["check_only"] and doc["container"] == chk["container"] else ""
            lines.append(f"check FAILED (exit {chk['exit_code']}): {why}{skipped}")
    where = doc["container"] + (" kept" if doc["kept"] else " removed")
    took = f"{doc['duration_s']:.1f} s"
    if doc["status"] == "interrupted":
        lines.append(f"interrupted by {doc['signal']} after {took}: container {where}; exit {doc['exit_code']}")
    elif doc["exit_code"] == 0:
        lines.append(f"run {doc['run_id']} finished: exit 0 in {took} (container {where})")
    else:
        err = f"; {doc['error']}" if doc["error"] else ""
        lines.append(f"run {doc['run_id']} failed: exit {doc['exit_code']} after {took}{err} (container {where})")
    return lines + explanation_lines(doc)


# -- helpers --------------------------------------------------------------------------------


def _join(argv: list[str]) -> str:
    import shlex

    return shlex.join(argv)
