"""Device detection (NPU, then CUDA, then CPU), precision choice and device-side state.

``prepare_env`` must run before the first ``import torch``: with torch_npu
installed but no CANN toolkit, torch's backend autoload fails on a missing
libhccl.so, so autoload is switched off and torch_npu is imported explicitly
(and guarded) only when an NPU may be there.
"""

from __future__ import annotations

import contextlib
import os
import random
import resource
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.train.ascend import SocFamily, soc_family
from provisioner.train.config import ConfigError

_CANN_DIRS = ("/usr/local/Ascend/ascend-toolkit", "/usr/local/Ascend/cann")


def cann_present() -> bool:
    if os.environ.get("ASCEND_HOME_PATH") or os.environ.get("ASCEND_TOOLKIT_HOME"):
        return True
    return any(Path(d).is_dir() for d in _CANN_DIRS)


def prepare_env() -> None:
    """Environment that must be in place before torch is imported."""
    if not cann_present():
        os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
        _hide_torch_npu()


def _hide_torch_npu() -> None:
    """Make an installed torch_npu invisible when CANN is absent.

    transformers' is_torch_npu_available() finds the package and then imports it
    unguarded, which fails on libhccl.so in a CPU-only container (the official
    image without a mounted driver, a laptop). A None entry in sys.modules makes
    importlib.util.find_spec() answer None and `import torch_npu` a clean
    ImportError, so every library takes its no-NPU path.
    """
    import importlib.util
    import sys

    if "torch_npu" not in sys.modules and importlib.util.find_spec("torch_npu") is not None:
        sys.modules["torch_npu"] = None  # type: ignore[assignment]


def _npu_available() -> bool:
    if not cann_present():
        return False
    try:
        import torch
        import torch_npu  # noqa: F401  (registers torch.npu)

        return bool(torch.npu.is_available())
    except Exception:  # a CPU-only container with torch_npu installed can raise anything here
        return False


@dataclass(frozen=True)
class DeviceInfo:
    type: str  # "npu" | "cuda" | "cpu"
    index: int
    backend: str  # process-group backend: "hccl" | "nccl" | "gloo"
    name: str  # device model, e.g. "Ascend910B3", "NVIDIA H200", "cpu"
    # NPU only: the SoC's family (ascend.yaml; None when the SoC is not listed), whether the chip has
    # Inf/NaN mode (False: saturation mode, overflow is only visible in the float status flag), and the
    # compile mode in force (True: online JIT compilation, False: binary operators).
    soc_family: SocFamily | None = None
    inf_nan: bool | None = None
    jit_compile: bool | None = None

    @property
    def torch_device(self) -> Any:
        import torch

        return torch.device("cpu") if self.type == "cpu" else torch.device(self.type, self.index)


def detect(local_rank: int, jit_compile: bool | str = "auto") -> DeviceInfo:
    """Pick the device for this process; ``local_rank`` indexes the visible devices."""
    import torch

    if _npu_available():
        count = torch.npu.device_count()
        _check_rank(local_rank, count, "NPU", "ASCEND_RT_VISIBLE_DEVICES")
        torch.npu.set_device(local_rank)
        return _npu_info(local_rank, jit_compile)
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        _check_rank(local_rank, count, "CUDA device", "CUDA_VISIBLE_DEVICES")
        torch.cuda.set_device(local_rank)
        return DeviceInfo("cuda", local_rank, "nccl", torch.cuda.get_device_name(local_rank))
    return DeviceInfo("cpu", 0, "gloo", "cpu")


def _npu_info(index: int, jit_compile: bool | str) -> DeviceInfo:
    import torch
    import torch_npu

    name = str(torch.npu.get_device_name(index))
    family = soc_family(name)
    # auto: the chip family's mode (binary operators from Atlas A2 on; online compilation on the
    # first-generation 910, which has no binary operator packages); unknown chips keep CANN's default.
    mode = (family.jit_compile if family is not None else None) if jit_compile == "auto" else bool(jit_compile)
    if mode is not None:
        torch.npu.set_compile_mode(jit_compile=mode)
    in_force = not torch_npu.npu.is_jit_compile_false() if hasattr(torch_npu.npu, "is_jit_compile_false") else mode
    return DeviceInfo("npu", index, "hccl", name, family, bool(torch_npu.npu.utils.is_support_inf_nan()), in_force)


