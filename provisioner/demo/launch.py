"""Demo: launch an image on a simulated host (fake device nodes, CPU workers)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from provisioner.demo.steps import step

# The card the launch steps simulate, and how many of its chips.
LAUNCH_CARD = "300T-A2"
LAUNCH_CHIPS = 2
SIM_ID = 1000  # uid/gid of the simulated host's driver account


def simulated_host(base: Path, image_stack: dict | None, chips: int = LAUNCH_CHIPS,
                   nodes: str = "mknod") -> tuple[Path, Path]:
    """A host root and dev root for LAUNCH_CARD (provisioner.host.fakehost.card_host).

    Its driver/version.info names the driver the image's stack is paired with, when the image says. The
    demo's containers open the nodes, so they are real (mknod, root) unless `nodes` says "simulated".
    """
    from provisioner.host import fakehost
    from provisioner.matrix import loader

    paired = ((image_stack or {}).get("driver") or {}).get("paired") or []
    host = fakehost.card_host(Path(base), loader.load(), LAUNCH_CARD, chips, driver=paired[0] if paired else None,
                              account_id=SIM_ID, nodes=nodes)
    return host.root, host.dev_root


def _image_facts(image: str) -> tuple[dict | None, str | None]:
    """The image's stack label, and why the bundled trainer cannot run in it (None: it can)."""
    from provisioner import engine
    from provisioner.engine.errors import EngineError, short
    from provisioner.image.labels import label_stack

    probe = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('provisioner.train') else 3)"
    try:
        with engine.connect(60) as eng:
            labels = eng.image(image).labels
            status, _, err = eng.run(image, ["python", "-c", probe], network="none",
                                     environment={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    except EngineError as exc:  # the launch step itself reports an absent engine or image
        return None, f"cannot look into {image}: {short(exc)}"
    missing = None
    if status == 3:
        missing = "provisioner.train is not in the image yet"
    elif status != 0:
        missing = f"python failed: {short(err.decode(errors='replace') or f'exit {status}')}"
    return label_stack(labels, image)[0], missing


def launch_steps(image: str, train_args: list[str] | None = None, job_dir: Path | None = None,
                 grpo_args: list[str] | None = None) -> None:
    """Launch `image` on a simulated 2-chip Atlas 300T A2 host (fake device nodes, CPU workers):
    the collective smoke test, then a short run of the bundled trainer when the image has it.

    `train_args` are the trainer's arguments for that short run (after `--`); `job_dir`
    is mounted read-write at /job (model, data, config and outputs); `grpo_args`, when
    given, run GRPO on the demo's toy reward after it (demo/job.py prepare_grpo).
    """
    title = f"Launch on a simulated {LAUNCH_CHIPS}-chip {LAUNCH_CARD} host"
    if os.geteuid() != 0:
        print(f"\n=== {title}: skipped (simulated device nodes are made with mknod, which needs root)")
        return
    stack, no_trainer = _image_facts(image)
    with tempfile.TemporaryDirectory(prefix="provision-demo-host-") as tmp:
        root, dev = simulated_host(Path(tmp), stack)
        base = ["launch", "--card", LAUNCH_CARD, "--devices", f"0-{LAUNCH_CHIPS - 1}", "--root", str(root),
                "--dev-root", str(dev), "--image", image,
                # torch_npu without CANN breaks `import torch` unless backend autoloading is off.
                "-e", "TORCH_DEVICE_BACKEND_AUTOLOAD=0"]
        step(f"{title}: collective smoke test (all_reduce over both chips' workers; gloo on CPU here)",
             base + ["--check-only"])
        if no_trainer:
            print(f"\n=== {title}: short trainer run skipped ({no_trainer})")
            return
        if not train_args:
            print(f"\n=== {title}: short trainer run skipped (no trainer arguments given to launch_steps)")
            return
        mounts = ["-v", f"{Path(job_dir).resolve()}:/job", "-e", "HF_HUB_OFFLINE=1"] if job_dir else []
        step(f"{title}: a short LoRA run of the bundled trainer (tiny random Qwen2, real Qwen tokenizer)",
             base + mounts + ["--", *train_args])
        if job_dir:
            from provisioner.demo.job import summarize

            print(summarize(job_dir), flush=True)
        if grpo_args:
            step(f"{title}: GRPO of a tiny Qwen2 on a learnable toy reward (1 for a plain-ASCII completion)",
                 base + mounts + ["--", *grpo_args])
            if job_dir:
                from provisioner.demo.job import summarize_grpo

                print(summarize_grpo(job_dir), flush=True)
