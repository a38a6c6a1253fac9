"""torch.npu (= torch_npu.npu): devices, memory, RNG, compile mode, autocast helpers.

Mirrors the public functions of torch_npu/npu/__init__.py, utils.py, memory.py, random.py, streams.py,
npu_config.py and autocast_utils.py that the trainer, transformers, accelerate and torch itself call.
"""

from __future__ import annotations

import contextlib

import torch

from .. import _backend, _soc
from .._backend import CHIPS, check_device, device_index
from . import amp, utils  # noqa: F401  (torch_npu.npu.amp, torch_npu.npu.utils)
from .streams import Event, Stream, current_stream, default_stream, set_stream, stream  # noqa: F401
from .utils import (  # noqa: F401
    clear_npu_overflow_flag,
    get_npu_overflow_flag,
    get_soc_version,
    is_bf16_supported,
    is_support_inf_nan,
    npu_check_overflow,
)


def _lazy_init() -> None:
    """torch_npu/npu/__init__.py _lazy_init: the first device call initialises the runtime, which reads the
    SoC name (an unknown one fails here, as SetSocVersion does)."""
    if not CHIPS.initialized:
        _soc.name()
        CHIPS.initialized = True


def is_initialized() -> bool:
    return CHIPS.initialized


def init() -> None:
    _lazy_init()


def is_available() -> bool:
    """torch_npu/npu/__init__.py is_available: device_count() > 0."""
    return device_count() > 0


def device_count() -> int:
    return CHIPS.count()


def set_device(device) -> None:
    """torch_npu/npu/utils.py set_device."""
    index = device_index(device)
    if index >= 0:
        _lazy_init()
        check_device(index)
        CHIPS.current = index


def current_device() -> int:
    _lazy_init()
    return CHIPS.current


class device(contextlib.ContextDecorator):
    """torch_npu/npu/utils.py device: select a device for a block."""

    def __init__(self, index) -> None:
        self.index = device_index(index)
        self.prev = -1

    def __enter__(self):
        self.prev = CHIPS.current
        if self.index >= 0:
            check_device(self.index)
            CHIPS.current = self.index
        return self

    def __exit__(self, *exc) -> bool:
        CHIPS.current = self.prev
        return False


def get_device_name(device_name=None) -> str:
    """torch_npu/npu/__init__.py get_device_name: the SoC name (aclrtGetSocName), e.g. "Ascend910B3"."""
    index = device_index(device_name)
    if index < 0 or index >= device_count():
        raise AssertionError("Invalid device id")
    _lazy_init()
    return _soc.name()


class _Properties:
    def __init__(self) -> None:
        self.name = _soc.name()
        self.total_memory = CHIPS.hbm


def get_device_properties(device_name=None) -> _Properties:
    index = device_index(device_name)
    if index < 0 or index >= device_count():
        raise AssertionError("Invalid device id")
    _lazy_init()
    return _Properties()


def synchronize(device=None) -> None:
    _lazy_init()


# ---- memory (torch_npu/npu/memory.py) -----------------------------------------------------------------

def memory_allocated(device=None) -> int:
    return CHIPS.allocated[device_index(device)]


def max_memory_allocated(device=None) -> int:
    return CHIPS.peak[device_index(device)]


def memory_reserved(device=None) -> int:
    return memory_allocated(device)


def max_memory_reserved(device=None) -> int:
    return max_memory_allocated(device)


def reset_peak_memory_stats(device=None) -> None:
    i = device_index(device)
    CHIPS.peak[i] = CHIPS.allocated[i]


reset_max_memory_allocated = reset_peak_memory_stats


def mem_get_info(device=None) -> tuple[int, int]:
    i = device_index(device)
    return CHIPS.hbm - CHIPS.held - CHIPS.allocated[i], CHIPS.hbm


def memory_stats(device=None) -> dict:
    i = device_index(device)
    return {"allocated_bytes.all.current": CHIPS.allocated[i], "allocated_bytes.all.peak": CHIPS.peak[i]}


def empty_cache() -> None:
    pass


# ---- RNG (torch_npu/npu/random.py): one generator per device; states are host ByteTensors --------------

def get_rng_state(device="npu") -> torch.Tensor:
    return CHIPS.generators[device_index(device)].get_state()


def set_rng_state(new_state: torch.Tensor, device="npu") -> None:
    if not isinstance(new_state, torch.Tensor) or new_state.dtype != torch.uint8 or new_state.device.type != "cpu":
        raise TypeError("RNG state must be a torch.ByteTensor")
    CHIPS.generators[device_index(device)].set_state(new_state.clone())


def get_rng_state_all() -> list[torch.Tensor]:
    return [g.get_state() for g in CHIPS.generators]


def set_rng_state_all(new_states) -> None:
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def manual_seed(seed) -> None:
    CHIPS.generators[CHIPS.current].manual_seed(int(seed))


def manual_seed_all(seed) -> None:
    for g in CHIPS.generators:
        g.manual_seed(int(seed))


def seed() -> None:
    CHIPS.generators[CHIPS.current].seed()


def seed_all() -> None:
    for g in CHIPS.generators:
        g.seed()


def initial_seed() -> int:
    return CHIPS.generators[CHIPS.current].initial_seed()


def _is_in_bad_fork() -> bool:
    return False


# ---- compile mode (torch_npu/npu/npu_config.py) ---------------------------------------------------------

def set_compile_mode(jit_compile=False) -> None:
    CHIPS.jit_compile = bool(jit_compile)


def is_jit_compile_false() -> bool:
    """npu_config.py is_jit_compile_false: True when online compilation is off (set, or the SoC default)."""
    mode = CHIPS.jit_compile if CHIPS.jit_compile is not None else _soc.jit_compile_default()
    return not mode


# ---- autocast helpers (torch_npu/npu/autocast_utils.py; torch.autocast asks get_amp_supported_dtype) ----

def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("npu")


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("npu")


def _register() -> None:
    import sys

    _backend.register(sys.modules[__name__])
