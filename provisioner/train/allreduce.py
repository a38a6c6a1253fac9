"""The self-test's all-reduce figures: a sum check, then a sweep of message sizes with algbw and busbw per size.

A small all_reduce measures latency, not the links: the sweep's sizes, warm-up and timed iterations per device
kind are data (selftest.yaml), up to 256 MiB on accelerators, and the check reports the bus bandwidth at the
largest size. algbw = bytes / time; busbw = algbw x 2(N-1)/N, what a ring all_reduce moves over each link
(nccl-tests' definition, comparable across world sizes). The slowest rank's time counts. torch is imported
inside the functions that time (the sizes are read and checked without it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from provisioner.train import selftest_data

MIB = 1 << 20
DTYPE_BYTES = 4  # float32: exact for the small integer sums checked


@dataclass(frozen=True)
class Sweep:
    sizes: tuple[int, ...]  # bytes, ascending
    warmup: int
    iters: int


def parse_mib(text: str) -> tuple[float, ...]:
    """``--all-reduce-mib 0.25,1,256``: sizes in MiB (ValueError with one line when unreadable)."""
    out = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise ValueError(f"--all-reduce-mib: {part.strip()!r} is not a size in MiB (write e.g. 1,16,256)") from None
        if not 0 < value <= 64 * 1024:
            raise ValueError(f"--all-reduce-mib: sizes must be in (0, 65536] MiB (got {part.strip()})")
        out.append(value)
    return tuple(out)


def plan(device_type: str, sizes_mib: tuple[float, ...] | None = None) -> Sweep:
    """The sweep for this device kind (selftest.yaml), with the sizes replaced when given."""
    row = selftest_data.row("all_reduce", device_type)
    mib = sizes_mib or tuple(float(x) for x in row["sizes_mib"])
    sizes = sorted({max(DTYPE_BYTES, int(m * MIB) // DTYPE_BYTES * DTYPE_BYTES) for m in mib})
    return Sweep(tuple(sizes), int(row["warmup"]), int(row["iters"]))


def bus_factor(world: int) -> float:
    """Bytes each rank sends per byte reduced in a ring all_reduce: 2(N-1)/N."""
    return 2 * (world - 1) / world


def figures(nbytes: int, seconds: float, world: int) -> dict[str, Any]:
    algbw = nbytes / seconds / 1e9
    return {"bytes": nbytes, "time_us": round(seconds * 1e6, 1), "algbw_gbps": round(algbw, 4),
            "busbw_gbps": round(algbw * bus_factor(world), 4)}


def check_sum(nbytes: int, device: Any, rank: int, world: int) -> None:
    """An all_reduce of (rank + 1) must give N(N+1)/2 in every element."""
    import torch
    import torch.distributed as td

    t = torch.full((nbytes // DTYPE_BYTES,), float(rank + 1), device=device)
    td.all_reduce(t)
    want = world * (world + 1) / 2
    bad = torch.nonzero(t.cpu() != want)
    if bad.numel():
        i = int(bad[0, 0])
        raise RuntimeError(f"all_reduce summed to {float(t[i].cpu())} instead of {want} (element {i})")


def sweep(plan_: Sweep, device: Any, world: int, sync: Any) -> list[dict[str, Any]]:
    """Time ``plan_.iters`` all_reduces per size after ``plan_.warmup`` untimed ones; figures per size."""
    import torch
    import torch.distributed as td

    out = []
    for nbytes in plan_.sizes:
        buf = torch.zeros(nbytes // DTYPE_BYTES, dtype=torch.float32, device=device)  # zeros never overflow
        for _ in range(plan_.warmup):
            td.all_reduce(buf)
        sync()
        td.barrier()
        start = time.perf_counter()
        for _ in range(plan_.iters):
            td.all_reduce(buf)
        sync()
        took = torch.tensor([(time.perf_counter() - start) / plan_.iters], dtype=torch.float32, device=device)
        td.all_reduce(took, op=td.ReduceOp.MAX)
        out.append(figures(nbytes, float(took.cpu()[0]), world))
        del buf
    return out


def summary(rows: list[dict[str, Any]]) -> str:
    """'busbw 18.30 GB/s at 256 MiB (1 MiB 2.10, 16 MiB 9.80, ... GB/s bus)'."""
    def size(n: int) -> str:
        return f"{n / MIB:g} MiB" if n >= MIB else f"{n / 1024:g} KiB" if n >= 1024 else f"{n} B"

    last = rows[-1]
    each = ", ".join(f"{size(r['bytes'])} {r['busbw_gbps']:.2f}" for r in rows)
    return f"busbw {last['busbw_gbps']:.2f} GB/s at {size(last['bytes'])} (per size, GB/s bus: {each})"
