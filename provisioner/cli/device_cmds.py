"""`provision run-cmd`, `provision cdi`, `provision k8s` and `provision ranktable`.

All four read the host (files under --root, device nodes under --dev-root) into
one DevicePlan and render it. None of them needs a running Docker engine:
run-cmd asks one, briefly, which chips running containers already hold, and
notes in its output when none answers.
"""

from __future__ import annotations

import click

from provisioner.cli.common import click_options, emit_json, json_option, matrix_option, refuse
from provisioner.cli.options import (  # noqa: F401 (multi_node, plan_options: re-exported)
    DEVICE_HOST,
    DEVICES,
    LAUNCH_NET,
    NODE_RANK,
    multi_node,
    plan_options,
)

RUN_SCHEMA = "provision.run-cmd/1"
CDI_SCHEMA = "provision.cdi/1"
K8S_SCHEMA = "provision.k8s/1"
RANKTABLE_SCHEMA = "provision.ranktable/1"
ENGINE_TIMEOUT_S = 3.0


def register(group: click.Group) -> None:
    for cmd in (run_cmd, cdi_cmd, k8s_cmd, ranktable_cmd):
        group.add_command(cmd)


def host_options(devices_default: str | None = None):
    return lambda f: _host_options(f, devices_default)


def launch_options(node_rank: bool = True):
    return lambda f: _launch_options(f, node_rank)


def _host_options(f, devices_default: str | None = None):
    devices = DEVICES
    if devices_default is not None:
        # No default=None with required: click 8.3+ takes an explicit None default as satisfying `required`.
        devices = DEVICES.but(required=False, default=devices_default,
                              help=f"{DEVICES.help} [default: {devices_default}]")
    f = click_options([devices if o is DEVICES else o for o in DEVICE_HOST], f)
    return matrix_option(f)


def _launch_options(f, node_rank: bool = True):
    return click_options([o for o in LAUNCH_NET if node_rank or o is not NODE_RANK], f)


