"""The SoC the double pretends to be, and what torch_npu derives from it.

Mirrors torch_npu/csrc/core/npu/NpuVariables.h (enum SocVersion, shipped in the wheel under
torch_npu/include/) and NpuVariables.cpp (SetSocVersion, IsSupportInfNan, IsBF16Supported): the SoC name
the runtime reports is mapped to an ordered enum and capabilities are ranges of that enum.
"""

from __future__ import annotations

import os

# torch_npu/include/torch_npu/csrc/core/npu/NpuVariables.h (2.13.0), enum class SocVersion.
SOC_VERSIONS = {
    "Ascend910PremiumA": 100, "Ascend910ProA": 101, "Ascend910A": 102, "Ascend910ProB": 103, "Ascend910B": 104,
    "Ascend310P1": 200, "Ascend310P2": 201, "Ascend310P3": 202, "Ascend310P4": 203, "Ascend310P5": 204,
    "Ascend310P7": 205,
    "Ascend910B1": 220, "Ascend910B2": 221, "Ascend910B2C": 222, "Ascend910B3": 223, "Ascend910B4": 224,
    "Ascend910B4-1": 225,
    "Ascend310B1": 240, "Ascend310B2": 241, "Ascend310B3": 242, "Ascend310B4": 243,
    "Ascend910_9391": 250, "Ascend910_9392": 251, "Ascend910_9381": 252, "Ascend910_9382": 253,
    "Ascend910_9372": 254, "Ascend910_9362": 255, "Ascend910_9363": 256,
    "Ascend950": 260,
}
ASCEND910B1, ASCEND310B1, ASCEND910_9391 = 220, 240, 250


def name() -> str:
    soc = os.environ.get("FAKE_NPU_SOC", "Ascend910B3")
    if soc not in SOC_VERSIONS:
        # NpuVariables.cpp SetSocVersion: AT_ERROR("Unsupported soc version: ", ...)
        raise RuntimeError(f"Unsupported soc version: {soc.replace('_', ' ')}")
    return soc


def version() -> int:
    return SOC_VERSIONS[name()]


def bf16_supported() -> bool:
    """NpuVariables.cpp IsBF16Supported: GetSocVersion() >= Ascend910B1."""
    return version() >= ASCEND910B1


def inf_nan_supported() -> bool:
    """NpuVariables.cpp IsSupportInfNan (default mode): [Ascend910B1, Ascend310B1) or >= Ascend910_9391.
    Elsewhere (first-generation 910, 310P, 310B) the chip runs in saturation mode."""
    v = version()
    return ASCEND910B1 <= v < ASCEND310B1 or v >= ASCEND910_9391


def fusion_attention_supported() -> bool:
    """torch_npu/_op_plugin_docs.py, npu_fusion_attention, 支持的型号: "Atlas A2 训练系列产品" (A2, SoC
    Ascend910B*). A3 (Ascend910_93xx) runs it too: MindSpeed-LLM's A3 configs enable use_flash_attn. Not on
    first-generation 910 or the inference chips."""
    v = version()
    return ASCEND910B1 <= v < ASCEND310B1 or ASCEND910_9391 <= v < 260


def jit_compile_default() -> bool:
    """torch_npu/csrc/framework/LazyInitAclops.cpp GetAndSetDefaultJitCompileByAcl: the default comes from
    ACL's ACL_OP_JIT_COMPILE, which enables online compilation on the first-generation 910 (no binary
    kernel package) and disables it from Atlas A2 on (binary kernels)."""
    return version() < ASCEND910B1
