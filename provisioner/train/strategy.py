"""Strategy plumbing for the SFT loop: which engine runs the step, and the sharded strategies' needs.

``ddp`` (also one process) and ``zero2`` keep a full model on every rank;
``fsdp`` and ``zero3`` shard it, so they load the weights on the host first
(each rank's device then only ever holds its shard plus the layers in use),
decide packing on a two-layer twin of the architecture rather than on the
sharded model, and gather a full state dict for the HF weights of a
checkpoint or of the export.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

from torch import nn

from provisioner.train.config import ConfigError, TrainConfig
from provisioner.train.device import DeviceInfo, Precision
from provisioner.train.dist import World

SHARDED = ("fsdp", "zero3")


def loads_on_host(cfg: TrainConfig) -> bool:
    return cfg.strategy in SHARDED


def host_view(dev: DeviceInfo) -> DeviceInfo:
    """The same process, but with the model kept in host memory until the strategy places its shards."""
    return dataclasses.replace(dev, type="cpu", index=0)


def make_engine(
    loss_fn: nn.Module, cfg: TrainConfig, dev: DeviceInfo, prec: Precision, world: World, total_steps: int
) -> Any:
    if cfg.strategy in ("zero2", "zero3"):
        from provisioner.train import zero

        if not zero.available():  # validate() refuses this earlier; a changed environment lands here
            raise ConfigError(f"config: strategy: {cfg.strategy} needs DeepSpeed, which is not installed")
        return zero.ZeroEngine(loss_fn, cfg, dev, prec, world, total_steps)
    if cfg.strategy == "fsdp":
        from provisioner.train.fsdp import FSDPEngine

        return FSDPEngine(loss_fn, cfg, dev, prec, world, total_steps)
    from provisioner.train.engine import PlainEngine

    return PlainEngine(loss_fn, cfg, dev, prec, world, total_steps)


def twin_packing_works(model: nn.Module, dev: DeviceInfo, ctx: Any, attn: str, dtype: Any, tol: float) -> bool:
    """Run model.packing_works on a two-layer, narrow copy of this architecture on the device: the
    question (does this modeling code with this attention keep packed samples apart) does not depend
    on the size, and the sharded model cannot run a forward before its engine exists."""
    from transformers import AutoModelForCausalLM

    from provisioner.train.model import SFTLoss, inner_model, packing_works

    config = copy.deepcopy(inner_model(model).config)
    heads = 4
    kv = 2 if getattr(config, "num_key_value_heads", heads) != getattr(config, "num_attention_heads", heads) else 4
    for key, value in dict(
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=16,
        vocab_size=1024,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    ).items():
        if hasattr(config, key):
            setattr(config, key, value)
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:2]
    try:
        twin = AutoModelForCausalLM.from_config(
            config, attn_implementation=attn, trust_remote_code=getattr(config, "auto_map", None) is not None
        )
        twin.to(dtype).to(dev.torch_device)
        twin.config.use_cache = False
        return packing_works(SFTLoss(twin, 0), dev, ctx, attn, 1024, tol)
    except Exception:  # an architecture that cannot be shrunk this way: no packing (the safe answer)
        return False


def save_hf_weights(model: nn.Module, engine: Any, path: Path, tuning: str, world: World) -> None:
    """HF weights (model or LoRA adapter) into ``path``: collective for the sharded strategies."""
    from provisioner.train import checkpoint as ckpt
    from provisioner.train.model import inner_model

    if not getattr(engine, "sharded", False):
        if world.is_main:
            ckpt.save_weights(model, path, tuning)
        return
    state = engine.full_state_dict()
    if not world.is_main:
        return
    base = inner_model(model)
    unique = {n for n, _ in base.named_parameters()}
    tied = {n for n, _ in base.named_parameters(remove_duplicate=False)} - unique  # e.g. a tied lm_head
    state = {k: v for k, v in state.items() if k.removeprefix("base_model.model.") not in tied}
    path.mkdir(parents=True, exist_ok=True)
    if tuning == "lora":
        model.save_pretrained(str(path), state_dict=state, safe_serialization=True)
    else:
        inner_model(model).save_pretrained(str(path), state_dict=state, safe_serialization=True)


def merge_lora_export(cfg: TrainConfig, adapter_dir: Path, merged_dir: Path, tokenizer: Any) -> None:
    """Merged full weights from the exported adapter, built on the host (the sharded model cannot merge
    in place)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(cfg.model, trust_remote_code=cfg.trust_remote_code)
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(str(merged_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(merged_dir))