def _write(path: str, text: str) -> None:
    """Write via a temporary file and rename, so a failure leaves nothing half-written."""
    import os
    import tempfile

    from provisioner.errors import ProvisionError

    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=".provision-", dir=folder)
    except OSError as exc:
        raise ProvisionError(f"--output {path}: cannot write in {folder} ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except OSError as exc:
        os.unlink(tmp)
        raise ProvisionError(f"--output {path}: {exc.strerror}") from None


def _load_stack(path: str) -> dict:
    from provisioner import validate
    from provisioner.errors import ProvisionError
    from provisioner.hostfile import read_bytes

    doc = validate.json_doc(read_bytes(path, f"--stack {path}"), f"--stack {path}")
    if isinstance(doc, dict) and isinstance(doc.get("stack"), dict):
        doc = doc["stack"]  # `provision resolve --json` output
    if not isinstance(doc, dict) or "cann" not in doc:
        raise ProvisionError(f"--stack {path}: not a provision stack (expected `provision resolve --json` output or the image label)")
    return validate.stack_doc(doc, f"--stack {path}")


def _label_stack(facts, image: str) -> tuple[dict | None, str | None]:
    from provisioner.image.labels import label_stack

    if facts is None or not facts.reachable:
        return None, None
    if facts.image_labels is None:
        return None, facts.image_note or None
    return label_stack(facts.image_labels, image)


@click.command("run-cmd")
@host_options()
@launch_options()
@click.option("--mode", type=click.Choice(["auto", "devices", "runtime"]), default="auto", show_default=True,
              help="devices: --device flags; runtime: --runtime ascend -e ASCEND_VISIBLE_DEVICES; auto: runtime if the engine has it.")
@click.option("--user", help="Run as this user inside (default: the image's).")
@click.option("--name", help="Container name.")
@click.option("--rank-table", "rank_table", type=click.Path(), help="hccl.json to mount and point RANK_TABLE_FILE at.")
@click.option("--stack", "stack_file", type=click.Path(), help="The image's stack JSON (offline alternative to its label).")
@click.option("--no-engine", "no_engine", is_flag=True, help="Do not ask the Docker engine (no in-use check, no label, auto = devices).")
@json_option
@click.argument("image")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def run_cmd(overlays, as_json, image, command, mode, user, name, rank_table, stack_file, no_engine, **kw):
    """Print a ready `docker run` for the chips in --devices, with exactly the nodes and mounts they need.

    Give the container command after `--`. Nothing is started; no engine is
    required. Chips already mapped into a running container, unknown ids, cards
    that cannot train and images whose CANN needs a newer driver are refused.
    """
    from provisioner.devices import enginefacts, runline
    from provisioner.devices import plan as devices
    from provisioner.matrix import loader

    m = loader.load(list(overlays or ()))
    multi_node(kw).require_master()
    stack = _load_stack(stack_file) if stack_file else None
    facts, skipped, notes = None, None, []
    if no_engine:
        skipped = "--no-engine"
    else:
        facts = enginefacts.gather(image=None if stack else image, timeout=ENGINE_TIMEOUT_S)
    if stack is None:
        stack, note = _label_stack(facts, image)
        if note:
            notes.append(note)
    runtime_name = next(r["value"] for r in m.rows("device_settings") if r["id"] == "runtime_name")
    if mode == "auto":
        if facts is not None and facts.reachable and runtime_name in facts.runtimes:
            mode = "runtime"
            notes.append(f"--mode auto: the engine has the {runtime_name} runtime")
        else:
            mode = "devices"
            notes.append("--mode auto: " + ("no Docker engine asked" if facts is None else
                         "no Docker engine reachable" if not facts.reachable else f"no {runtime_name} runtime registered")
                         + "; --device mode")
    opts = plan_options(m, kw, mode=mode, user=user, rank_table=rank_table, stack=stack, engine=facts, engine_skipped=skipped)
    try:
        plan = devices.plan(m, opts)
    except devices.PlanRefused as exc:
        return refuse(RUN_SCHEMA, exc, as_json)
    if notes:
        from dataclasses import replace

        plan = replace(plan, notes=tuple(notes) + plan.notes)
    cmd = list(command)
    if as_json:
        emit_json({
            "schema": RUN_SCHEMA,
            "status": "ok",
            "plan": plan.to_dict(),
            "argv": runline.argv(plan, image, cmd, name),
            "shell": runline.shell(plan, image, cmd, name),
            "docker_kwargs": runline.docker_kwargs(plan, image, cmd, name),
        })
    else:
        click.echo(runline.shell(plan, image, cmd, name), nl=False)
    return 0


@click.command("cdi")
@host_options("all")
@click.option("--output", "-o", help="Write the spec here (e.g. /etc/cdi/ascend.yaml) instead of stdout.")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), help="Spec format (default: from --output's suffix, else yaml).")
@json_option
def cdi_cmd(overlays, as_json, output, fmt, **kw):
    """Write a CDI spec (kind ascend.com/npu) so `--device ascend.com/npu=0` works in Docker >= 25 and Podman."""
    from provisioner.devices import cdi
    from provisioner.devices import plan as devices
    from provisioner.matrix import loader

    m = loader.load(list(overlays or ()))
    opts = plan_options(m, kw, check_in_use=False)
    opts.task = None
    try:
        plan = devices.plan(m, opts)
    except devices.PlanRefused as exc:
        return refuse(CDI_SCHEMA, exc, as_json)
    fmt = fmt or ("json" if output and output.endswith(".json") else "yaml")
    text = cdi.render(plan, fmt)
    if output:
        _write(output, text)
    if as_json:
        emit_json({"schema": CDI_SCHEMA, "status": "ok", "output": output, "spec": cdi.spec(plan), "notes": list(plan.notes)})
    elif not output:
        click.echo(text, nl=False)
    else:
        click.echo(f"wrote {output} ({len(plan.chips)} chips + all)")
    return 0


