"""``strategy: fsdp``: PyTorch FSDP2 (``fully_shard``) behind the engine interface of engine.py.

Every decoder layer is its own FSDP unit and the loss module (embeddings,
final norm, output head) the root, so a layer's parameters are gathered just
before it runs and freed after. Parameters, gradients and AdamW state are
sharded over the ranks; with bf16/fp16 compute, FSDP's mixed-precision policy
gathers 16-bit copies and reduces gradients in fp32 onto fp32 master shards.
``offload_params`` (or ``offload_optimizer``) keeps the shards, their
gradients and the optimizer step on the CPU (FSDP2's CPUOffloadPolicy moves
all three together). torch_npu supports FSDP2 on Ascend with HCCL.

Checkpoints hold the sharded model and optimizer state written with
torch.distributed.checkpoint (one file per rank, resumable exactly on the
same world size); the HF weights next to them, like the export, come from a
full state dict gathered to rank 0.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch
from torch import nn

from provisioner.train import checkpoint as ckpt
from provisioner.train.config import ConfigError, TrainConfig
from provisioner.train.device import DeviceInfo, Precision
from provisioner.train.dist import World
from provisioner.train.optim import build_scheduler, param_groups
from provisioner.train.packing import Batch

STATE_DIR = "fsdp"


def _api() -> Any:
    try:
        from torch.distributed import fsdp as api

        api.fully_shard  # noqa: B018  (public from torch 2.6)
        return api
    except (ImportError, AttributeError):
        from torch.distributed._composable import fsdp as api

        return api


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a Hugging Face causal LM (under a PEFT wrapper too)."""
    from provisioner.train import model as modelmod

    try:
        return modelmod.decoder_layers(model)
    except ConfigError:
        raise ConfigError("config: strategy: fsdp cannot find this model's decoder layers to shard") from None


class FSDPEngine:
    name = "fsdp"
    sharded = True

    def __init__(
        self,
        loss_fn: nn.Module,
        cfg: TrainConfig,
        dev: DeviceInfo,
        prec: Precision,
        world: World,
        total_steps: int,
    ) -> None:
        if prec.use_scaler:
            raise ConfigError(
                "config: strategy: fsdp does not do fp16 loss scaling here; use bf16, or strategy zero3 on fp16-only chips"
            )
        from torch.distributed.device_mesh import init_device_mesh

        api = _api()
        self.loss_fn = loss_fn
        self.max_grad_norm = cfg.max_grad_norm
        mesh = init_device_mesh(dev.type, (world.size,))
        kwargs: dict[str, Any] = {"mesh": mesh}
        if prec.name != "fp32":
            kwargs["mp_policy"] = api.MixedPrecisionPolicy(param_dtype=prec.dtype, reduce_dtype=torch.float32)
        self.offload = cfg.offload_params or cfg.resolved_offload_optimizer()
        if self.offload:
            kwargs["offload_policy"] = api.CPUOffloadPolicy(pin_memory=dev.type != "cpu")
        for layer in decoder_layers(loss_fn.model):
            api.fully_shard(layer, **kwargs)
        api.fully_shard(loss_fn, **kwargs)
        self.module: nn.Module = loss_fn
        self._params = [p for p in loss_fn.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            param_groups(loss_fn, cfg.weight_decay),
            lr=cfg.resolved_learning_rate(),
            betas=(cfg.adam_beta1, cfg.adam_beta2),
            eps=cfg.adam_epsilon,
            foreach=dev.type != "cpu" and not self.offload,
        )
        self.scheduler = build_scheduler(self.optimizer, cfg, total_steps)

    def forward(self, b: Batch) -> torch.Tensor:
        return self.module(*b.inputs())

    @property
    def eval_module(self) -> nn.Module:
        return self.module

    def accumulating(self, more_to_come: bool) -> contextlib.AbstractContextManager[Any]:
        # Gradients are reduce-scattered after every micro-batch: sharded accumulation, the least memory.
        return contextlib.nullcontext()

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self) -> float | torch.Tensor:
        limit = self.max_grad_norm if self.max_grad_norm > 0 else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(self._params, limit)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    @property
    def lr(self) -> float:
        return float(self.scheduler.get_last_lr()[0])

    @property
    def loss_scale(self) -> float | None:
        return None

    # ---- checkpoints ---------------------------------------------------------------------

    def save(self, path: Path, world: World) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.loss_fn, self.optimizer)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(path / STATE_DIR))
        if world.is_main:
            ckpt.save_torch(self.scheduler.state_dict(), path / "scheduler.pt")

    def load(self, path: Path, dev: DeviceInfo) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        if not (path / STATE_DIR).is_dir():
            raise ConfigError(f"--resume: {path} was not written by a strategy: fsdp run (no {STATE_DIR}/)")
        model_sd, optim_sd = get_state_dict(self.loss_fn, self.optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=str(path / STATE_DIR))
        set_state_dict(
            self.loss_fn, self.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
        self.scheduler.load_state_dict(ckpt.load_torch(path / "scheduler.pt", "cpu"))

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every rank takes part; rank 0 gets the whole model on the CPU, the others an empty dict."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        sd = get_model_state_dict(self.loss_fn, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {k.removeprefix("model."): v for k, v in sd.items()}
