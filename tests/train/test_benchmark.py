"""benchmarks/train_throughput.py end to end on the tiny shape: the trainer and both transformers Trainer peers
run, on the same tokens, and the ratios the closing note quotes come out of the same numbers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.train.conftest import REPO

pytestmark = pytest.mark.slow


def test_benchmark_runs_all_three_on_the_same_work(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    cmd = [
        sys.executable, str(REPO / "benchmarks" / "train_throughput.py"), "--device", "cpu", "--model-size", "tiny",
        "--seq-len", "128", "--micro-batch-size", "2", "--steps", "3", "--warmup", "1", "--repeats", "1",
        "--samples", "200", "--json", "--workdir", str(tmp_path), "--gradient-checkpointing", "auto",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])  # stdout holds the result only

    assert result["model_size"] == "tiny" and result["device"]
    # auto: the trainer's plan fits this host's memory without checkpointing; the peers have no auto and keep
    # checkpointing every layer.
    gc = result["gradient_checkpointing"]
    assert gc["ours_checkpointed_layers"] == [0] and gc["layers"] == 2 and gc["peers"] is True
    assert gc["ours_why"].startswith("auto: 0 of 2 layers")
    assert result["packing"] is True
    assert result["attn_implementation"] == "provision_packed_sdpa"  # sdpa on CPU, per packed sequence
    ours, padded, flat = (result[k] for k in
                          ("provision_train_tokens_per_s", "hf_padded_tokens_per_s", "hf_padding_free_tokens_per_s"))
    assert ours > 0 and padded > 0 and flat > 0
    assert result["ratio_vs_padded"] == pytest.approx(ours / padded, rel=0.01)  # one repeat: median == the ratio
    assert result["ratio_vs_padding_free"] == pytest.approx(ours / flat, rel=0.01)
    # The padding-free peer is fed as many samples per step as fill the trainer's packed micro-batch: the two
    # process about the same real tokens per step; the padded peer takes micro-batch-size samples, far fewer.
    per_step = result["tokens_per_step"]
    assert 0.6 < per_step["flat"] / per_step["ours"] < 1.6, per_step
    assert per_step["padded"] < per_step["ours"], per_step
    assert result["padding_free_samples_per_step"] > result["micro_batch_size"]
