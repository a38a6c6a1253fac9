"""Forward/backward/step for single-process and DDP runs (DeepSpeed lives in zero.py).

Both engines expose the same small interface to loop.py: ``forward``,
``accumulating`` (skip the gradient all-reduce on all but the last
micro-batch), ``backward``, ``step``, ``lr``, ``save`` and ``load``.
"""

from __future__ import annotations

import contextlib
import inspect
from pathlib import Path
from typing import Any

import torch
from torch import nn

from provisioner.train import checkpoint as ckpt
from provisioner.train.config import TrainConfig
from provisioner.train.device import DeviceInfo, Precision, grad_scaler
from provisioner.train.dist import World
from provisioner.train.optim import (
    build_optimizer,
    build_scheduler,
    clip_gradients,
    optimizer_kind,
    zero_grad,
)
from provisioner.train.packing import Batch


class PlainEngine:
    name = "ddp"

    def __init__(
        self,
        loss_fn: nn.Module,
        cfg: TrainConfig,
        dev: DeviceInfo,
        prec: Precision,
        world: World,
        total_steps: int,
    ) -> None:
        self.loss_fn = loss_fn
        self.max_grad_norm = cfg.max_grad_norm
        self.optimizer = build_optimizer(loss_fn, cfg, dev)
        self.scheduler = build_scheduler(self.optimizer, cfg, total_steps)
        self.scaler = grad_scaler(dev) if prec.use_scaler else None
        self.module: nn.Module = loss_fn
        if world.size > 1:
            from torch.nn.parallel import DistributedDataParallel as DDP

            # The only buffers are rotary tables, identical everywhere: no per-forward broadcast.
            # (Newer torch renamed the switch.)
            params = inspect.signature(DDP.__init__).parameters
            no_sync_buffers = {
                "forward_sync_buffers" if "forward_sync_buffers" in params else "broadcast_buffers": False
            }
            self.module = DDP(
                loss_fn,
                device_ids=None if dev.type == "cpu" else [dev.index],
                # Gradients as views into the all-reduce buckets save a copy; the NPU fused
                # optimiser regroups gradients itself, so leave them alone there.
                gradient_as_bucket_view=optimizer_kind(cfg, dev) != "npu_fused_adamw",
                **no_sync_buffers,
            )
        self._params = [p for p in loss_fn.parameters() if p.requires_grad]

    def forward(self, b: Batch) -> torch.Tensor:
        return self.module(*b.inputs())

    def accumulating(self, more_to_come: bool) -> contextlib.AbstractContextManager[Any]:
        if more_to_come and hasattr(self.module, "no_sync"):
            return self.module.no_sync()
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    def step(self) -> float | torch.Tensor:
        """Clip, step, advance the schedule; returns the pre-clip gradient norm."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        norm = clip_gradients(self._params, self.optimizer, self.max_grad_norm)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)  # skips the step on inf/nan gradients
            self.scaler.update()
        else:
            self.optimizer.step()
        self.scheduler.step()
        zero_grad(self.optimizer)
        return norm

    @property
    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    @property
    def loss_scale(self) -> float | None:
        return float(self.scaler.get_scale()) if self.scaler is not None else None

    def save(self, path: Path, world: World) -> None:
        if world.is_main:
            ckpt.save_torch(self.optimizer.state_dict(), path / "optimizer.pt")
            ckpt.save_torch(self.scheduler.state_dict(), path / "scheduler.pt")
            if self.scaler is not None:
                ckpt.save_torch(self.scaler.state_dict(), path / "scaler.pt")

    def load(self, path: Path, dev: DeviceInfo) -> None:
        self.optimizer.load_state_dict(ckpt.load_torch(path / "optimizer.pt", dev.torch_device))
        self.scheduler.load_state_dict(ckpt.load_torch(path / "scheduler.pt", "cpu"))
        if self.scaler is not None and (path / "scaler.pt").is_file():
            self.scaler.load_state_dict(ckpt.load_torch(path / "scaler.pt", "cpu"))
