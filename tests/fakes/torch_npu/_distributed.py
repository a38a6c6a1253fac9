"""The `hccl` process-group backend, carried by Gloo on the wrapped CPU data.

torch_npu registers ProcessGroupHCCL as backend "hccl" for the npu device
(torch_npu/distributed/__init__.py: torch.distributed.Backend.register_backend("hccl", ...,
devices=["npu"])). Collectives here take NPU tensors and reduce their CPU data in place through a Gloo group
built on the same store. HCCL has no ReduceOp.AVG (LLaMA-Factory's NPU accelerator sums and divides for that
reason), so AVG is refused as the real backend refuses it.

A slow link is simulated at this level: a worker whose global rank is in FAKE_NPU_SLOW_RANKS (comma-separated)
waits FAKE_NPU_SLOW_MS (default 5) before each allreduce, broadcast and allgather it joins, as a chip behind a
slow HCCS or RoCE link holds up every collective it is part of.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup

from ._backend import NPUTensor


def _slow_link() -> None:
    slow = {r.strip() for r in os.environ.get("FAKE_NPU_SLOW_RANKS", "").split(",") if r.strip()}
    if os.environ.get("RANK", "0") in slow:
        time.sleep(float(os.environ.get("FAKE_NPU_SLOW_MS", "5")) / 1000)


def _cpu(tensors):
    out = []
    for t in tensors:
        if not isinstance(t, NPUTensor):
            raise RuntimeError(f"ProcessGroupHCCL: tensors must be on the NPU, got {t.device}")
        out.append(t.elem)
    return out


class _Done(dist.distributed_c10d.Work if hasattr(dist.distributed_c10d, "Work") else object):
    def __init__(self, result=None) -> None:
        super().__init__()
        self._result = result or []

    def wait(self, timeout: timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def result(self):
        return self._result

    def get_future(self):
        fut = torch.futures.Future()
        fut.set_result(self._result)
        return fut


class ProcessGroupHCCL(ProcessGroup):
    def __init__(self, store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("fake-hccl", store), rank, size, timeout)

    def getBackendName(self) -> str:  # noqa: N802  (torch's spelling)
        return "hccl"

    @property
    def name(self) -> str:
        return "hccl"

    def _reduce_op(self, opts):
        if opts.reduceOp == dist.ReduceOp.AVG:
            raise RuntimeError("ProcessGroupHCCL: Unsupported ReduceOp AVG")
        return opts

    def allreduce(self, tensors, opts=None):
        if opts is None or isinstance(opts, dist.ReduceOp) or hasattr(opts, "value"):
            op = opts if opts is not None and not isinstance(opts, dist.AllreduceOptions) else dist.ReduceOp.SUM
            opts = dist.AllreduceOptions()
            opts.reduceOp = op
        self._reduce_op(opts)
        _slow_link()
        self._gloo.allreduce(_cpu(tensors), opts).wait()
        return _Done(tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        _slow_link()
        self._gloo.broadcast(_cpu(tensors), opts).wait()
        return _Done(tensors)

    def allgather(self, output_lists, inputs, opts=None):
        outs = [_cpu(lst) for lst in output_lists]
        _slow_link()
        self._gloo.allgather(outs, _cpu(inputs), opts or dist.AllgatherOptions()).wait()
        return _Done(output_lists)

    def _allgather_base(self, output, inp, opts=None):
        self._gloo._allgather_base(_cpu([output])[0], _cpu([inp])[0], opts or dist.AllgatherOptions()).wait()
        return _Done([output])

    def reduce_scatter(self, outputs, input_lists, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        self._reduce_op(opts)
        self._gloo.reduce_scatter(_cpu(outputs), [_cpu(lst) for lst in input_lists], opts).wait()
        return _Done(outputs)

    def barrier(self, opts=None):
        self._gloo.barrier(opts or dist.BarrierOptions()).wait()
        return _Done()

    def size(self) -> int:
        return self._gloo.size()

    def rank(self) -> int:
        return self._gloo.rank()


def _create(store, rank, size, timeout):
    return ProcessGroupHCCL(store, rank, size, timeout)


def register() -> None:
    if "hccl" not in dist.Backend.backend_list:
        dist.Backend.register_backend("hccl", _create, devices=["npu"])
