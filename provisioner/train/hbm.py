"""The self-test's HBM stress: write a pattern over a large share of the chip's free memory in chunks, read it
back, count the 32-bit words that differ and time both directions (GB/s).

Each worker stresses its own chip; torchrun starts the workers together, so the chips of a host are stressed in
parallel. The sizes are data (selftest.yaml `hbm_stress`, per device kind): a share of the free memory that
`mem_get_info` reports on an accelerator, a fixed small size on the CPU. The pattern of chunk k in pass p is
arange ^ key(k, p), inverted on odd passes, so neighbouring chunks never hold the same words and every bit is
written as 0 and as 1. torch is imported inside the functions that run (the plan is read without it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from provisioner.train import selftest_data

MIB = 1 << 20
WORD = 4  # int32 words
# Temporaries besides the stressed chunks, in chunks: the pattern, a read-back xor and its comparison.
SCRATCH_CHUNKS = 3


@dataclass(frozen=True)
class Plan:
    chunk_bytes: int
    chunks: int
    passes: int

    @property
    def total_bytes(self) -> int:
        return self.chunk_bytes * self.chunks


def parse_mib(text: str) -> int:
    """``--hbm-mib 4096``: the most memory one stress covers, in MiB (ValueError with one line when unreadable)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"--hbm-mib: {text.strip()!r} is not a size in MiB (write e.g. 4096)") from None
    if not 1 <= value <= 1 << 20:
        raise ValueError(f"--hbm-mib: the size must be in [1, 1048576] MiB (got {text.strip()})")
    return int(value * MIB)


def plan(device_type: str, free_bytes: int | None, cap_bytes: int | None = None) -> Plan:
    """The stress for this device kind: a share of `free_bytes` (accelerators) or a fixed size (CPU), at most
    `cap_bytes` (--hbm-mib), in whole chunks; the chunk shrinks until the scratch chunks fit in what the share
    leaves free."""
    row = selftest_data.row("hbm_stress", device_type)
    chunk = int(row["chunk_mib"] * MIB)
    if "total_mib" in row:
        total = int(row["total_mib"] * MIB)
    else:
        if not free_bytes or free_bytes <= 0:
            raise RuntimeError(f"no free memory reported on the {device_type} (mem_get_info)")
        share = float(row["share_of_free"])
        total = int(free_bytes * share)
        chunk = min(chunk, int(free_bytes * (1 - share)) // SCRATCH_CHUNKS)
    if cap_bytes:
        total = min(total, cap_bytes)
    chunk = max(WORD, min(chunk, total) // WORD * WORD)
    return Plan(chunk, max(1, total // chunk), int(row["passes"]))


def _key(chunk: int, pass_no: int) -> int:
    """A signed 32-bit key per chunk and pass; odd passes invert the pattern (x ^ ~k == ~(x ^ k))."""
    k = (chunk * 0x9E3779B1 + 0x5BD1E995) & 0x7FFFFFFF
    return ~k if pass_no % 2 else k


def stress(p: Plan, device: Any, sync: Callable[[], None]) -> dict[str, Any]:
    """Run the plan on `device`: {bytes, chunk_bytes, chunks, passes, mismatches, first_bad (chunk, word,
    pass or None), write_gbps, read_gbps}. Frees everything it allocated before returning."""
    import torch

    words = p.chunk_bytes // WORD
    bufs = [torch.empty(words, dtype=torch.int32, device=device) for _ in range(p.chunks)]
    base = torch.arange(words, dtype=torch.int32, device=device)  # after the chunks: they take the low memory
    mismatches, first_bad = 0, None
    write_s = read_s = 0.0
    try:
        for pass_no in range(p.passes):
            sync()
            start = time.perf_counter()
            for k, buf in enumerate(bufs):
                torch.bitwise_xor(base, _key(k, pass_no), out=buf)
            sync()
            write_s += time.perf_counter() - start
            start = time.perf_counter()
            counts = [int(torch.ne(torch.bitwise_xor(buf, _key(k, pass_no)), base).sum()) for k, buf in enumerate(bufs)]
            sync()
            read_s += time.perf_counter() - start
            for k, n in enumerate(counts):
                if n and first_bad is None:
                    word = int(torch.nonzero(torch.ne(torch.bitwise_xor(bufs[k], _key(k, pass_no)), base))[0, 0])
                    first_bad = {"chunk": k, "word": word, "pass": pass_no}
                mismatches += n
    finally:
        del bufs, base
    moved = p.total_bytes * p.passes
    return {"bytes": p.total_bytes, "chunk_bytes": p.chunk_bytes, "chunks": p.chunks, "passes": p.passes,
            "mismatches": mismatches, "first_bad": first_bad,
            "write_gbps": round(moved / max(write_s, 1e-9) / 1e9, 2),
            "read_gbps": round(moved / max(read_s, 1e-9) / 1e9, 2)}


def free_bytes(dev: Any) -> int | None:
    """Free memory of an accelerator (torch.<npu|cuda>.mem_get_info), None on the CPU."""
    if dev.type == "cpu":
        return None
    import torch

    return int(getattr(torch, dev.type).mem_get_info(dev.index)[0])
