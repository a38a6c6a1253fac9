"""torch_npu.optim: the fused optimizers' contract, with NpuFusedAdamW.

Mirrors torch_npu/optim/npu_fused_optim_base.py NpuFusedOptimizerBase and npu_fused_adamw.py NpuFusedAdamW:
on the first step (or zero_grad, or clip_grad_norm_fused_, or a GradScaler unscale) the parameters and their
gradients of each dtype are moved into one combined buffer (torch_npu/utils/combine_tensors.py
npu_combine_tensors: each tensor's storage is re-pointed into the buffer, npu_change_data_ptr), and every
later step updates the buffers as a whole. Hence:
- zero_grad(set_to_none=True) raises ValueError("set_to_none is not supported in fused optimizers"): freed
  gradients would be re-created outside the buffer;
- a gradient replaced after combining (``p.grad = ...``) is not seen by the step;
- parameters must be float32 or float16 (TypeError otherwise);
- clip_grad_norm_fused_(max_norm) clips the combined gradients and returns the total norm.
"""

from __future__ import annotations

import math

import torch
from torch.optim.optimizer import Optimizer

from .._backend import NPUTensor, repoint

__all__ = ["NpuFusedOptimizerBase", "NpuFusedAdamW"]


def _combine(tensors: list[torch.Tensor]) -> torch.Tensor | None:
    """npu_combine_tensors: one zeroed buffer holding every tensor's values, each tensor now a view of it."""
    if not tensors:
        return None
    dtype = tensors[0].dtype
    for t in tensors:
        if t.dtype != dtype:
            raise RuntimeError("Tensors to combine must have the same dtype.")
        if t.device.type != "npu":
            raise RuntimeError(f"Tensors to combine must be on NPU, got {t.device.type}.")
        if not t.is_contiguous():
            raise RuntimeError("Tensors to combine must be contiguous.")
    total = sum(t.numel() for t in tensors)
    combined = torch.zeros(total, dtype=dtype, device=tensors[0].device)
    offset = 0
    for t in tensors:
        n = t.numel()
        part = combined.elem[offset: offset + n].view(t.shape)
        part.copy_(t.elem)
        repoint(t, part)
        offset += n
    return combined


def _part(combined: torch.Tensor | None, offset: int, size: int) -> torch.Tensor | None:
    if combined is None or size == 0:
        return None
    return NPUTensor(combined.elem[offset: offset + size], combined.device)


class NpuFusedOptimizerBase(Optimizer):
    def __init__(self, params, defaults) -> None:
        super().__init__(params, defaults)
        self.combined_params_indexed_by_group = None
        self.combined_grads_indexed_by_group = None
        self.params_lists_indexed_by_group: list = []
        self.params_all_group_combined = [None, None]
        self.grads_all_group_combined = [None, None]
        self.is_params_grads_combined = False
        self.is_states_combined = False
        self.is_fused_optimizer = True
        self._combined_grad_ids: set[int] = set()

    def _maybe_init_combined_params_and_grads(self) -> None:
        if self.is_params_grads_combined:
            return
        per_group, sizes = [], []
        every = [[], []]
        for group in self.param_groups:
            lists, size = [[], []], [0, 0]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.dtype == torch.float32:
                    k = 0
                elif p.dtype == torch.float16:
                    k = 1
                else:
                    raise TypeError(f"Fused optimizer's parameters must be either float32 or float16, but "
                                    f"received {p.dtype}")
                lists[k].append(p)
                size[k] += p.numel()
            every[0] += lists[0]
            every[1] += lists[1]
            per_group.append(lists)
            sizes.append(size)
        self.params_lists_indexed_by_group = per_group
        for k in (0, 1):
            self.params_all_group_combined[k] = _combine(every[k])
            self.grads_all_group_combined[k] = _combine([p.grad for p in every[k]])
        self._combined_grad_ids = {id(p.grad) for p in every[0] + every[1]}
        offsets = [0, 0]
        self.combined_params_indexed_by_group, self.combined_grads_indexed_by_group = [], []
        for size in sizes:
            params, grads = [], []
            for k in (0, 1):
                params.append(_part(self.params_all_group_combined[k], offsets[k], size[k]))
                grads.append(_part(self.grads_all_group_combined[k], offsets[k], size[k]))
                offsets[k] += size[k]
            self.combined_params_indexed_by_group.append(params)
            self.combined_grads_indexed_by_group.append(grads)
        self.is_params_grads_combined = any(t is not None for t in self.params_all_group_combined)

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        self._maybe_init_combined_params_and_grads()
        for i, _ in enumerate(self.param_groups):
            self._group_step(i)
        return loss

    @torch.no_grad()
    def zero_grad(self, set_to_none=False) -> None:
        if set_to_none:
            raise ValueError("set_to_none is not supported in fused optimizers")
        if not self.is_params_grads_combined:
            self._maybe_init_combined_params_and_grads()
            if not self.is_params_grads_combined:
                super().zero_grad(set_to_none)
                return
        for combined in self.grads_all_group_combined:
            if combined is not None:
                combined.zero_()

    def _group_step(self, group_index: int) -> None:
        raise NotImplementedError

    def get_combined_params(self):
        return self.params_all_group_combined

    def get_combined_grads(self):
        return self.grads_all_group_combined

    def clip_grad_norm_fused_(self, max_norm, norm_type=2):
        self._maybe_init_combined_params_and_grads()
        grads = [g for g in self.grads_all_group_combined if g is not None]
        if not grads:
            return torch.tensor(0.0)
        norm_type = float(norm_type)
        if norm_type == math.inf:
            total = torch.stack([g.float().abs().max() for g in grads]).max()
        else:
            total = torch.stack([g.float().abs().pow(norm_type).sum() for g in grads]).sum().pow(1 / norm_type)
        coef = float(max_norm) / (total + 1e-6)
        if coef < 1:
            for g in grads:
                g.mul_(coef)
        return total


class NpuFusedAdamW(NpuFusedOptimizerBase):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False) -> None:
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if eps < 0.0:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameters: {betas}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad))

    def _group_step(self, group_index: int) -> None:
        group = self.param_groups[group_index]
        beta1, beta2 = group["betas"]
        for p in group["params"]:
            if p.grad is None:
                continue
            if id(p.grad) not in self._combined_grad_ids:
                continue  # replaced after combining: the fused step does not see it (the real one neither)
            state = self.state[p]
            if not state:
                state["step"] = 0
                state["exp_avg"] = torch.zeros_like(p)
                state["exp_avg_sq"] = torch.zeros_like(p)
            state["step"] += 1
            step = state["step"]
            p.data.mul_(1 - group["lr"] * group["weight_decay"])
            exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
            exp_avg.mul_(beta1).add_(p.grad, alpha=1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            denom = (exp_avg_sq.sqrt() / math.sqrt(1 - beta2**step)).add_(group["eps"])
            p.data.addcdiv_(exp_avg, denom, value=-group["lr"] / (1 - beta1**step))