@click.command("k8s")
@host_options()
@launch_options(node_rank=False)
@click.option("--volcano", is_flag=True, help="A Volcano Job (batch.volcano.sh/v1alpha1) instead of a batch/v1 Job (not with --job).")
@click.option("--name", default="provision-train", show_default=True, help="Job name (also the Service / subdomain); --job takes the job file's name.")
@click.option("--namespace", help="metadata.namespace of every manifest.")
@click.option("--config", "config_file", type=click.Path(), metavar="FILE",
              help="Trainer config on this machine: checked against the trainer's schema, shipped in a ConfigMap and"
                   " mounted read-only where the pods' trainer reads it (without it: /workspace/train.yaml in the image).")
@click.option("--output", "-o", help="Write the manifests here instead of stdout.")
@click.option("--job", "job_file", type=click.Path(), metavar="FILE",
              help="A framework job file: a Volcano Job (torchrun / msrun kinds) or a KubeRay RayJob (GRPO) running its steps.")
@click.option("--stack", "stack_file", type=click.Path(), help="With --job: the image's stack JSON (default: its label, if the local engine has the image).")
@click.option("--pvc", "pvcs", multiple=True, metavar="CLAIM:PATH",
              help="With --job: mount this PersistentVolumeClaim at PATH; job paths under it use it instead of a hostPath.")
@json_option
@click.argument("image")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
def k8s_cmd(overlays, as_json, image, command, volcano, name, namespace, config_file, output, job_file, stack_file, pvcs,
            **kw):
    """Render a Kubernetes Job (or Volcano Job) requesting the chips, with read-only driver mounts and /dev/shm.

    --devices gives the chip count per pod (and the host the mounts are read
    from); the device plugin chooses the chips. Each pod runs torchrun with one
    worker per chip around the bundled trainer (as provision launch does);
    across --nnodes pods it meets at the first pod. A COMMAND after `--` runs
    instead. --config FILE ships the trainer config. --job FILE renders a framework
    job instead: its scripts in a ConfigMap and a Volcano Job or KubeRay RayJob
    (--nnodes pods) that runs them, resumable after a restart.
    """
    from click.core import ParameterSource

    from provisioner import validate
    from provisioner.devices import k8s
    from provisioner.devices import plan as devices
    from provisioner.errors import ProvisionError
    from provisioner.matrix import loader

    # Both paths, before the engine is asked about the image.
    if namespace is not None:
        validate.dns_label(namespace, "--namespace")
    validate.image_ref(image, "image")
    if not job_file and (stack_file or pvcs):
        raise ProvisionError("--stack and --pvc go with --job")
    name_given = click.get_current_context().get_parameter_source("name") != ParameterSource.DEFAULT
    if job_file and (command or config_file or name_given or volcano):
        raise ProvisionError("--job runs the job's own steps: give no COMMAND, --config, --name or --volcano"
                             " (the job file's name: and kind decide the names and the manifest kind)")
    spec = None
    if job_file:
        from provisioner.jobs import k8s as jobk8s
        from provisioner.jobs import spec as jobspec

        spec = jobspec.load(job_file)
        claims = jobk8s.parse_pvc(pvcs)
    config_text = k8s.trainer_config(config_file) if config_file else None
    m = loader.load(list(overlays or ()))
    opts = plan_options(m, kw, check_in_use=False)
    try:
        plan = devices.plan(m, opts)
    except devices.PlanRefused as exc:
        return refuse(K8S_SCHEMA, exc, as_json)
    if spec is not None:
        return _k8s_job(m, spec, plan, image, stack_file, claims, namespace, output, kw, as_json)
    docs = k8s.manifests(plan, image, list(command), name=name, volcano=volcano, config_text=config_text,
                         namespace=namespace)
    text = k8s.render(docs, plan, volcano, config_file, custom=bool(command))
    if output:
        _write(output, text)
    if as_json:
        emit_json({"schema": K8S_SCHEMA, "status": "ok", "output": output, "manifests": docs, "notes": list(plan.notes)})
    elif not output:
        click.echo(text, nl=False)
    else:
        click.echo(f"wrote {output} ({len(docs)} manifest(s))")
    return 0


