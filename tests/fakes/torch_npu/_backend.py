"""The `npu` device on CPU: a Python PrivateUse1 backend whose tensors wrap CPU tensors.

Real torch_npu renames torch's PrivateUse1 backend to "npu" and registers its device module
(torch_npu/__init__.py: torch.utils.rename_privateuse1_backend("npu"), torch._register_device_module("npu",
torch_npu.npu), torch.utils.generate_methods_for_privateuse1_backend). The double does the same through
torch's Python-backend hooks, and keeps each tensor's data in a CPU tensor (`elem`) behind a wrapper
subclass whose __torch_dispatch__ runs every aten op on the CPU data. What the chip does differently is
applied here: no bf16 kernels below Ascend910B1, saturation instead of Inf/NaN on SoCs without Inf/NaN
mode (with the overflow flag set), an HBM limit, a separate RNG per device, and bad HBM on chosen chips.
"""

from __future__ import annotations

import math
import os
import threading
import weakref

import torch
from torch._C import DispatchKey, DispatchKeySet, _ExcludeDispatchKeyGuard
from torch.utils._pytree import tree_flatten, tree_map

from . import _soc

aten = torch.ops.aten
_state = threading.local()


class Chips:
    """Process-wide device state: visible chips, current device, memory, RNG, overflow flag."""

    def __init__(self) -> None:
        total = int(os.environ.get("FAKE_NPU_COUNT", "1"))
        self.visible = _visible_devices(total)
        self.current = 0
        self.hbm = int(float(os.environ.get("FAKE_NPU_HBM_GIB", "64")) * 1024**3)
        # what the chip holds before this process allocates anything (npu-smi shows 3-4 GB on an idle A2 chip)
        self.held = int(float(os.environ.get("FAKE_NPU_HELD_MIB", "0")) * 1024**2)
        # bad HBM: on these chips (ids before ASCEND_RT_VISIBLE_DEVICES), the byte at FAKE_NPU_BAD_HBM_MIB from the
        # start of the process's allocations reads back with one bit flipped after every write that covers it
        self.bad_chips = {int(x) for x in os.environ.get("FAKE_NPU_BAD_HBM", "").split(",") if x.strip().isdigit()}
        self.bad_offset = int(float(os.environ.get("FAKE_NPU_BAD_HBM_MIB", "32")) * 1024**2)
        self.allocated = [0] * max(1, len(self.visible))
        self.peak = [0] * max(1, len(self.visible))
        self.storages: dict[int, list[int]] = {}  # data_ptr -> [nbytes, live wrappers, device, start]
        self.generators = [torch.Generator() for _ in range(max(1, len(self.visible)))]
        for i, g in enumerate(self.generators):
            g.manual_seed(67280421310721 + i)
        self.overflow = False  # the float status register of saturation mode
        self.jit_compile: bool | None = None  # None: the SoC's default
        self.initialized = False

    def count(self) -> int:
        return len(self.visible)


def _visible_devices(total: int) -> list[int]:
    """ASCEND_RT_VISIBLE_DEVICES: logical ids, comma-separated and ascending; parsing stops at the first
    bad character and ids out of range are dropped (CANN envref_07_0028)."""
    raw = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if raw is None:
        return list(range(total))
    out: list[int] = []
    for part in raw.split(","):
        if not part.isdigit():
            break
        n = int(part)
        if n >= total or (out and n <= out[-1]):
            break
        out.append(n)
    return out


CHIPS = Chips()


def device_index(device) -> int:
    if device is None:
        return CHIPS.current
    if isinstance(device, int):
        return device
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        return CHIPS.current if device.index is None else device.index
    raise ValueError(f"Expected a npu device, but got: {device!r}")


def check_device(index: int) -> None:
    if not 0 <= index < CHIPS.count():
        # torch_npu/npu/utils.py set_device -> c10_npu::SetDevice: error 107001 for an invalid id
        raise RuntimeError(f"Invalid device ID. The invalid device is {index}, and the valid range is "
                           f"[0, {CHIPS.count()}). (error code 107001)")


