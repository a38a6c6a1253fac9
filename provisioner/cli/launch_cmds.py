"""`provision launch`: start the container for the chips in --devices and run torchrun inside (the work is in
launching.py, which the fast path calls without click)."""

from __future__ import annotations

import click

from provisioner.cli.common import click_options, json_option
from provisioner.cli.device_cmds import host_options, launch_options
from provisioner.cli.launching import JOB_SCHEMA, LAUNCH_SCHEMA, report, start  # noqa: F401 (re-exported)
from provisioner.cli.options import LAUNCH


def register(group: click.Group) -> None:
    group.add_command(launch_cmd)


def _launch_own_options(f):
    return click_options(LAUNCH, f)


@click.command("launch")
@host_options()
@launch_options()
@_launch_own_options
@json_option
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def launch_cmd(**kw):
    """Run torchrun in a container with exactly the chips in --devices, stream its logs, return its exit code.

    \b
    Put ARGS after `--`. Without a target option they go to the bundled trainer:
      provision launch ... -- --config /data/train.yaml lr=1e-4
      (torchrun --nproc-per-node <chips> ... -m provisioner.train --config ... lr=1e-4)
    --module M / --script PATH: torchrun starts that instead, with ARGS.
    --exec: ARGS are the whole command, without torchrun (-- python my.py).

    --job FILE runs a framework job instead (MindSpeed-LLM SFT, MindSpeed-RL GRPO
    on Ray, MindSpore Transformers SFT): every step in one container, steps whose
    outputs exist are skipped, training resumes from its checkpoints (docs/jobs.md).

    One worker per selected chip; HCCL time-outs and the rendezvous variables
    come from the device plan. Output lines carry the worker's rank
    ([rank3]:). Ctrl-C or SIGTERM stops and removes the container (exit 130 /
    143). --json prints a provision.launch/1 summary at the end (logs then go
    to stderr).
    """
    from provisioner.cli.launching import main

    return main(**kw)
