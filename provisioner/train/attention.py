"""The attention implementation: what `attn_implementation: auto` picks, and why an explicit one is refused.

transformers decides what each name runs: `flash_attention_2` is torch_npu.npu_fusion_attention on an NPU
only from the release that has integrations/npu_flash_attention.py, and `sdpa` only where its own SDPA gate
passes. The chip decides the rest: npu_fusion_attention runs on Atlas A2/A3 only. Both are read here (the
installed transformers version and the SoC family, against train/ascend.yaml), never assumed.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from provisioner.train import ascend
from provisioner.train.config import ConfigError
from provisioner.train.device import DeviceInfo, Precision

FLASH = ("flash_attention_2", "flash_attention_3")


def pick_attention(requested: str, dev: DeviceInfo) -> str:
    """The implementation to load the model with; ConfigError (with the fix) for one that cannot run here."""
    if requested == "auto":
        if dev.type == "npu" and npu_flash_problem(dev) is None:
            return "flash_attention_2"  # transformers maps it to torch_npu.npu_fusion_attention
        if dev.type == "cuda" and importlib.util.find_spec("flash_attn") is not None:
            return "flash_attention_2"
        return "sdpa" if sdpa_problem() is None else "eager"
    if requested in FLASH:
        if dev.type == "cpu":
            raise ConfigError(f"config: attn_implementation: {requested} needs an NPU or a CUDA GPU")
        if dev.type == "npu":
            problem = npu_flash_problem(dev) if requested == "flash_attention_2" else (
                "transformers maps only flash_attention_2 to the NPU (npu_fusion_attention)")
            if problem:
                raise ConfigError(f"config: attn_implementation: {requested}: {problem}; use sdpa or auto")
    if requested == "sdpa":
        problem = sdpa_problem()
        if problem:
            raise ConfigError(f"config: attn_implementation: sdpa: {problem}; use eager or auto")
    return requested


def npu_flash_problem(dev: DeviceInfo) -> str | None:
    """Why flash_attention_2 cannot run on this NPU with the installed transformers; None when it can."""
    if not ascend.transformers_has("npu_flash_attention"):
        have = ascend.installed_version("transformers")
        return (f"transformers {have} has no NPU flash attention (integrations/npu_flash_attention.py arrived in "
                f"{ascend.transformers_first('npu_flash_attention')}), so it would look for the flash_attn "
                "package and fail")
    family = dev.soc_family
    if family is None:
        return f"{dev.name} is not a known Ascend SoC (train/ascend.yaml), so npu_fusion_attention is not assumed"
    if not family.fusion_attention:
        return (f"torch_npu.npu_fusion_attention does not run on {dev.name} ({family.title}); it needs an "
                "Atlas A2 or A3 chip")
    return None


def sdpa_problem() -> str | None:
    """transformers' own SDPA gate (releases that have one refuse sdpa below the torch they need)."""
    try:
        from transformers.utils import is_torch_sdpa_available
    except ImportError:
        return None  # no gate: every torch this transformers supports runs SDPA
    if is_torch_sdpa_available():
        return None
    import torch

    have = ascend.installed_version("transformers")
    return f"transformers {have} refuses SDPA with torch {torch.__version__} (its is_torch_sdpa_available() is False)"


def npu_flash_fixes(dev: DeviceInfo, prec: Precision, attn: str) -> list[str]:
    """Make transformers run NPU flash attention as it should before the model is loaded; one line per fix made
    (for the log). Call it after pick_attention, before from_pretrained."""
    lines = []
    if keep_flash_off_the_hub(dev, attn):
        lines.append("NPU flash attention stays npu_fusion_attention: this transformers would swap it for the "
                     "CUDA kernel kernels-community/flash-attn from the Hub because the `kernels` package is "
                     "installed")
    if fix_flash_autocast(dev, prec, attn):
        lines.append(f"NPU flash attention runs in {prec.name}: this transformers would run fp32 queries "
                     "in fp32 (its autocast check is CUDA-only)")
    return lines


def keep_flash_off_the_hub(dev: DeviceInfo, attn: str) -> bool:
    """Keep flash_attention_2 on npu_fusion_attention where transformers would fetch a CUDA kernel instead.

    Releases in ascend.yaml's flash_attention_hub_fallback window replace flash_attention_2 with the Hub kernel
    kernels-community/flash-attn whenever the flash_attn package is missing and `kernels` is installed, without
    asking the device: on an NPU the model then fails to load. Their modeling_utils reads that gate through its
    own name is_kernels_available, which is turned off here (nothing else of this run uses Hub kernels). Returns
    whether it was; ConfigError when this transformers is shaped otherwise.
    """
    if dev.type != "npu" or attn != "flash_attention_2":
        return False
    if not ascend.transformers_has("flash_attention_hub_fallback") or ascend.transformers_has(
            "flash_attention_hub_fallback_skips_npu"):
        return False
    from transformers import modeling_utils

    gate = getattr(modeling_utils, "is_kernels_available", None)
    if gate is None:
        have = ascend.installed_version("transformers")
        raise ConfigError(f"config: attn_implementation: flash_attention_2: transformers {have} may swap NPU flash "
                          "attention for a CUDA kernel from the Hub; uninstall the `kernels` package or use sdpa")
    if not gate():
        return False
    modeling_utils.is_kernels_available = lambda: False
    return True


def fix_flash_autocast(dev: DeviceInfo, prec: Precision, attn: str) -> bool:
    """Run NPU flash attention in the autocast dtype where transformers would run it in fp32.

    With fp32 weights under autocast (full fine-tuning), the rotary embedding turns the bf16/fp16 query into
    fp32. transformers releases before ascend.yaml's flash_attention_autocast_any_device then pick the
    kernel's dtype from the CUDA autocast state only, find none, and call npu_fusion_attention in fp32.
    Later releases cast fp32 queries to the autocast dtype of their own device; this wrapper does the same
    for the older ones. Returns whether it was installed.
    """
    if dev.type != "npu" or attn != "flash_attention_2" or prec.name == "fp32":
        return False
    if ascend.transformers_has("flash_attention_autocast_any_device"):
        return False
    import torch
    from transformers import AttentionInterface
    from transformers.integrations.flash_attention import flash_attention_forward

    def forward(module: Any, query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        device_type = query.device.type
        if query.dtype == torch.float32 and torch.is_autocast_enabled(device_type):
            dtype = torch.get_autocast_dtype(device_type)
            query, key, value = query.to(dtype), key.to(dtype), value.to(dtype)
        return flash_attention_forward(module, query, key, value, *args, **kwargs)

    AttentionInterface.register("flash_attention_2", forward)
    return True
