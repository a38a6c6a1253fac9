"""Which optional library a config needs, checked before anything heavy is imported.

A strategy or method whose library is missing is refused up front (also by
``provision-train --check``) instead of failing, or silently falling back,
after the model is loaded. Only ``importlib`` probes here: no torch.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any


def installed(module: str) -> bool:
    """Is a top-level module importable? (Finds it without importing it.)"""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def fsdp2_available() -> bool:
    """torch ships FSDP2's ``fully_shard`` (public from torch.distributed.fsdp, earlier under _composable)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    root = Path(next(iter(spec.submodule_search_locations)))
    return (root / "distributed" / "fsdp" / "_fully_shard").is_dir() or (
        root / "distributed" / "_composable" / "fsdp" / "fully_shard.py"
    ).is_file()


def _extra_requirement(name: str) -> str | None:
    """The range the matrix allows for an optional package (matrices/extras.yaml), for the message."""
    try:
        from provisioner.matrix import loader

        for row in loader.load().rows("extras"):
            if row.get("name") == name:
                return str(row.get("requirement") or name)
    except Exception:  # the message is still useful without the range
        return None
    return None


def missing_library(cfg: Any) -> str | None:
    """One line naming what the config needs and is not installed, or None."""
    if cfg.strategy in ("zero2", "zero3") and not installed("deepspeed"):
        req = _extra_requirement("deepspeed") or "deepspeed"
        return (
            f"config: strategy: {cfg.strategy} needs DeepSpeed, which is not installed here "
            f"(pip install '{req}', or build the image with --with deepspeed); strategy fsdp needs only torch"
        )
    if cfg.strategy == "fsdp" and not fsdp2_available():
        return (
            "config: strategy: fsdp needs PyTorch FSDP2 (fully_shard), which this torch does not ship; "
            "use strategy zero3 (DeepSpeed) or a newer torch"
        )
    if cfg.method == "grpo":
        if not installed("trl"):
            return "config: method: grpo needs TRL (pip install 'provisioner[grpo]', or trl), which is not installed"
        if "math" in cfg.grpo.rewards and not installed("math_verify"):
            return (
                "config: grpo.rewards: math needs the math-verify package, which is not installed "
                "(pip install 'provisioner[grpo]', or math-verify)"
            )
        if cfg.grpo.rollout == "vllm" and not installed("vllm"):
            return "config: grpo.rollout: vllm is not installed (use rollout: auto or hf)"
    return None
