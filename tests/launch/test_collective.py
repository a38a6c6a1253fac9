"""The collective smoke test: bandwidth arithmetic, wrong sums detected, real runs under torchrun (gloo, CPU)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.launch import collective

TORCHRUN = str(Path(sys.executable).parent / "torchrun")


def test_sizes_and_factors():
    assert [collective.parse_size(s) for s in ("64K", "1M", "256m", "1G", "4096", "2MiB")] == [
        65536, 1 << 20, 256 << 20, 1 << 30, 4096, 2 << 20]
    for bad in ("0", "1T", "-1M", "M"):
        with pytest.raises(ValueError):
            collective.parse_size(bad)
    assert collective.format_size(65536) == "64 KiB" and collective.format_size(3 << 20) == "3 MiB"
    assert collective.format_size(1000) == "1000 B"
    assert [collective.bus_factor(n) for n in (1, 2, 4, 8)] == [0.0, 1.0, 1.5, 1.75]
    assert collective.expected_sum(4) == 10


def test_wrong_values_finds_the_first_bad_element():
    import torch

    good = torch.full((100,), 10.0)
    assert collective.wrong_values(good, 4) is None
    bad = good.clone()
    bad[37] = 9.0
    assert collective.wrong_values(bad, 4) == (37, 9.0)


def test_no_cann_turns_backend_autoload_off(monkeypatch, tmp_path):
    monkeypatch.delenv("TORCH_DEVICE_BACKEND_AUTOLOAD", raising=False)
    assert not collective.cann_present({}, dirs=(str(tmp_path / "none"),))
    assert collective.cann_present({"ASCEND_HOME_PATH": "/x"}, dirs=())
    assert collective.cann_present({}, dirs=(str(tmp_path),))
    monkeypatch.setattr(collective, "CANN_DIRS", (str(tmp_path / "none"),))
    for k in collective.CANN_ENV:
        monkeypatch.delenv(k, raising=False)
    assert collective.pick_device("auto") == ("cpu", "gloo")
    assert os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] == "0"
    with pytest.raises(SystemExit, match="no NPU visible"):
        collective.pick_device("npu")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_wrong_sum_fails_the_run(monkeypatch, capsys):
    """A reduction that returns wrong values (simulated on the wire) gives exit code 1 and names the element."""
    import torch.distributed as dist

    real = dist.all_reduce

    def corrupting(tensor, *a, **kw):
        out = real(tensor, *a, **kw)
        if tensor.numel() > 1:
            tensor[-1] += 1
        return out

    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": str(_free_port())}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(dist, "all_reduce", corrupting)
    assert collective.main(["--sizes", "4K", "--iters", "1", "--device", "cpu"]) == 1
    out, err = capsys.readouterr()
    assert "all_reduce of 4 KiB is wrong at element 1023: 2.0 instead of 1.0" in err
    doc = json.loads(out.splitlines()[-1])
    assert doc["status"] == "wrong-sum" and doc["results"][0]["ok"] is False


@pytest.mark.slow
def test_under_torchrun():
    nproc = 3  # bus factor 4/3: algbw and busbw differ
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:"}
    proc = subprocess.run([TORCHRUN, "--nproc-per-node", str(nproc), "--standalone", "--tee", "3",
                           "-m", "provisioner.launch.collective", "--sizes", "64K,1M", "--iters", "3"],
                          capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    docs = [json.loads(line.split(":", 1)[1]) for line in proc.stdout.splitlines() if '{"schema"' in line]
    assert len(docs) == 1 and proc.stdout.count("[rank0]:all_reduce:") == 1  # local rank 0 reports
    doc = docs[0]
    assert doc["status"] == "ok" and doc["backend"] == "gloo" and doc["device"] == "cpu"
    assert doc["world_size"] == nproc and doc["local_world_size"] == nproc
    assert [r["bytes"] for r in doc["results"]] == [65536, 1 << 20]
    for r in doc["results"]:
        assert r["ok"] and r["time_us"] > 0
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / (r["time_us"] / 1e6) / 1e9, rel=0.01)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (nproc - 1) / nproc, rel=0.01)
    assert doc["busbw_peak_gbps"] == max(r["busbw_gbps"] for r in doc["results"])
