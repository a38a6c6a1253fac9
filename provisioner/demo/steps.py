"""Demo steps: run a CLI command as the user would type it (a `provision` process); the resolve part."""

from __future__ import annotations

import shlex
import subprocess
import sys

# The users' three field reports (profiles in matrices/profiles.yaml).
SEEDS = ["seed-310-grpo", "seed-800ta2-mindspore-sft", "seed-300ta2-kylin-lora"]


def provision(args: list[str], capture: bool = False) -> subprocess.CompletedProcess:
    """`provision ARGS` in its own process, with this interpreter; its stderr (and stdout unless captured) shown."""
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.run([sys.executable, "-m", "provisioner.cli", *args], text=True,
                          stdout=subprocess.PIPE if capture else None)


def _expect(code: int, args: list[str], expect: tuple[int, ...]) -> int:
    if code not in expect:
        raise SystemExit(f"demo: unexpected exit code {code} from: provision {shlex.join(args)}")
    return code


def step(title: str, args: list[str], expect: tuple[int, ...] = (0,)) -> int:
    print(f"\n=== {title}\n$ provision {shlex.join(args)}", flush=True)
    return _expect(provision(args).returncode, args, expect)


def resolve_steps() -> None:
    step("The newest consistent stack for an Atlas 300T A2", ["resolve", "--card", "300T-A2"])
    from provisioner.matrix import loader

    m = loader.load()
    for n, name in enumerate(SEEDS):
        seed = m.profile(name)
        label = f"Seed {chr(ord('A') + n)}"
        step(f"{label}: {seed['description']}", ["resolve", "--profile", name], expect=(2,))
        fixed = m.profile(seed["fixed_by"])
        step(f"{label}, corrected: {fixed['description']}", ["resolve", "--profile", fixed["name"]])



def captured(args: list[str], expect: tuple[int, ...]) -> tuple[int, str]:
    """A step without its title, keeping stdout (the printed tag) while it is shown."""
    proc = provision(args, capture=True)
    sys.stdout.write(proc.stdout)
    sys.stdout.flush()
    return _expect(proc.returncode, args, expect), proc.stdout.strip()
