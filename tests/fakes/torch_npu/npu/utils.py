"""torch_npu.npu.utils: SoC facts and the overflow checks of saturation mode.

Mirrors torch_npu/npu/utils.py (is_support_inf_nan, is_bf16_supported, get_npu_overflow_flag,
npu_check_overflow, clear_npu_overflow_flag) and torch_npu/npu/_backends.py (get_soc_version).
"""

from __future__ import annotations

import warnings

import torch

from .. import _soc
from .._backend import CHIPS


def get_soc_version() -> int:
    """The SocVersion enum value of the current SoC (NpuVariables.h)."""
    return _soc.version()


def is_support_inf_nan() -> bool:
    return _soc.inf_nan_supported()


def is_bf16_supported(including_emulation: bool = False) -> bool:
    return _soc.bf16_supported()


def get_npu_overflow_flag() -> bool:
    if is_support_inf_nan():
        raise RuntimeError("Unsupported api when soc_version >= Ascend910B1, please use npu_check_overflow")
    return CHIPS.overflow


def npu_check_overflow(grad) -> bool:
    """Inf/NaN in ``grad`` where the SoC has Inf/NaN mode; the overflow flag (then cleared) elsewhere."""
    if is_support_inf_nan():
        if isinstance(grad, float):
            total = grad
        elif isinstance(grad, torch.Tensor):
            total = float(grad.float().sum())
        else:
            raise RuntimeError("Unsupported type.")
        return total in (float("inf"), float("-inf")) or total != total
    flag = get_npu_overflow_flag()
    if flag:
        clear_npu_overflow_flag()
    return flag


def clear_npu_overflow_flag() -> None:
    if is_support_inf_nan():
        warnings.warn("When soc_version >= Ascend910B1, clear_npu_overflow_flag is useless. Please remove it.",
                      stacklevel=2)
        return
    CHIPS.overflow = False
