"""All-reduce smoke test across every process torchrun started, before hours go into a run.

    torchrun --nproc-per-node N -m provisioner.launch.collective [--sizes 1M,16M] [--iters 10] [--device auto]
             [--all-gather] [--links 64M]

Each rank picks its device (NPU if torch_npu and CANN work, else CUDA, else
CPU) and the matching backend (hccl, nccl, gloo), checks that an all_reduce
of (rank + 1) sums to N(N+1)/2 everywhere, then times all_reduce over a few
message sizes. Local rank 0 of each node prints per size the time, algorithm bandwidth (bytes /
time) and bus bandwidth (algbw x 2(N-1)/N, the traffic a ring all_reduce puts on
each link, comparable across world sizes), then one JSON line
(`provision.collective/1`). `--all-gather` adds the same sweep of all_gather (busbw = algbw x (N-1)/N),
`--links SIZE` times each ring link (rank i to i+1) alone, so `provision preflight --bandwidth` can name a
slow chip or link. Exit code 1 on a wrong sum (every rank), 2 on bad
arguments. torch is imported inside functions: the host CLI imports this module
only to read its constants.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

SCHEMA = "provision.collective/1"
DTYPE_BYTES = 4  # float32: exact for the small integer sums checked here
# Small messages on CPU (gloo over loopback is slow and the machine is shared);
# larger ones on accelerators, where small messages only show latency.
DEFAULT_SIZES = {"cpu": "64K,1M,4M", "accelerator": "1M,16M,64M,256M"}
DEFAULT_ITERS = {"cpu": 5, "accelerator": 20}
# Signs of an installed CANN toolkit: its set_env.sh exports these, and the
# images put the toolkit in one of these directories.
CANN_ENV = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME", "ASCEND_OPP_PATH")
CANN_DIRS = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann/latest")
_SIZE = re.compile(r"^(\d+)([KMG]?)(?:i?B)?$", re.I)


def parse_size(text: str) -> int:
    m = _SIZE.match(text.strip())
    if not m or int(m[1]) == 0:
        raise ValueError(f"cannot read size {text!r} (write 64K, 1M, 256M, 1G or bytes)")
    return int(m[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[m[2].upper()]


def format_size(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def bus_factor(world: int) -> float:
    """Bytes each rank sends per byte reduced in a ring all_reduce: 2(N-1)/N."""
    return 2 * (world - 1) / world


def expected_sum(world: int) -> float:
    """Sum over ranks of (rank + 1)."""
    return world * (world + 1) / 2


def wrong_values(tensor, world: int) -> tuple[int, float] | None:
    """(index, value) of the first element that is not the expected sum, or None."""
    import torch

    bad = torch.nonzero(tensor != expected_sum(world))
    if bad.numel() == 0:
        return None
    i = int(bad[0, 0])
    return i, float(tensor[i])


def cann_present(environ=os.environ, dirs=CANN_DIRS) -> bool:
    return any(environ.get(k) for k in CANN_ENV) or any(os.path.isdir(d) for d in dirs)


def pick_device(want: str = "auto") -> tuple[str, str]:
    """(device kind, backend): npu/hccl, cuda/nccl or cpu/gloo. Imports torch."""
    cann = cann_present()
    if not cann:
        # torch auto-loads installed device backends at import; torch_npu without
        # CANN then fails the import of torch itself.
        os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    import torch

    if want in ("auto", "npu") and cann:
        try:
            import torch_npu  # noqa: F401 - registers torch.npu

            if torch.npu.is_available() and torch.npu.device_count() > 0:
                return "npu", "hccl"
        except Exception as exc:  # noqa: BLE001 - any failure means "no usable NPU"
            if want == "npu":
                raise SystemExit(f"collective: --device npu: torch_npu does not work here ({exc})") from None
    if want == "npu":
        raise SystemExit("collective: --device npu: no NPU visible (no CANN toolkit, or torch_npu sees no chip)")
    if want in ("auto", "cuda") and torch.cuda.is_available():
        return "cuda", "nccl"
    if want == "cuda":
        raise SystemExit("collective: --device cuda: no CUDA device visible")
    return "cpu", "gloo"


def _sync(kind: str):
    import torch

    if kind == "npu":
        return torch.npu.synchronize
    if kind == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def measure(nbytes: int, *, device, kind: str, world: int, rank: int, iters: int, warmup: int) -> dict:
    """Check one all_reduce of this size, then time `iters` of them (the slowest rank's time counts)."""
    import torch
    import torch.distributed as dist

    sync = _sync(kind)
    n = max(1, nbytes // DTYPE_BYTES)
    data = torch.full((n,), float(rank + 1), dtype=torch.float32, device=device)
    dist.all_reduce(data)
    sync()
    wrong = wrong_values(data.cpu(), world)
    if wrong:
        i, got = wrong
        print(f"collective: rank {rank}: all_reduce of {format_size(n * DTYPE_BYTES)} is wrong at element {i}:"
              f" {got} instead of {expected_sum(world)}", file=sys.stderr, flush=True)
    # Zeros stay zeros, so repeated reductions never overflow.
    buf = torch.zeros(n, dtype=torch.float32, device=device)
    for _ in range(warmup):
        dist.all_reduce(buf)
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    sync()
    took = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float32, device=device)
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    seconds = float(took.item())
    algbw = n * DTYPE_BYTES / seconds / 1e9
    return {
        "bytes": n * DTYPE_BYTES,
        "time_us": round(seconds * 1e6, 1),
        "algbw_gbps": round(algbw, 4),
        "busbw_gbps": round(algbw * bus_factor(world), 4),
        "ok": wrong is None,
    }


def measure_gather(nbytes: int, *, device, kind: str, world: int, rank: int, iters: int, warmup: int) -> dict:
    """all_gather with `nbytes` gathered in all (each rank gives its share), checked once, then timed; busbw is
    algbw x (N-1)/N (hccl_test and nccl-tests count the same way)."""
    import torch
    import torch.distributed as dist

    sync = _sync(kind)
    n = max(1, nbytes // DTYPE_BYTES // world)
    mine = torch.full((n,), float(rank + 1), dtype=torch.float32, device=device)
    outs = [torch.zeros(n, dtype=torch.float32, device=device) for _ in range(world)]
    dist.all_gather(outs, mine)
    sync()
    ok = all(bool((o.cpu() == float(r + 1)).all()) for r, o in enumerate(outs))
    for _ in range(warmup):
        dist.all_gather(outs, mine)
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_gather(outs, mine)
    sync()
    took = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float32, device=device)
    dist.all_reduce(took, op=dist.ReduceOp.MAX)
    seconds = float(took.item())
    total = n * world * DTYPE_BYTES
    algbw = total / seconds / 1e9
    return {"bytes": total, "time_us": round(seconds * 1e6, 1), "algbw_gbps": round(algbw, 4),
            "busbw_gbps": round(algbw * (world - 1) / world, 4), "ok": ok}


def measure_links(nbytes: int, *, device, kind: str, world: int, rank: int, iters: int) -> list[dict]:
    """Each link of the ring (rank i to i+1) alone: the pair broadcasts `nbytes` while the others wait, so a slow
    chip or link shows in the pairs it is part of. busbw of a two-rank broadcast is its algbw."""
    import torch
    import torch.distributed as dist

    sync = _sync(kind)
    n = max(1, nbytes // DTYPE_BYTES)
    pairs = [(i, (i + 1) % world) for i in range(world if world > 2 else 1)]
    times = torch.zeros(len(pairs), dtype=torch.float32, device=device)
    for k, (a, b) in enumerate(pairs):
        group = dist.new_group(sorted((a, b)))  # every rank takes part in making every group
        if rank in (a, b):
            buf = torch.zeros(n, dtype=torch.float32, device=device)
            dist.broadcast(buf, src=a, group=group)
            sync()
            start = time.perf_counter()
            for _ in range(iters):
                dist.broadcast(buf, src=a, group=group)
            sync()
            if rank == a:
                times[k] = (time.perf_counter() - start) / iters
        dist.barrier()
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    out = []
    for (a, b), t in zip(pairs, times.cpu().tolist(), strict=True):
        out.append({"a": a, "b": b, "bytes": n * DTYPE_BYTES, "time_us": round(t * 1e6, 1),
                    "busbw_gbps": round(n * DTYPE_BYTES / t / 1e9, 4) if t > 0 else 0.0})
    return out


def table(doc: dict) -> str:
    head = (f"all_reduce: {doc['world_size']} ranks ({doc['local_world_size']} per node), backend {doc['backend']}"
            f" on {doc['device']}, {doc['dtype']}, {doc['iters']} iterations per size")
    rows = [f"{'size':>10}  {'time_us':>10}  {'algbw_GB/s':>10}  {'busbw_GB/s':>10}  sum"]
    for r in doc["results"]:
        rows.append(f"{format_size(r['bytes']):>10}  {r['time_us']:>10.1f}  {r['algbw_gbps']:>10.3f}"
                    f"  {r['busbw_gbps']:>10.3f}  {'ok' if r['ok'] else 'WRONG'}")
    for r in doc.get("all_gather") or []:
        rows.append(f"{'gather ' + format_size(r['bytes']):>10}  {r['time_us']:>10.1f}  {r['algbw_gbps']:>10.3f}"
                    f"  {r['busbw_gbps']:>10.3f}  {'ok' if r['ok'] else 'WRONG'}")
    for r in doc.get("links") or []:
        rows.append(f"{'link ' + str(r['a']) + '-' + str(r['b']):>10}  {r['time_us']:>10.1f}  {'':>10}"
                    f"  {r['busbw_gbps']:>10.3f}")
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> int:
    import argparse  # here: `provision launch` imports this module for SCHEMA on its way to the container's start

    ap = argparse.ArgumentParser(prog="python -m provisioner.launch.collective", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", help="Comma-separated message sizes (default: 64K,1M,4M on CPU; 1M..256M on NPU/GPU).")
    ap.add_argument("--iters", type=int, help="Timed all_reduces per size (default: 5 on CPU, 20 on NPU/GPU).")
    ap.add_argument("--warmup", type=int, default=2, help="Untimed all_reduces per size first.")
    ap.add_argument("--device", choices=["auto", "npu", "cuda", "cpu"], default="auto")
    ap.add_argument("--all-gather", action="store_true", help="Also sweep all_gather over the same sizes.")
    ap.add_argument("--links", metavar="SIZE", help="Also time each ring link (rank i to i+1) alone with this size.")
    args = ap.parse_args(argv)
    if (args.iters is not None and args.iters < 1) or args.warmup < 0:
        ap.error("--iters must be at least 1 and --warmup at least 0")

    kind, backend = pick_device(args.device)
    group = "cpu" if kind == "cpu" else "accelerator"
    try:
        sizes = [parse_size(s) for s in (args.sizes or DEFAULT_SIZES[group]).split(",")]
        link_size = parse_size(args.links) if args.links else None
    except ValueError as exc:
        ap.error(str(exc))
    iters = args.iters or DEFAULT_ITERS[group]

    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    device = torch.device("cpu")
    if kind != "cpu":
        getattr(torch, kind).set_device(local_rank)
        device = torch.device(kind, local_rank)
    dist.init_process_group(backend=backend)
    try:
        results = [measure(s, device=device, kind=kind, world=world, rank=rank, iters=iters, warmup=args.warmup)
                   for s in sizes]
        gathers = [measure_gather(s, device=device, kind=kind, world=world, rank=rank, iters=iters,
                                  warmup=args.warmup) for s in sizes] if args.all_gather else []
        links = measure_links(link_size, device=device, kind=kind, world=world, rank=rank, iters=iters) \
            if link_size and world > 1 else []
        # Every rank learns whether any rank saw a wrong sum, so all exit alike.
        ok = torch.tensor([1.0 if all(r["ok"] for r in results + gathers) else 0.0], device=device)
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        all_ok = bool(ok.item() == 1.0)
    finally:
        dist.destroy_process_group()
    doc = {
        "schema": SCHEMA,
        "status": "ok" if all_ok else "wrong-sum",
        "op": "all_reduce",
        "backend": backend,
        "device": kind,
        "world_size": world,
        "local_world_size": local_world,
        "dtype": "float32",
        "iters": iters,
        "results": results,
        "busbw_peak_gbps": max(r["busbw_gbps"] for r in results),
    }
    if gathers:
        doc["all_gather"] = gathers
    if links:
        doc["links"] = links
    if local_rank == 0:
        # Every node's first worker reports (the numbers are global), so each node's launch sees the result.
        print(table(doc), flush=True)
        print(json.dumps(doc, separators=(",", ":")), flush=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
