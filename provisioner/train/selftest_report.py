"""What the self-test's workers share and report: one Result per check and worker, the fix for a known
failure, the store exchange between workers (which works whether or not they can all join a process group),
and rank 0's `provision.selftest/1` document and its lines (provisioner/train/selftest.py runs the checks)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from provisioner.version import stamped

SCHEMA = "provision.selftest/1"
CHECKS = ("npu", "matmul", "hbm", "attention", "fused-optimizer", "all-reduce", "train-steps")
# Checks each worker runs on its own chip whose figures the document keeps per worker.
PER_CHIP = ("hbm",)
# Known failures and what fixes them, matched against the error text (first hit wins).
FIXES = (
    (r"libhccl|libascendcl|libascend_hal|libc_sec|cannot open shared object",
     "CANN or driver libraries are missing: run in the image (its entrypoint sources set_env.sh) with the driver"
     " mounted (provision launch maps /usr/local/Ascend/driver)"),
    (r"500001", "ACL failed to initialise (500001); with CANN before 9.0 this is numpy 2: install numpy<2 (images"
                " built by provision pin numpy by the stack's CANN)"),
    (r"sees no NPU|107001|Invalid device|needs \d+ NPUs", "the chip is not visible: map it (provision launch --devices) and keep"
                                              " ASCEND_RT_VISIBLE_DEVICES unset or ascending from 0"),
    (r"507033|driver", "host driver and CANN do not fit: provision audit names the driver this CANN needs"),
    (r"config: precision", "set precision: auto (bf16 where the chip has it, else fp16 with loss scaling; fp32 on CPU)"),
    (r"DT_BFLOAT16|bf16 is not supported", "this chip has no bf16: set precision: fp16 or auto"),
    (r"npu_fusion_attention|flash", "set attn_implementation: sdpa (or auto)"),
    (r"set_to_none", "the trainer must zero the fused optimizer's gradients, not free them: update provision"),
    (r"out of memory", "the chip's memory is taken: stop other processes on it (npu-smi info shows them)"),
    (r"EI0006|socket|Connection|timed out|Timeout|rendezvous",
     "the workers could not connect: check HCCL_IF_IP / --socket-ifname, free port 16666 (HCCL_IF_BASE_PORT) and"
     " raise HCCL_CONNECT_TIMEOUT"),
    # A strategy refused with the way forward (train/requirements.py, zero.check_supported) names it.
    (r"use strategy: (\w+)", r"set strategy: \1 in the config (the way forward the error names)"),
)


@dataclass
class Result:
    id: str
    status: str  # ok | fail | n/a
    detail: str = ""
    error: str | None = None
    fix: str | None = None
    seconds: float = 0.0
    rank: int = 0
    figures: dict | None = None  # measured numbers a check reports besides its line (all-reduce: per size; hbm)


def fix_for(error: str, default: str) -> str:
    for pattern, fix in FIXES:
        found = re.search(pattern, error, re.IGNORECASE)
        if found:
            return found.expand(fix)
    return default


class Exchange:
    """Small JSON values shared between the workers through the store of torchrun's rendezvous
    (MASTER_ADDR/MASTER_PORT), with bounded waits: works whether or not every worker can join a process group.
    (Without torchrun's agent store, rank 0 hosts a multi-tenant store that the process group later shares.)"""

    def __init__(self, world: Any, timeout_s: int) -> None:
        import datetime

        import torch.distributed as td

        self.world = world
        timeout = datetime.timedelta(seconds=timeout_s)
        store, _, _ = next(td.rendezvous("env://", world.rank, world.size, timeout=timeout))
        # torchrun's store lives as long as torchrun: keep a restarted attempt from reading the last one's keys.
        attempt = f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        self.store = td.PrefixStore(f"provision-selftest/{attempt}/", store)

    def share(self, name: str, value: Any, ranks: Any, wait_s: int) -> dict[int, Any]:
        """Post this rank's value and collect those of `ranks` that arrive within wait_s seconds."""
        import datetime

        self.store.set(f"{name}/{self.world.rank}", json.dumps(value))
        keys = {r: f"{name}/{r}" for r in ranks}
        try:
            self.store.wait(list(keys.values()), datetime.timedelta(seconds=wait_s))
        except Exception:  # noqa: BLE001 - a timeout: report the ranks that answered
            pass
        return {r: json.loads(self.store.get(k)) for r, k in keys.items() if self.store.check([k])}

    def done(self, rank: int) -> None:
        import datetime

        try:
            if rank == 0:
                self.store.set("printed", "1")
            else:
                self.store.wait(["printed"], datetime.timedelta(seconds=60))
        except Exception:  # noqa: BLE001 - rank 0 is gone: nothing left to wait for
            pass


def gather(results: list[Result]) -> list[list[Result]]:
    """Every rank's results on every rank (when a process group is up), else this rank's."""
    from provisioner.train import dist

    if not dist.active():
        return [results]
    import torch.distributed as td

    box: list[Any] = [None] * td.get_world_size()
    td.all_gather_object(box, [asdict(r) for r in results])
    return [[Result(**r) for r in rank] for rank in box]


def document(per_rank: list[list[Result]], world_size: int) -> dict:
    checks = []
    for i, name in enumerate(CHECKS):
        rows = [rank[i] for rank in per_rank if i < len(rank)]
        failed = [r for r in rows if r.status == "fail"]
        first = failed[0] if failed else rows[0]
        figures = first.figures
        if name in PER_CHIP:  # one chip per worker: every worker's figures, not only the first's
            chips = [{"rank": r.rank, **r.figures} for r in rows if r.figures]
            figures = {"chips": chips} if chips else None
        checks.append({"id": name, "status": first.status, "detail": first.detail, "error": first.error,
                       "fix": first.fix, "seconds": max(r.seconds for r in rows),
                       "ranks_failed": sorted(r.rank for r in failed), "figures": figures})
    status = "failed" if any(c["status"] == "fail" for c in checks) else "ok"
    return stamped({"schema": SCHEMA, "status": status, "world_size": world_size, "checks": checks,
                    "versions": versions()})


# What a report from a real host needs beside the errors: the libraries that decided the checks.
REPORTED = ("torch", "torch_npu", "transformers", "peft", "deepspeed", "numpy")


def versions() -> dict[str, str | None]:
    """The installed version of each library in REPORTED (None: not installed)."""
    from provisioner.train.ascend import installed_version

    return {dist: installed_version(dist) for dist in REPORTED}


def lines(doc: dict) -> list[str]:
    out = []
    for c in doc["checks"]:
        mark = {"ok": "ok  ", "fail": "FAIL", "n/a": "n/a "}[c["status"]]
        text = c["error"] if c["status"] == "fail" else c["detail"]
        ranks = f" (ranks {','.join(map(str, c['ranks_failed']))})" if c["status"] == "fail" and doc["world_size"] > 1 else ""
        out.append(f"{mark}  {c['id']:<16} {text}{ranks}")
        if c["status"] == "fail":
            out.append(f"      {'':<16} fix: {c['fix']}")
    failed = sum(c["status"] == "fail" for c in doc["checks"])
    verdict = f"FAILED ({failed} of {len(doc['checks'])} checks)" if failed else "passed"
    workers = f"{doc['world_size']} worker" + ("s" if doc["world_size"] > 1 else "")
    out.append(f"self-test {verdict} on {workers}")
    return out
