"""The work of `provision launch`, without click: what the click command (launch_cmds.py) and the fast path
(fast.py) both call once they have the option values, and the start/report helpers `provision selftest` shares.
"""

from __future__ import annotations

import os
import sys

from provisioner.cli.text import emit_json, refuse

LAUNCH_SCHEMA = "provision.launch/1"
JOB_SCHEMA = "provision.launch-job/1"


def main(overlays, as_json, image, check, check_only, selftest, module, script, exec_, env, volumes, workdir, network,
           mode, user, name, rank_table, labels, keep, stop_timeout, no_init, job_file, dry_run, args, stack_file=None,
           **kw) -> int:
    """Validate the values, plan the chips, run the job (or the framework job file); the exit code."""
    from provisioner import validate
    from provisioner.cli.options import multi_node, plan_options
    from provisioner.devices import plan as devices
    from provisioner.devices import torchrun
    from provisioner.errors import ProvisionError
    from provisioner.launch import run as launch
    from provisioner.matrix import loader

    validate.image_ref(image, "--image")
    if name is not None:
        validate.name(name, "--name")
    if network is not None:
        validate.name(network, "--network")
    if workdir is not None:
        validate.single_line(workdir, "--workdir")
    for item in (*volumes, *labels):
        validate.single_line(item, "-v/--label")
    if job_file:
        if module or script or exec_ or check_only or selftest or args or workdir:
            raise ProvisionError("--job runs the job's own steps: give no ARGS, --module, --script, --exec,"
                                 " --check-only, --selftest or --workdir")
    elif dry_run:
        raise ProvisionError("--dry-run goes with --job")
    if stack_file and not (job_file and dry_run):
        raise ProvisionError("--stack goes with --job --dry-run (to check a job before its image exists; a launch"
                             " reads the stack from the image's label)")
    target = None if job_file else _target(module, script, exec_, check_only, args)
    multi_node(kw).require_master()
    user_env = torchrun.parse_env(env, dict(os.environ))
    mounts = [torchrun.parse_volume(v) for v in volumes]
    extra_labels = launch.parse_labels(labels)
    spec = None
    if job_file:
        from provisioner.jobs import spec as jobspec

        spec = jobspec.load(job_file)  # a bad job file fails before any engine is asked
    m = loader.load(list(overlays or ()))
    if kw.pop("preflight", False) and (code := preflight_gate(m, kw, user_env, as_json)) is not None:
        return code
    if spec is not None and stack_file:
        return _job_from_stack(m, spec, stack_file, image, mode, kw, as_json, user=user, rank_table=rank_table)
    engine = launch.connect()
    try:
        info = launch.inspect_image(engine, image)
        opts = plan_options(m, kw, user=user, rank_table=rank_table)
        try:
            plan, notes = launch.plan_for(m, opts, info, mode, engine=engine)
        except devices.PlanRefused as exc:
            return refuse(JOB_SCHEMA if spec else LAUNCH_SCHEMA, exc, as_json)
        if spec is not None:
            return _launch_job(m, spec, engine, info, plan, notes, kw, as_json, dry_run, check, user_env, mounts,
                               network, keep, name, stop_timeout, extra_labels, not no_init)
        job = launch.Job(plan=plan, image=info, target=target, check=check or check_only, selftest=selftest,
                         selftest_args=target.trainer_config_args() if target else (), env=user_env,
                         volumes=mounts, workdir=workdir, network=network, init=not no_init, keep=keep, name=name,
                         stop_timeout=stop_timeout, notes=tuple(notes), labels=extra_labels)
        out, err = start(job.notes + plan.notes, as_json)
        doc = launch.run(job, engine, out=out, err=err)
    finally:
        engine.close()
    return report(doc, as_json, "provision launch", launch.describe, launch.exit_code)


def _job_from_stack(m, spec, stack_file: str, image: str, mode: str, kw, as_json: bool, **extra) -> int:
    """`launch --job --dry-run --stack FILE`: the job checked against a stack file (`provision resolve --json`
    output, or an image's label) before its image exists, as `k8s --job --stack` does. No engine is asked: the
    chips' in-use check is left out, and --mode auto plans --device nodes."""
    from dataclasses import replace

    from provisioner.cli.options import plan_options
    from provisioner.devices import plan as devices
    from provisioner.upgrade import stacks

    stack = stacks.load_file(stack_file, "--stack")
    opts = plan_options(m, kw, check_in_use=False, **extra)
    try:
        devplan = devices.plan(m, replace(opts, mode="devices" if mode == "auto" else mode, stack=stack))
    except devices.PlanRefused as exc:
        return refuse(JOB_SCHEMA, exc, as_json)
    return _launch_job(m, spec, None, None, devplan, [], kw, as_json, True, False, {}, [], None, False, None, 20, {},
                       True, given=(stack, image))


