"""The self-test's all-reduce sweep (provisioner/train/allreduce.py, sizes in selftest.yaml): sizes as data,
algbw/busbw per size, the sweep itself over two gloo workers on the CPU with small sizes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from provisioner.train import allreduce
from tests.train.conftest import REPO, train_env


def test_the_accelerator_sweep_reaches_256_mib_and_the_cpu_one_stays_small():
    for kind in ("npu", "cuda"):
        sweep = allreduce.plan(kind)
        assert sweep.sizes[-1] >= 256 * allreduce.MIB and list(sweep.sizes) == sorted(sweep.sizes)
        assert sweep.sizes[0] < 16 * allreduce.MIB < sweep.sizes[-1] and sweep.iters >= 1
    assert allreduce.plan("cpu").sizes[-1] <= 4 * allreduce.MIB
    assert allreduce.plan("npu", (0.0625, 1)).sizes == (64 << 10, 1 << 20)  # --all-reduce-mib replaces them


@pytest.mark.parametrize("text", ["abc", "0", "-1", "1,,2", "1e9"])
def test_bad_sizes_are_one_line(text):
    with pytest.raises(ValueError, match=r"^--all-reduce-mib: "):
        allreduce.parse_mib(text)


def test_busbw_is_algbw_times_the_ring_factor():
    row = allreduce.figures(256 << 20, 0.02, 8)
    assert row["algbw_gbps"] == pytest.approx((256 << 20) / 0.02 / 1e9, rel=1e-4)
    assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * 7 / 8, rel=1e-4)
    text = allreduce.summary([allreduce.figures(1 << 20, 1e-3, 2), row])
    assert text.startswith(f"busbw {row['busbw_gbps']:.2f} GB/s at 256 MiB (per size, GB/s bus: 1 MiB ")


SCRIPT = """
import json, os, torch.distributed as td
from provisioner.train import allreduce
td.init_process_group("gloo")
rank, world = td.get_rank(), td.get_world_size()
allreduce.check_sum(64 << 10, "cpu", rank, world)
rows = allreduce.sweep(allreduce.plan("cpu", (0.0625, 0.25)), "cpu", world, lambda: None)
if rank == 0:
    print(json.dumps(rows))
td.destroy_process_group()
"""


@pytest.mark.slow
def test_the_sweep_over_two_gloo_workers(tmp_path):
    script = tmp_path / "sweep.py"
    script.write_text(SCRIPT)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           str(script)], capture_output=True, text=True, env=train_env(), timeout=180, cwd=str(REPO))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r["bytes"] for r in rows] == [64 << 10, 256 << 10]
    for r in rows:
        assert r["time_us"] > 0 and r["busbw_gbps"] == pytest.approx(r["algbw_gbps"], rel=1e-3)  # 2(N-1)/N = 1
