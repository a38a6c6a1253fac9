"""The process group: torchrun's RANK/WORLD_SIZE/LOCAL_RANK, its timeout, and the few collectives we use.

Only SUM reductions: ReduceOp.AVG is not available on HCCL.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as torch_dist

from provisioner.train.config import ConfigError
from provisioner.train.device import DeviceInfo

DEFAULT_TIMEOUT_S = 1800
# Above HCCL's own execution timeout, so a hung collective is reported by HCCL (with its plog) first.
HCCL_MARGIN_S = 300
# HCCL_EXEC_TIMEOUT=0 means "never time out"; the process group then waits a week.
NEVER_S = 7 * 24 * 3600


@dataclass(frozen=True)
class World:
    rank: int
    local_rank: int
    size: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def from_env() -> World:
    return World(
        rank=int(os.environ.get("RANK", "0")),
        local_rank=int(os.environ.get("LOCAL_RANK", "0")),
        size=int(os.environ.get("WORLD_SIZE", "1")),
    )


def hccl_exec_timeout(env: dict | None = None) -> int | None:
    raw = (os.environ if env is None else env).get("HCCL_EXEC_TIMEOUT")
    if raw is None or not raw.strip():
        return None
    if not raw.strip().isdigit():
        raise ConfigError(f"HCCL_EXEC_TIMEOUT={raw!r}: must be a whole number of seconds (0: never time out)")
    return int(raw)


def timeout_s(configured: int | None, dev: DeviceInfo, env: dict | None = None) -> int:
    """The process-group timeout. On the NPU it must exceed HCCL_EXEC_TIMEOUT: torch_npu warns that HCCL's
    plog may not be recorded when the watchdog timeout set by init_process_group is less than or equal to
    the HCCL execution timeout, and treats HCCL_EXEC_TIMEOUT=0 as never (libtorch_npu.so, ProcessGroupHCCL)."""
    exec_s = hccl_exec_timeout(env) if dev.type == "npu" else None
    if configured is not None:
        if exec_s is not None and (exec_s == 0 or configured <= exec_s):
            shown = "0 (never)" if exec_s == 0 else f"{exec_s} s"
            raise ConfigError(f"config: dist_timeout_s: {configured} s does not exceed HCCL_EXEC_TIMEOUT={shown}; "
                              "raise it or leave it unset (then it follows HCCL_EXEC_TIMEOUT)")
        return configured
    if exec_s is None:
        return DEFAULT_TIMEOUT_S
    if exec_s == 0:
        return NEVER_S
    return max(DEFAULT_TIMEOUT_S, exec_s + HCCL_MARGIN_S)


def init(world: World, dev: DeviceInfo, timeout_s: int) -> None:
    if world.size > 1 and not torch_dist.is_initialized():
        kwargs: dict[str, Any] = {"backend": dev.backend, "timeout": datetime.timedelta(seconds=timeout_s)}
        if dev.type == "cuda":
            kwargs["device_id"] = dev.torch_device  # eager NCCL communicator on the right GPU
        torch_dist.init_process_group(**kwargs)


def shutdown() -> None:
    if torch_dist.is_initialized():
        torch_dist.destroy_process_group()


def active() -> bool:
    return torch_dist.is_initialized() and torch_dist.get_world_size() > 1


def all_reduce_sum(values: list[float], dev: DeviceInfo) -> list[float]:
    """Sum a few floats over all ranks, on the device the backend wants."""
    if not active():
        return list(values)
    # fp64 is not reduced by every device backend; fp32 is exact for counts below 2**24.
    dtype = torch.float64 if dev.type == "cpu" else torch.float32
    t = torch.tensor(values, dtype=dtype, device=dev.torch_device)
    torch_dist.all_reduce(t, op=torch_dist.ReduceOp.SUM)
    return t.tolist()


def barrier() -> None:
    if active():
        torch_dist.barrier()


def broadcast_object(obj: Any, src: int = 0) -> Any:
    if not active():
        return obj
    box = [obj]
    torch_dist.broadcast_object_list(box, src=src)
    return box[0]
