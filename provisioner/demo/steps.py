"""Demo steps: run a CLI command as the user would type it; the resolve part."""

from __future__ import annotations

import contextlib
import io
import shlex
import sys

from provisioner.cli import main as cli

# The users' three field reports (profiles in matrices/profiles.yaml).
SEEDS = ["seed-310-grpo", "seed-800ta2-mindspore-sft", "seed-300ta2-kylin-lora"]

def step(title: str, args: list[str], expect: tuple[int, ...] = (0,)) -> int:
    print(f"\n=== {title}\n$ provision {shlex.join(args)}", flush=True)
    code = cli(args)
    sys.stdout.flush()
    sys.stderr.flush()
    if code not in expect:
        raise SystemExit(f"demo: unexpected exit code {code} from: provision {shlex.join(args)}")
    return code


def resolve_steps() -> None:
    step("The newest consistent stack for an Atlas 300T A2", ["resolve", "--card", "300T-A2"])
    from provisioner.matrix import loader as matrix

    m = matrix.load()
    for n, name in enumerate(SEEDS):
        seed = m.profile(name)
        label = f"Seed {chr(ord('A') + n)}"
        step(f"{label}: {seed['description']}", ["resolve", "--profile", name], expect=(2,))
        fixed = m.profile(seed["fixed_by"])
        step(f"{label}, corrected: {fixed['description']}", ["resolve", "--profile", fixed["name"]])



def captured(args: list[str], expect: tuple[int, ...]) -> tuple[int, str]:
    """step(), keeping stdout (the printed tag) while it is shown."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = step_quiet(args, expect)
    sys.stdout.write(buf.getvalue())
    return code, buf.getvalue().strip()


def step_quiet(args: list[str], expect: tuple[int, ...]) -> int:
    code = cli(args)
    sys.stderr.flush()
    if code not in expect:
        raise SystemExit(f"demo: unexpected exit code {code} from: provision {shlex.join(args)}")
    return code


