"""AdamW (the NPU fused one where available), the LR schedule and gradient clipping."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from provisioner.train.config import ConfigError, TrainConfig
from provisioner.train.device import DeviceInfo


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """No weight decay on biases and norm scales (the 1-D parameters)."""
    decay: list = []
    no_decay: list = []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def _npu_fused_adamw() -> Any | None:
    try:
        from torch_npu.optim import NpuFusedAdamW

        return NpuFusedAdamW
    except Exception:
        return None


def optimizer_kind(cfg: TrainConfig, dev: DeviceInfo) -> str:
    if cfg.optimizer == "npu_fused_adamw":
        if dev.type != "npu" or _npu_fused_adamw() is None:
            raise ConfigError("config: optimizer: npu_fused_adamw needs an Ascend NPU with torch_npu")
        return "npu_fused_adamw"
    if cfg.optimizer == "auto" and dev.type == "npu" and _npu_fused_adamw() is not None:
        return "npu_fused_adamw"
    return "adamw"


def build_optimizer(model: nn.Module, cfg: TrainConfig, dev: DeviceInfo) -> torch.optim.Optimizer:
    groups = param_groups(model, cfg.weight_decay)
    kwargs: dict[str, Any] = {
        "lr": cfg.resolved_learning_rate(),
        "betas": (cfg.adam_beta1, cfg.adam_beta2),
        "eps": cfg.adam_epsilon,
    }
    fused = _npu_fused_adamw() if optimizer_kind(cfg, dev) == "npu_fused_adamw" else None
    if fused is not None:
        return fused(groups, **kwargs)
    if dev.type == "cuda":
        kwargs["fused"] = True
    return torch.optim.AdamW(groups, **kwargs)


def zero_grad(optimizer: Any) -> None:
    """Free the gradients, except under a fused NPU optimizer: its gradients are views into one combined
    buffer per dtype, and NpuFusedOptimizerBase.zero_grad refuses set_to_none=True with a ValueError
    (torch_npu/optim/npu_fused_optim_base.py, every torch_npu 2.1-2.13); it zeroes the buffer instead.
    `is_fused_optimizer` is the attribute that class sets."""
    optimizer.zero_grad(set_to_none=not getattr(optimizer, "is_fused_optimizer", False))


def lr_lambda(total_steps: int, warmup_steps: int, kind: str, min_ratio: float) -> Any:
    def f(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        if kind == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        if kind == "cosine":
            return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
        return min_ratio + (1.0 - min_ratio) * (1.0 - progress)

    return f


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig, total_steps: int) -> Any:
    warmup = cfg.warmup_steps if cfg.warmup_steps is not None else math.ceil(cfg.warmup_ratio * total_steps)
    fn = lr_lambda(total_steps, warmup, cfg.lr_scheduler, cfg.min_lr_ratio)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)


def clip_gradients(params: Iterable[torch.Tensor], optimizer: Any, max_norm: float) -> torch.Tensor:
    """Clip to ``max_norm`` (0 disables clipping); returns the pre-clip global norm as a
    tensor, so reading it (a device sync) waits until the step is logged."""
    limit = max_norm if max_norm > 0 else float("inf")
    if hasattr(optimizer, "clip_grad_norm_fused_"):
        # The NPU fused optimiser keeps gradients in combined buffers; clip those directly.
        norm = optimizer.clip_grad_norm_fused_(limit)
    else:
        norm = torch.nn.utils.clip_grad_norm_(list(params), limit)
    return norm
