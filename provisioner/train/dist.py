"""The process group: torchrun's RANK/WORLD_SIZE/LOCAL_RANK, and the few collectives we use.

Only SUM reductions: ReduceOp.AVG is not available on HCCL.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as torch_dist

from provisioner.train.device import DeviceInfo


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
