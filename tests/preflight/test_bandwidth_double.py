"""HCCL bandwidth judged on the torch_npu double: the collective sweep (all_reduce, all_gather, each ring link
alone) runs under torchrun on four `npu` workers over the double's hccl backend, one worker behind a
simulated slow link (FAKE_NPU_SLOW_RANKS); preflight fails the sweep and names that rank."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.preflight import bandwidth

pytestmark = pytest.mark.slow
FAKES = Path(__file__).resolve().parents[1] / "fakes"
TORCHRUN = str(Path(sys.executable).parent / "torchrun")


def _sweep(tmp_path, slow: str) -> dict:
    cann = tmp_path / "cann"
    cann.mkdir(exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(FAKES), os.getcwd()]),
           "ASCEND_HOME_PATH": str(cann), "FAKE_NPU_COUNT": "4", "FAKE_NPU_SLOW_RANKS": slow,
           "FAKE_NPU_SLOW_MS": "20"}
    proc = subprocess.run([TORCHRUN, "--nproc-per-node", "4", "--standalone", "-m", "provisioner.launch.collective",
                           "--device", "npu", "--sizes", "256K", "--iters", "3", "--warmup", "1", "--all-gather",
                           "--links", "256K"], capture_output=True, text=True, timeout=300, env=env,
                          cwd=str(Path(__file__).resolve().parents[2]))
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith('{"schema"'))
    return json.loads(line)


def test_a_slow_link_fails_the_sweep_and_names_its_rank(tmp_path):
    doc = _sweep(tmp_path, slow="2")
    assert doc["backend"] == "hccl" and doc["device"] == "npu" and doc["world_size"] == 4
    assert [r["bytes"] for r in doc["all_gather"]] == [256 << 10] and all(r["ok"] for r in doc["all_gather"])
    links = {(x["a"], x["b"]): x["busbw_gbps"] for x in doc["links"]}
    assert set(links) == {(0, 1), (1, 2), (2, 3), (3, 0)}
    # the links through rank 2 wait 20 ms per broadcast; the others do not
    assert max(links[(1, 2)], links[(2, 3)]) * 5 < min(links[(0, 1)], links[(3, 0)])
    # a floor between the two (a test row: the shipped table has none without a published figure)
    floor = int(1000 * (links[(0, 1)] * links[(1, 2)]) ** 0.5)
    rows = [{"id": "test-floor", "topology": "hccs-8-a2", "op": op, "min_bytes": 1, "busbw_min_mbps": floor}
            for op in ("all_reduce", "all_gather")]
    got = bandwidth.judge(doc, rows, "hccs-8-a2")
    assert got["status"] == "fail" and got["chips"] == ["rank 2"]
    assert "all_reduce 256 KiB" in got["message"] and "all_gather 256 KiB" in got["message"]
    assert "slow: link 1-2" in got["message"] and "link 2-3" in got["message"]
    assert got["message"].endswith("in every slow link: rank 2")