def _launch_job(m, spec, engine, info, devplan, notes, kw, as_json, dry_run, check, user_env, mounts, network, keep,
                name, stop_timeout, labels, init, given: tuple[dict, str] | None = None):
    """`launch --job`: validate the job against this launch, write its directory, run it (after --check).
    `given`: (stack, image reference) of a dry run checked against a stack file (no `info`, no engine)."""

    from provisioner.jobs import disk as jobdisk
    from provisioner.jobs import plan as jobplan
    from provisioner.launch import jobrun
    from provisioner.launch import run as launch

    stack, ref = given if given is not None else (launch.image_stack(info)[0], info.ref)
    try:
        jplan = jobplan.build(m, spec, card=kw["card"], chips_per_node=len(devplan.chips), nnodes=kw["nnodes"],
                              stack=stack, image=f"image {ref}",
                              framework=jobrun.image_framework(info) if info is not None else None)
        reasons = jobrun.check_host(jplan)
        if not spec.resume and (found := jobplan.previous_run(jplan)):
            reasons.append(f"{spec.at('resume')}: resume: false, but {spec.output} holds an earlier run ({found[0]});"
                           " choose another output or set resume: true")
        if reasons:
            raise jobplan.JobRefused(reasons)
    except jobplan.JobRefused as exc:
        return refuse(JOB_SCHEMA, exc, as_json)
    if dry_run:
        doc = jobrun.dry_run(jplan, devplan, ref)
        if as_json:
            emit_json(doc)
        else:
            for s in doc["steps"]:
                print(f"{s['would']:4}  {s['id']:<10} {s['title']}  [{s['run']}]")
            est = jplan.memory
            print(f"memory: {est['total_mb'] / 1024:.1f} GB of {((est['hbm_mb'] or 0) / 1024):.0f} GB per chip"
                  f" ({jplan.spec.parallel.label()})")
            print(f"disk: {jobdisk.describe(jplan.disk)} under {jplan.spec.output}")
        return 0
    if check:
        probe = launch.Job(plan=devplan, image=info, target=None, check=True, env=user_env, volumes=[],
                           network=network, init=init, keep=keep, name=name, stop_timeout=stop_timeout, labels=labels)
        doc = launch.run(probe, engine, *start((), as_json))
        if doc["status"] != "ok":
            return report(doc, as_json, "provision launch", launch.describe, launch.exit_code)
    written = jobrun.write_files(jplan)
    job = jobrun.JobRun(plan=jplan, devices=devplan, image=info, env=user_env, volumes=mounts, network=network,
                        keep=keep, name=name, stop_timeout=stop_timeout, labels=labels, notes=tuple(notes + written),
                        init=init)
    doc = jobrun.run(job, engine, *start(list(job.notes) + jplan.notes + list(devplan.notes), as_json))
    return report(doc, as_json, "provision launch", jobrun.describe, jobrun.exit_code)


def preflight_gate(m, kw, env: dict, as_json: bool) -> int | None:
    """`launch --preflight`: the host's preflight report on stderr; exit code 2 (and, with --json, the
    provision.preflight/1 document) when a check failed, else None and the launch goes on."""
    from provisioner.preflight import report as preflight

    env = dict(env)
    if kw.get("hccl_connect_timeout"):
        env["HCCL_CONNECT_TIMEOUT"] = str(kw["hccl_connect_timeout"])
    return preflight_verdict(preflight.run(m, kw.get("root") or "/", env=env, nodes=kw.get("nnodes") or 1), as_json)


def preflight_verdict(doc: dict, as_json: bool) -> int | None:
    """Print a preflight report on stderr; 2 (or one error) when a check failed, else None."""
    from provisioner.preflight import report as preflight

    sys.stderr.write(preflight.render(doc) + "\n")
    sys.stderr.flush()
    if doc["exit_code"] != 2:
        return None
    if as_json:
        emit_json(doc)
        return 2
    from provisioner.errors import ProvisionError

    raise ProvisionError("preflight failed: fix the FAIL lines above (or launch without --preflight)")


def start(notes, as_json: bool):
    """Print the plan's notes (text mode) and pick the streams a run writes to: with --json the container's
    output goes to stderr, so stdout carries the document alone."""
    if not as_json:
        for note in notes:
            sys.stderr.write(f"# note: {note}\n")
        sys.stderr.flush()
    return (sys.stderr, sys.stderr) if as_json else (sys.stdout, sys.stderr)


def report(doc: dict, as_json: bool, prog: str, describe, exit_code) -> int:
    """The run's document on stdout (--json) or its closing lines on stderr; the command's exit code."""
    if as_json:
        emit_json(doc)
    else:
        for line in describe(doc):
            sys.stderr.write(f"{prog}: {line}\n")
        sys.stderr.flush()
    return exit_code(doc)


def _target(module, script, exec_, check_only, args):
    from provisioner.devices import torchrun
    from provisioner.errors import ProvisionError

    chosen = [flag for flag, on in (("--module", module), ("--script", script), ("--exec", exec_)) if on]
    if len(chosen) > 1:
        raise ProvisionError(f"{' and '.join(chosen)}: choose one of --module, --script, --exec")
    if check_only:
        if chosen or args:
            raise ProvisionError("--check-only runs only the collective check: give no ARGS, --module, --script or --exec")
        return None
    if exec_:
        return torchrun.Target("exec", None, tuple(args))
    if script:
        return torchrun.Target("script", script, tuple(args))
    if module:
        return torchrun.Target("module", module, tuple(args))
    return torchrun.Target.train(args)