def _check_rank(local_rank: int, count: int, what: str, env: str) -> None:
    if local_rank >= count:
        shown = os.environ.get(env, "<unset>")
        raise ConfigError(
            f"LOCAL_RANK {local_rank} needs {local_rank + 1} {what}s but {count} visible ({env}={shown})"
        )


@dataclass(frozen=True)
class Precision:
    name: str  # "bf16" | "fp16" | "fp32"
    use_scaler: bool  # fp16 needs dynamic loss scaling

    @property
    def dtype(self) -> Any:
        import torch

        return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[self.name]


def bf16_supported(dev: DeviceInfo) -> bool:
    import torch

    if dev.type == "npu":
        return bool(torch.npu.is_bf16_supported())
    if dev.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return True


def choose_precision(requested: str, dev: DeviceInfo) -> Precision:
    """bf16 where the chip has it, else fp16 with loss scaling (first-generation 910, V100); fp32 on CPU."""
    if requested == "auto":
        if dev.type == "cpu":
            return Precision("fp32", False)
        return Precision("bf16", False) if bf16_supported(dev) else Precision("fp16", True)
    if requested == "bf16" and not bf16_supported(dev):
        raise ConfigError(f"config: precision: bf16 is not supported on {dev.name}; use fp16 or auto")
    if requested == "fp16" and dev.type == "cpu":
        raise ConfigError("config: precision: fp16 is not supported on CPU; use fp32, bf16 or auto")
    return Precision(requested, requested == "fp16")


def autocast(dev: DeviceInfo, prec: Precision) -> contextlib.AbstractContextManager[Any]:
    import torch

    if prec.name == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=dev.type, dtype=prec.dtype)


def grad_scaler(dev: DeviceInfo) -> Any:
    """Dynamic loss scaler for fp16."""
    if dev.type == "npu":
        from torch_npu.npu import amp

        return amp.GradScaler()
    import torch

    return torch.amp.GradScaler(dev.type)


def _module(dev: DeviceInfo) -> Any:
    import torch

    return getattr(torch, dev.type)


def synchronize(dev: DeviceInfo) -> None:
    if dev.type != "cpu":
        _module(dev).synchronize()


def reset_peak_memory(dev: DeviceInfo) -> None:
    if dev.type != "cpu":
        _module(dev).reset_peak_memory_stats()


def peak_memory_gib(dev: DeviceInfo) -> float:
    """Peak allocated device memory; on CPU the process's peak resident set."""
    if dev.type == "cpu":
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2  # KiB on Linux
    return _module(dev).max_memory_allocated() / 1024**3


def seed_all(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds CUDA and, with torch_npu loaded, the NPU


def rng_state(dev: DeviceInfo) -> dict[str, Any]:
    import numpy as np
    import torch

    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    # Plain containers and tensors only, so the file loads with weights_only=True.
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": (kind, torch.from_numpy(np.asarray(keys).astype(np.int64)), pos, has_gauss, gauss),
        "cpu": torch.get_rng_state(),
    }
    if dev.type != "cpu":
        state[dev.type] = _module(dev).get_rng_state()
    return state


def set_rng_state(dev: DeviceInfo, state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    kind, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["cpu"])
    if dev.type != "cpu" and dev.type in state:
        _module(dev).set_rng_state(state[dev.type])


def npu_facts(dev: DeviceInfo, max_seqs: int | None) -> dict[str, Any] | None:
    """The NPU's traits the run went by (summary.json); None off the NPU."""
    if dev.type != "npu":
        return None
    return {
        "soc_family": dev.soc_family.id if dev.soc_family else None,
        "inf_nan": dev.inf_nan,
        "jit_compile": dev.jit_compile,
        "max_seqs_per_batch": max_seqs,
    }
