"""torch_npu.npu.amp: the NPU GradScaler and autocast.

Mirrors torch_npu/npu/amp/grad_scaler.py GradScaler: a torch.amp.GradScaler with a `dynamic` switch
(False: a static scale, no overflow checks), that requires NPU outputs in scale(), clears the overflow flag
at the start of a step on saturation-mode SoCs, unscales a fused optimizer's combined gradient buffers
(optimizers with `is_fused_optimizer`), skips the step on overflow with "Gradient overflow. Skipping step"
and backs the scale off in update().
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch.amp.grad_scaler import GradScaler as _BaseGradScaler
from torch.amp.grad_scaler import OptState, _refresh_per_optimizer_state

from . import utils


class GradScaler(_BaseGradScaler):
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
                 dynamic=True, enabled=True) -> None:
        if enabled:
            if growth_factor <= 1.0:
                raise ValueError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise ValueError("The backoff factor must be < 1.0.")
        super().__init__("npu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)
        self._dynamic = dynamic
        self._has_overflow = False
        self._clear_overflow_flag = False

    def scale(self, outputs):
        if not self._enabled:
            return outputs
        if self._dynamic and not self._clear_overflow_flag:
            if not utils.is_support_inf_nan():
                utils.clear_npu_overflow_flag()
            self._clear_overflow_flag = True
        for t in [outputs] if isinstance(outputs, torch.Tensor) else list(outputs):
            if isinstance(t, torch.Tensor) and t.device.type != "npu":
                raise ValueError("Device type of outputs should be npu.")
        return super().scale(outputs)

    def _unscale_grads_(self, optimizer, inv_scale, found_inf, allow_fp16):
        if not getattr(optimizer, "is_fused_optimizer", False):
            if not self._dynamic:
                with torch.no_grad():
                    for group in optimizer.param_groups:
                        for p in group["params"]:
                            if p.grad is not None:
                                p.grad.mul_(inv_scale)
                return {found_inf.device: found_inf}
            out = super()._unscale_grads_(optimizer, inv_scale, found_inf, allow_fp16)
            self._has_overflow = self._has_overflow or any(float(v) > 0 for v in out.values())
            return out
        with torch.no_grad():
            if not optimizer.is_params_grads_combined:
                optimizer._maybe_init_combined_params_and_grads()
            for combined in optimizer.grads_all_group_combined:
                if combined is None:
                    continue
                if self._dynamic:
                    torch._amp_foreach_non_finite_check_and_unscale_([combined], found_inf, inv_scale)
                    if float(found_inf) > 0:
                        self._has_overflow = True
                else:
                    combined.mul_(inv_scale)
        return {found_inf.device: found_inf}

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        if not sum(float(v) for v in optimizer_state["found_inf_per_device"].values()) and not self._has_overflow:
            return optimizer.step(*args, **kwargs)
        print("Gradient overflow. Skipping step")
        return None

    def update(self, new_scale=None) -> None:
        if not self._enabled:
            return
        if new_scale is not None or self._dynamic:
            super().update(new_scale)
        self._per_optimizer_states = defaultdict(_refresh_per_optimizer_state)
        self._has_overflow = False
        self._clear_overflow_flag = False

    def state_dict(self):
        state = super().state_dict()
        if self._enabled:
            state["dynamic"] = self._dynamic
        return state

    def load_state_dict(self, state_dict) -> None:
        if not self._enabled:
            return
        super().load_state_dict(state_dict)
        self._dynamic = state_dict["dynamic"]


__all__ = ["GradScaler", "OptState", "autocast"]


def autocast(enabled=True, dtype=torch.float16, cache_enabled=True):
    """torch_npu/npu/amp/autocast_mode.py autocast: torch.autocast for the npu device."""
    return torch.autocast("npu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