# ---- memory accounting --------------------------------------------------------------------------------

def _acquire(elem: torch.Tensor, index: int) -> int:
    storage = elem.untyped_storage()
    ptr = storage.data_ptr()
    entry = CHIPS.storages.get(ptr)
    if entry is None:
        nbytes = storage.nbytes()
        if CHIPS.allocated[index] + nbytes > CHIPS.hbm - CHIPS.held:
            # torch_npu/csrc/core/npu/NPUCachingAllocator.cpp: "NPU out of memory. Tried to allocate ..."
            raise torch.OutOfMemoryError(
                f"NPU out of memory. Tried to allocate {nbytes / 1024**2:.2f} MiB (NPU {index}; "
                f"{CHIPS.hbm / 1024**3:.2f} GiB total capacity; "
                f"{CHIPS.allocated[index] / 1024**3:.2f} GiB already allocated)")
        # where the storage lies in the chip's memory: after everything allocated before it (a bump allocator
        # is enough to place the bad byte of FAKE_NPU_BAD_HBM in one buffer)
        entry = CHIPS.storages[ptr] = [nbytes, 0, index, CHIPS.allocated[index]]
        CHIPS.allocated[index] += nbytes
        _bad_hbm(storage, entry)
        CHIPS.peak[index] = max(CHIPS.peak[index], CHIPS.allocated[index])
    entry[1] += 1
    return ptr


def _bad_hbm(storage, entry: list[int]) -> None:
    """A storage written on a chip of FAKE_NPU_BAD_HBM that covers its bad byte: flip one bit of that byte."""
    nbytes, _, index, start = entry
    if CHIPS.visible and CHIPS.visible[index] in CHIPS.bad_chips and start <= CHIPS.bad_offset < start + nbytes:
        at = CHIPS.bad_offset - start
        storage[at] = storage[at] ^ 0x10


def _written(func, out) -> None:
    """After an op that writes into existing tensors (in place or out=): the bad byte of a written storage."""
    for o in tree_flatten(out)[0]:
        if isinstance(o, torch.Tensor):
            entry = CHIPS.storages.get(o.untyped_storage().data_ptr())
            if entry is not None:
                _bad_hbm(o.untyped_storage(), entry)


def _release(box: list[int]) -> None:
    entry = CHIPS.storages.get(box[0])
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] <= 0:
        CHIPS.allocated[entry[2]] -= entry[0]
        del CHIPS.storages[box[0]]


def repoint(t: NPUTensor, data: torch.Tensor) -> None:
    """npu_change_data_ptr (torch_npu/utils/combine_tensors.py): the tensor keeps its identity and its data
    moves into another buffer."""
    _release(t._npu_box)
    t._npu_box[0] = _acquire(data, CHIPS.current)
    t.elem = data


# ---- the tensor ----------------------------------------------------------------------------------------

