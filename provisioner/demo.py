"""`make demo`: the main job on a fresh machine, step by step.

Each step prints the command a user would type and runs it through the same
CLI entry point. Refusals (exit code 2) are expected for the field reports:
they show what is wrong with each and the corrected stack.
"""

from __future__ import annotations

import shlex
import sys

from provisioner.cli import main as cli

SEEDS = [
    ("Seed A: 4x Ascend 310 box running GRPO with MindSpeed (as reported)", "seed-310-grpo"),
    ("Seed B: Atlas 800T A2, MindSpore 2.3.0 on a CANN 8.3.RC1 image (as reported)", "seed-800ta2-mindspore-sft"),
    ("Seed C: Atlas 300T A2 on Kylin V10, torch_npu 2.1.0.post1 (as reported)", "seed-300ta2-kylin-lora"),
]


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
    for title, profile in SEEDS:
        step(title, ["resolve", "--profile", profile], expect=(2,))
        fixed = _fixed_by(profile)
        step(f"{title.split(':')[0]}: the corrected stack ({fixed})", ["resolve", "--profile", fixed])


def _fixed_by(profile: str) -> str:
    from provisioner import matrix

    return matrix.load().profile(profile)["fixed_by"]


def main() -> int:
    resolve_steps()
    print("\ndemo: done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
