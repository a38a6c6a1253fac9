"""`make demo`: the main job on a fresh machine, step by step.

Each step prints the command a user would type and runs it through the same
CLI entry point. Refusals (exit code 2) are expected for the field reports:
they show what is wrong with each and the corrected stack. Then the 300T-A2
image is built, and launched on a simulated 2-chip host: the collective smoke
test, a short run of the bundled trainer and GRPO on a learnable toy reward.
"""

from __future__ import annotations

from pathlib import Path

from provisioner.demo.images import image_steps
from provisioner.demo.launch import launch_steps, simulated_host
from provisioner.demo.steps import SEEDS, resolve_steps, step

__all__ = ["SEEDS", "image_steps", "launch_steps", "main", "resolve_steps", "simulated_host", "step"]

# Where the demo's training job (tiny model, data, config, outputs) is kept for a look afterwards.
JOB_DIR = Path("out") / "demo-job"


def main() -> int:
    from provisioner.demo.job import prepare_grpo, prepare_job

    resolve_steps()
    image = image_steps()
    train_args = prepare_job(JOB_DIR)
    launch_steps(image, train_args, job_dir=JOB_DIR, grpo_args=prepare_grpo(JOB_DIR))
    print("\ndemo: done")
    return 0
