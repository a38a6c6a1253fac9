"""DeepSpeed ZeRO-2 / ZeRO-3 with optional CPU offload, behind the engine interface of engine.py.

Used with ``strategy: zero2`` or ``zero3``; a config naming them without
deepspeed installed is refused before the run (requirements.py). ZeRO-2 shards
gradients and optimizer state (``offload_optimizer``: state and step on the
CPU); ZeRO-3 also shards the parameters (``offload_params``: on the CPU). On
Ascend, DeepSpeed picks its NPU accelerator by itself once torch_npu is imported.
"""

from __future__ import annotations

import contextlib
import importlib.util
from pathlib import Path
from typing import Any

import torch
from torch import nn

from provisioner.train.config import ConfigError, TrainConfig
from provisioner.train.device import DeviceInfo, Precision
from provisioner.train.dist import World
from provisioner.train.optim import build_scheduler, param_groups
from provisioner.train.packing import Batch


def check_supported(dev: DeviceInfo, prec: Precision, strategy: str) -> None:
    """For the ZeRO strategies (other strategies pass): refuse ZeRO (stage 2 or 3) with fp16 on an NPU in saturation mode (first-generation 910): the chip
    clamps an overflow to the largest finite value instead of producing Inf/NaN, and upstream DeepSpeed detects
    overflow only by Inf/NaN (runtime/zero/stage_1_and_2.py and stage3.py, _has_inf_or_nan), so the loss scale
    never backs off and saturated gradients are applied. torch_npu's GradScaler (the DDP path) reads the chip's
    overflow flag instead (torch_npu/npu/amp/grad_scaler.py)."""
    if strategy in ("zero2", "zero3") and dev.type == "npu" and prec.name == "fp16" and dev.inf_nan is False:
        raise ConfigError(
            f"config: strategy: {strategy} with fp16 would apply saturated gradients on {dev.name}: this chip "
            "saturates on overflow instead of producing Inf/NaN, and DeepSpeed detects overflow only by Inf/NaN; "
            "use strategy: ddp (torch_npu's GradScaler reads the overflow flag) or precision: fp32"
        )


def available() -> bool:
    return importlib.util.find_spec("deepspeed") is not None


def ds_config(cfg: TrainConfig, prec: Precision) -> dict[str, Any]:
    from provisioner.train.memory import facts

    buckets = facts()["deepspeed"]  # the memory plan counts these buffers
    stage = 3 if cfg.strategy == "zero3" else 2
    zero: dict[str, Any] = {
        "stage": stage,
        "contiguous_gradients": True,
        "overlap_comm": False,
        "reduce_bucket_size": buckets["reduce_bucket"],
        "allgather_bucket_size": buckets["allgather_bucket"],
    }
    if cfg.resolved_offload_optimizer():
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if stage == 3:
        zero.update(
            stage3_max_live_parameters=buckets["stage3_max_live_parameters"],
            stage3_prefetch_bucket_size=buckets["stage3_prefetch_bucket"],
            stage3_param_persistence_threshold=buckets["stage3_param_persistence_threshold"],
            stage3_gather_16bit_weights_on_model_save=True,
        )
        if cfg.offload_params:
            zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        # Batches are built by the trainer; DeepSpeed only needs these for its bookkeeping.
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": cfg.gradient_accumulation_steps,
        "gradient_clipping": cfg.max_grad_norm,
        "zero_optimization": zero,
        "bf16": {"enabled": prec.name == "bf16"},
        "fp16": {"enabled": prec.name == "fp16", "loss_scale": 0, "initial_scale_power": 16},
        "optimizer": {
            "type": "AdamW",
            "params": {
                "lr": cfg.resolved_learning_rate(),
                "betas": [cfg.adam_beta1, cfg.adam_beta2],
                "eps": cfg.adam_epsilon,
                "weight_decay": cfg.weight_decay,
            },
        },
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


class ZeroEngine:
    def __init__(
        self,
        loss_fn: nn.Module,
        cfg: TrainConfig,
        dev: DeviceInfo,
        prec: Precision,
        world: World,
        total_steps: int,
    ) -> None:
        import deepspeed

        self.name = cfg.strategy
        self.sharded = cfg.strategy == "zero3"
        self.loss_fn = loss_fn
        self.gas = cfg.gradient_accumulation_steps
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=loss_fn,
            model_parameters=param_groups(loss_fn, cfg.weight_decay),
            config=ds_config(cfg, prec),
            lr_scheduler=lambda opt: build_scheduler(opt, cfg, total_steps),
        )
        self.module = self.engine
        self._lr = float(self.scheduler.get_last_lr()[0])

    def forward(self, b: Batch) -> torch.Tensor:
        return self.engine(*b.inputs())

    @property
    def eval_module(self) -> nn.Module:
        return self.engine

    def accumulating(self, more_to_come: bool) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()  # DeepSpeed tracks the accumulation boundary itself

    def backward(self, loss: torch.Tensor) -> None:
        # DeepSpeed divides by the accumulation steps; the loss is already normalised globally.
        self.engine.backward(loss * self.gas)
        self._lr = float(self.scheduler.get_last_lr()[0])  # the rate this step uses
        self.engine.step()  # a real optimiser step only at the accumulation boundary

    def step(self) -> float | torch.Tensor:
        norm = self.engine.get_global_grad_norm()
        return float("nan") if norm is None else norm

    @property
    def lr(self) -> float:
        return self._lr

    @property
    def loss_scale(self) -> float | None:
        scale = getattr(self.optimizer, "cur_scale", None)
        return float(scale) if scale is not None else None

    def save(self, path: Path, world: World) -> None:
        self.engine.save_checkpoint(str(path), tag="zero", save_latest=False)

    def load(self, path: Path, dev: DeviceInfo) -> None:
        self.engine.load_checkpoint(
            str(path), tag="zero", load_optimizer_states=True, load_lr_scheduler_states=True
        )

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every rank takes part under ZeRO-3; rank 0 gets the whole model (in the compute dtype)."""
        if self.sharded:
            sd = self.engine._zero3_consolidated_16bit_state_dict() or {}
        else:
            sd = {k: v.detach().cpu() for k, v in self.loss_fn.state_dict().items()}
        return {k.removeprefix("model."): v for k, v in sd.items()}