def _k8s_job(m, spec, plan, image, stack_file, claims, namespace, output, kw, as_json) -> int:
    from provisioner.image.labels import framework_from_labels
    from provisioner.jobs import k8s as jobk8s
    from provisioner.jobs import plan as jobplan

    stack: dict | None
    framework = None
    if stack_file:
        stack, note = _load_stack(stack_file), None
    else:
        from provisioner.devices import enginefacts

        facts = enginefacts.gather(image=image, timeout=ENGINE_TIMEOUT_S)
        stack, note = _label_stack(facts, image)
        framework = framework_from_labels(facts.image_labels) if facts.reachable else None
        if stack is None:
            note = (note or f"image {image} is not in the local Docker engine") + "; give its stack with --stack FILE"
    try:
        jplan = jobplan.build(m, spec, card=kw["card"], chips_per_node=len(plan.chips), nnodes=kw["nnodes"] or 1,
                              stack=stack, image=f"image {image}", framework=framework)
    except jobplan.JobRefused as exc:
        if note:
            exc.reasons.append(note)
            exc.args = ("; ".join(exc.reasons),)
        return refuse(K8S_SCHEMA, exc, as_json)
    docs = jobk8s.manifests(jplan, plan, image, namespace=namespace, pvcs=claims)
    text = jobk8s.render(docs, jplan, plan)
    if output:
        _write(output, text)
    if as_json:
        emit_json({"schema": K8S_SCHEMA, "status": "ok", "output": output, "job": jplan.to_dict(), "manifests": docs,
                   "notes": list(jplan.notes) + list(plan.notes)})
    elif not output:
        click.echo(text, nl=False)
    else:
        click.echo(f"wrote {output} ({len(docs)} manifests: {', '.join(d['kind'] for d in docs)})")
    return 0


@click.command("ranktable")
@click.option("--host-root", "host_roots", multiple=True, required=True, help="A host's root (repeat per node, in rank order).")
@click.option("--host-ip", "host_ips", multiple=True, help="Each host's IP (repeat in the same order); also its server_id.")
@click.option("--container-ip", "container_ips", multiple=True, help="Each host's container/pod IP (repeat in order).")
@click.option("--devices", required=True, help="Physical chip ids used on every host: 0-7, 0-3, ...")
@click.option("--card", help="Card, to refuse chips whose rank-table format differs (A3: 1.2, 950: 2.0).")
@click.option("--output", "-o", help="Write hccl.json here instead of stdout.")
@matrix_option
@json_option
def ranktable_cmd(overlays, as_json, host_roots, host_ips, container_ips, devices, card, output):
    """Write an HCCL rank table (hccl.json, version 1.0) from each host's /etc/hccn.conf."""
    import json

    from provisioner import chipids
    from provisioner.devices import ranktable
    from provisioner.errors import ProvisionError
    from provisioner.matrix import loader

    m = loader.load(list(overlays or ()))
    for flag, values in (("--host-ip", host_ips), ("--container-ip", container_ips)):
        if values and len(values) != len(host_roots):
            raise ProvisionError(f"{flag} given {len(values)} times for {len(host_roots)} --host-root; give one per host")
    version = ranktable.check_family(m, card)
    hosts = [
        ranktable.Host(root, host_ips[n] if host_ips else None, container_ips[n] if container_ips else None)
        for n, root in enumerate(host_roots)
    ]
    table = ranktable.build(hosts, chipids.parse(devices), version, ranktable.hccn_conf_path(m))
    text = json.dumps(table, indent=4) + "\n"
    if output:
        _write(output, text)
    if as_json:
        emit_json({"schema": RANKTABLE_SCHEMA, "status": "ok", "output": output, "rank_table": table})
    elif not output:
        click.echo(text, nl=False)
    else:
        click.echo(f"wrote {output} ({table['server_count']} server(s), {sum(len(s['device']) for s in table['server_list'])} ranks)")
    return 0
