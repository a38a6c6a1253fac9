"""`provision selftest`: the one-minute self-test of an image on this host's chips (library: launch/run.py,
torch side: provisioner/train/selftest.py)."""

from __future__ import annotations

import click

from provisioner.cli.common import json_option, refuse
from provisioner.cli.device_cmds import host_options, launch_options
from provisioner.cli.launching import preflight_gate, report, start

CONFIG_IN_CONTAINER = "/etc/provision/selftest/train.yaml"


def register(group: click.Group) -> None:
    group.add_command(selftest_cmd)


@click.command("selftest")
@host_options()
@launch_options()
@click.option("--image", required=True, help="Image to test (local to the engine; e.g. one `provision build` made).")
@click.option("--config", "config", type=click.Path(exists=True, dir_okay=False),
              help="Your trainer config (host file, mounted read-only): its method, precision, strategy, optimizer and"
                   " attention are what the training steps use. Model, data and output_dir are not needed.")
@click.option("-e", "--env", "env", multiple=True, help="KEY=VALUE set in the container (repeatable).")
@click.option("--mode", type=click.Choice(["auto", "devices", "runtime"]), default="auto", show_default=True,
              help="devices: --device nodes; runtime: the Ascend runtime; auto: runtime if registered and --dev-root is /dev.")
@click.option("--user", help="Run as this user inside (default: the image's).")
@click.option("--keep", is_flag=True, help="Keep the container after it exits, for docker logs / inspect.")
@click.option("--preflight", is_flag=True, help="Run `provision preflight` on this host first (chips, NPU network,"
              " clock); stop if a check fails.")
@click.option("--label", "labels", multiple=True, help="KEY=VALUE label on the container (repeatable).")
@json_option
@click.argument("overrides", nargs=-1, type=click.UNPROCESSED)
def selftest_cmd(overlays, as_json, image, config, env, mode, user, keep, preflight, labels, overrides, **kw):
    """Check in about a minute that training works in IMAGE on the chips in --devices.

    \b
    One worker per chip runs, and the first prints one line per check:
      npu, matmul (fp16/bf16), hbm (a pattern over 85% of each chip's free HBM,
      read back and compared), attention (the config's, on a packed batch),
      fused-optimizer (torch_npu NpuFusedAdamW step + zero_grad), all-reduce (HCCL
      across the chips) and train-steps (three steps of a tiny Qwen2 with your
      config). A failing check prints the fix. Without an NPU the NPU checks say
      n/a. OVERRIDES are trainer key=value settings (e.g. precision=fp16).
    Exit code 0 when every check passed or does not apply, 1 when one failed.
    """
    import os

    from provisioner.cli.options import multi_node, plan_options
    from provisioner.devices import plan as devices
    from provisioner.devices import torchrun
    from provisioner.errors import ProvisionError
    from provisioner.launch import run as launch
    from provisioner.matrix import loader as matrix

    bad = [o for o in overrides if "=" not in o or o.startswith("-")]
    if bad:
        raise ProvisionError(f"{bad[0]!r}: give trainer settings as key=value (e.g. precision=fp16)")
    multi_node(kw).require_master()
    user_env = torchrun.parse_env(env, dict(os.environ))
    extra_labels = launch.parse_labels(labels)
    mounts, args = [], list(overrides)
    if config:
        mounts.append((os.path.abspath(config), CONFIG_IN_CONTAINER, "ro"))
        args = ["--config", CONFIG_IN_CONTAINER, *args]
    m = matrix.load(list(overlays or ()))
    if preflight and (code := preflight_gate(m, kw, user_env, as_json)) is not None:
        return code
    engine = launch.connect()
    try:
        info = launch.inspect_image(engine, image)
        opts = plan_options(m, kw, user=user)
        try:
            plan, notes = launch.plan_for(m, opts, info, mode, engine=engine)
        except devices.PlanRefused as exc:
            return refuse(launch.SCHEMA, exc, as_json)
        job = launch.Job(plan=plan, image=info, target=None, selftest=True, selftest_args=tuple(args), env=user_env,
                         volumes=mounts, keep=keep, notes=tuple(notes), labels=extra_labels)
        out, err = start(job.notes + plan.notes, as_json)
        doc = launch.run(job, engine, out=out, err=err)
    finally:
        engine.close()
    return report(doc, as_json, "provision selftest", launch.describe, launch.exit_code)