class NPUTensor(torch.Tensor):
    """A tensor on `npu:N` whose data is the CPU tensor `elem`."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor, device: torch.device | None = None):
        if isinstance(elem, NPUTensor):
            elem = elem.elem
        if device is not None:
            check_device(device_index(device))
        # torch's Python-backend device guard reports one device (torch/csrc/acc/Module.cpp, deviceCount), and
        # the autograd engine keeps one queue per device index: every tensor says npu:0. A worker uses one
        # chip (set_device(LOCAL_RANK)), which the memory statistics follow.
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(), dtype=elem.dtype,
            layout=elem.layout, device=torch.device("npu", 0), requires_grad=elem.requires_grad)
        r.elem = elem
        r._npu_box = [_acquire(elem, CHIPS.current)]
        weakref.finalize(r, _release, r._npu_box)
        return r

    def tolist(self):  # torch's own refuses subclasses; real NPU tensors copy to the host
        return self.elem.tolist()

    # Storage and address: the chip's memory is the CPU data here (safetensors and peft tell shared
    # tensors apart by storage pointer).
    def untyped_storage(self):
        return self.elem.untyped_storage()

    def data_ptr(self) -> int:
        return self.elem.data_ptr()

    # `p.data = other` swaps the tensor's contents (Module.to, peft casts); the wrapped data follows.
    @property
    def data(self):
        return torch.Tensor.data.__get__(self, type(self))

    @data.setter
    def data(self, new) -> None:
        torch.Tensor.data.__set__(self, new)
        repoint(self, new.elem if isinstance(new, NPUTensor) else new)

    def numpy(self, *args, **kwargs):
        raise TypeError("can't convert npu:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                        "to host memory first.")

    def __repr__(self, *, tensor_contents=None) -> str:
        return f"{self.elem!r}".replace("tensor(", "npu_tensor(", 1)[:-1] + f", device='{self.device}')"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})


def _unwrap(x):
    if isinstance(x, NPUTensor):
        return x.elem
    if isinstance(x, torch.device) and x.type == "npu":
        return torch.device("cpu")
    return x


# Ops that only move or re-view data: no compute kernel behind them on the chip.
_MOVES = {
    aten._to_copy.default, aten.copy_.default, aten.detach.default, aten.alias.default, aten.view.default,
    aten._unsafe_view.default, aten.empty_like.default, aten.empty.memory_format, aten.empty_strided.default,
    aten.lift_fresh.default, aten.clone.default, aten.t.default, aten.transpose.int, aten.permute.default,
    aten.expand.default, aten.slice.Tensor, aten.select.int, aten.unsqueeze.default, aten.squeeze.dim,
    aten.new_empty.default, aten.new_empty_strided.default, aten.zero_.default, aten.fill_.Scalar,
    aten.set_.source_Storage_storage_offset, aten.as_strided.default, aten._local_scalar_dense.default,
}
# Arithmetic whose results overflow (the float status register watches these).
_COMPUTE_TAGS = (torch.Tag.pointwise, torch.Tag.reduction)
_COMPUTE = {aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default, aten.matmul.default,
            aten._softmax.default, aten._log_softmax.default, aten.sum.dim_IntList, aten.sum.default}
_SELECTS = {aten.masked_fill.Scalar, aten.masked_fill_.Scalar, aten.where.self, aten.where.ScalarSelf,
            aten.where.ScalarOther, aten.clamp.default, aten.fill.Scalar}


def _dispatch(func, args, kwargs):
    flat, _ = tree_flatten((args, kwargs))
    npu_in = [x for x in flat if isinstance(x, NPUTensor)]
    device = npu_in[0].device if npu_in else None
    dev_kw = kwargs.get("device")
    if dev_kw is not None:
        dev_kw = torch.device(dev_kw)
        device = dev_kw if dev_kw.type == "npu" else None

    if func is aten._amp_foreach_non_finite_check_and_unscale_.default:
        return _check_and_unscale(args)
    if func is aten.record_stream.default:
        return None  # one stream per chip here: nothing to record
    if not _soc.bf16_supported() and func not in _MOVES:
        if any(isinstance(x, torch.Tensor) and x.dtype == torch.bfloat16 and x.device.type == "npu" for x in flat):
            # No bf16 kernels before Ascend910B1 (NpuVariables.cpp IsBF16Supported; CANN op docs: the Atlas
            # training series does not support BFLOAT16).
            raise RuntimeError(f"{func}: {_soc.name()} does not support data type DT_BFLOAT16 "
                               "(EZ9999: the operator has no bf16 kernel on this SoC)")

    uargs, ukwargs = tree_map(_unwrap, (args, kwargs))
    if torch.Tag.nondeterministic_seeded in func.tags and device is not None:
        out = _with_npu_rng(device, func, uargs, ukwargs)
    else:
        out = func(*uargs, **ukwargs)

    if CHIPS.bad_chips and func._schema.is_mutable:
        _written(func, out)
    if device is None:
        return out
    if not _soc.inf_nan_supported() and func not in _MOVES and func not in _SELECTS and (
            func in _COMPUTE or any(t in func.tags for t in _COMPUTE_TAGS)):
        _saturate(out, flat)
    by_id = {id(x.elem): x for x in npu_in}

    def wrap(o):
        if isinstance(o, torch.Tensor) and not isinstance(o, NPUTensor):
            known = by_id.get(id(o))
            return known if known is not None else NPUTensor(o, device)
        return o

    return tree_map(wrap, out)


def _with_npu_rng(device, func, args, kwargs):
    """Random ops draw from the device's generator, not the host's (torch_npu/npu/random.py keeps one
    generator per device; torch.manual_seed seeds them through manual_seed_all)."""
    gen = CHIPS.generators[CHIPS.current]
    host = torch.default_generator.get_state()
    torch.default_generator.set_state(gen.get_state())
    try:
        return func(*args, **kwargs)
    finally:
        gen.set_state(torch.default_generator.get_state())
        torch.default_generator.set_state(host)


def _saturate(out, inputs) -> None:
    """Saturation mode: an overflowing result is clamped to the dtype's largest finite value (NaN to 0) and
    the float status register records the overflow (torch_npu/npu/utils.py get_npu_overflow_flag reads it on
    SoCs where is_support_inf_nan() is False)."""
    bad_outs = []
    for o in tree_flatten(out)[0]:
        if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel():
            bad = ~torch.isfinite(o)
            if bad.any():
                bad_outs.append(o)
    if not bad_outs:
        return
    for x in inputs:
        if isinstance(x, float) and (x != x or x in (float("inf"), float("-inf"))):
            return
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            data = x.elem if isinstance(x, NPUTensor) else x
            if data.numel() and not torch.isfinite(data).all():
                return  # the bad values came in; this op did not overflow
    CHIPS.overflow = True
    for o in bad_outs:
        big = torch.finfo(o.dtype).max
        o.copy_(torch.nan_to_num(o, nan=0.0, posinf=big, neginf=-big))


def _check_and_unscale(args):
    """torch._amp_foreach_non_finite_check_and_unscale_ on the NPU: Inf/NaN in the gradients where the SoC
    has Inf/NaN mode; on saturation-mode SoCs nothing is non-finite, so the kernel reads the overflow flag
    (torch_npu/npu/amp/grad_scaler.py _unscale_grads_ relies on it: no other check runs there)."""
    grads, found_inf, inv_scale = args
    cpu = [g.elem for g in grads]
    torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_inf.elem, inv_scale.elem)
    if not _soc.inf_nan_supported() and CHIPS.overflow:
        found_inf.elem.fill_(1.0)


# ---- kernels for the PrivateUse1 key (reached when the Python key is excluded or no NPU tensor is in) --

def _room_for(size, dtype, device) -> None:
    index = CHIPS.current
    nbytes = math.prod(size) * (dtype or torch.get_default_dtype()).itemsize
    if CHIPS.allocated[index] + nbytes > CHIPS.hbm - CHIPS.held:
        raise torch.OutOfMemoryError(
            f"NPU out of memory. Tried to allocate {nbytes / 1024**2:.2f} MiB (NPU {index}; "
            f"{CHIPS.hbm / 1024**3:.2f} GiB total capacity; {CHIPS.allocated[index] / 1024**3:.2f} GiB already "
            "allocated)")


def _empty(size, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    _room_for(size, dtype, device)
    cpu = torch.empty(size, dtype=dtype, layout=layout, memory_format=memory_format)
    return NPUTensor(cpu, torch.device(device))


def _empty_strided(size, stride, dtype=None, layout=None, device=None, pin_memory=None):
    _room_for(size, dtype, device)
    return NPUTensor(torch.empty_strided(size, stride, dtype=dtype, layout=layout), torch.device(device))


def _copy_from(self, dst, non_blocking=False):
    _unwrap(dst).copy_(_unwrap(self))
    return dst


def _copy_from_and_resize(self, dst):
    d = _unwrap(dst)
    d.resize_(self.shape)
    d.copy_(_unwrap(self))
    return dst


def _local_scalar_dense(self):
    return _unwrap(self).item()


# ---- autocast on the npu device ------------------------------------------------------------------------
# Core torch registers no AutocastPrivateUse1 kernels; torch_npu registers them in C++ with the lists of
# torch's CUDA autocast (torch_npu/csrc/aten/autocast_mode.cpp): matmuls in the autocast dtype, numerically
# sensitive ops in fp32, everything else falls through.
_LOWER = ["linear", "matmul", "mm", "bmm", "addmm", "addmv", "addbmm", "baddbmm", "chain_matmul", "conv1d",
          "conv2d", "conv3d", "_convolution", "prelu", "scaled_dot_product_attention"]
_FP32 = ["acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
         "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar", "softplus", "layer_norm",
         "group_norm", "frobenius_norm.dim", "nuclear_norm", "cosine_similarity", "poisson_nll_loss",
         "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div", "l1_loss",
         "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "multilabel_margin_loss",
         "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "binary_cross_entropy_with_logits",
         "dist", "pdist", "cdist", "renorm", "logsumexp"]


def _autocast_kernel(opname: str, lower: bool):
    packet, _, overload = opname.partition(".")
    op = getattr(getattr(aten, packet), overload or "default")

    def kernel(*args, **kwargs):
        dtype = torch.get_autocast_dtype("npu") if lower else torch.float32

        def cast(x):
            if isinstance(x, torch.Tensor) and x.is_floating_point() and x.device.type == "npu" and x.dtype != dtype:
                return x.to(dtype)
            return x

        args, kwargs = tree_map(cast, (args, kwargs))
        with _ExcludeDispatchKeyGuard(DispatchKeySet(DispatchKey.AutocastPrivateUse1)):
            return op(*args, **kwargs)

    return kernel


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    def is_available(self) -> bool:
        return CHIPS.count() > 0

    def has_primary_context(self, dev_id) -> bool:
        return CHIPS.initialized

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    def type_(self):
        return torch._C._autograd.DeviceType.PrivateUse1


_LIBS: list[torch.library.Library] = []


def register(device_module) -> None:
    """Make `npu` a device type of this torch (once per process, as the real import does)."""
    from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

    _setup_privateuseone_for_python_backend("npu", device_module, _Hooks(), _Guard())
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("empty.memory_format", _empty, "PrivateUse1")
    lib.impl("empty_strided", _empty_strided, "PrivateUse1")
    lib.impl("_copy_from", _copy_from, "PrivateUse1")
    lib.impl("_copy_from_and_resize", _copy_from_and_resize, "PrivateUse1")
    lib.impl("_local_scalar_dense", _local_scalar_dense, "PrivateUse1")
    for name in _LOWER:
        lib.impl(name, _autocast_kernel(name, True), "AutocastPrivateUse1")
    for name in _FP32:
        try:
            lib.impl(name, _autocast_kernel(name, False), "AutocastPrivateUse1")
        except (AttributeError, RuntimeError):
            pass  # an op this torch does not have
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    _LIBS.extend([lib, fallthrough])
    # Host-side pinned buffers: the chip's host allocator (torch_npu CachingHostAllocator) is not needed to
    # copy here, so pinning is the identity on the host tensor.
    torch.Tensor.pin_memory = lambda self, device=None: self  # type: ignore[method-assign]
    torch.Tensor.is_pinned = lambda self, device=None: False  # type: ignore[method-assign]
