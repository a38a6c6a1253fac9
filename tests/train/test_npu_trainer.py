"""The trainer's NPU branch, run end to end on CPU under the torch_npu double.

Findings of issue 17 each have a test here that fails on the trainer before the fix: the default run's
fused optimizer (1), transformers without NPU flash attention (2), first-generation 910 (4), ZeRO-2 + fp16
in saturation mode (5), flash attention in fp32 under transformers 4.57 (6), and the varlen limit of
npu_fusion_attention (6).
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from provisioner.train import tiny
from tests.train import npu_fake
from tests.train.conftest import write_config

pytestmark = pytest.mark.slow

RUN = """
import json, sys
from provisioner.train.cli import main
rc = main(sys.argv[1:])
import torch_npu
stats = torch_npu._ATTENTION_STATS
print(json.dumps({"rc": rc, "fa_calls": stats["calls"], "fa_dtypes": sorted(set(stats["dtypes"])),
                  "fa_max_seqs": stats["max_seqs"]}))
"""


def train(tmp_path, model, data, soc="Ascend910B3", path=(), **cfg) -> tuple[dict, dict | None, str]:
    """Run provision-train under the double: (probe line, --json summary or None, stderr)."""
    values = dict(model=str(model), data=[str(data)], output_dir=str(tmp_path / "out"), max_steps=3,
                  max_seq_len=128, micro_batch_size=2, save_steps=0, logging_steps=1, progress_bar=False)
    values.update(cfg)
    config = write_config(tmp_path / "train.yaml", **values)
    proc = npu_fake.run(["-c", RUN, "--config", str(config), "--json"], npu_fake.env(tmp_path, soc=soc, path=path))
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines and "rc" in lines[-1], proc.stderr[-4000:]
    summary = lines[0] if len(lines) > 1 else None
    return lines[-1], summary, proc.stderr


def metrics(summary: dict) -> list[dict]:
    with open(summary["metrics"]) as fh:
        return [json.loads(line) for line in fh]


def test_default_npu_run_steps_with_the_fused_optimizer(tmp_path, tiny_model_dir, alpaca_file):
    """Finding 1: optimizer auto is NpuFusedAdamW, whose zero_grad refuses set_to_none=True."""
    probe, summary, err = train(tmp_path, tiny_model_dir, alpaca_file)
    assert probe["rc"] == 0, err[-3000:]
    assert summary["optimizer"] == "NpuFusedAdamW" and summary["steps"] == 3
    assert (summary["precision"], summary["attn_implementation"]) == ("bf16", "flash_attention_2")
    assert summary["npu"] == {"soc_family": "a2", "inf_nan": True, "jit_compile": False, "max_seqs_per_batch": 1024}
    assert probe["fa_calls"] > 0 and probe["fa_dtypes"] == ["bfloat16"]
    rows = metrics(summary)
    assert [r["step"] for r in rows] == [1, 2, 3] and all(r["grad_norm"] > 0 for r in rows)


def test_transformers_without_npu_flash_attention(tmp_path, tiny_model_dir, alpaca_file):
    """Finding 2: transformers 4.46.3 (the torch 2.1-2.4 package sets) has no NPU flash attention."""
    old = (npu_fake.transformers_env("4.46.3"),)
    probe, summary, err = train(tmp_path, tiny_model_dir, alpaca_file, path=old, method="full")
    assert probe["rc"] == 0, err[-3000:]
    assert summary["attn_implementation"] == "sdpa" and probe["fa_calls"] == 0
    probe, _, err = train(tmp_path, tiny_model_dir, alpaca_file, path=old, attn_implementation="flash_attention_2")
    assert probe["rc"] == 2
    assert ("attn_implementation: flash_attention_2: transformers 4.46.3 has no NPU flash attention "
            "(integrations/npu_flash_attention.py arrived in 4.51.0)") in err


def test_first_generation_910_trains_in_fp16_without_flash_attention(tmp_path, tiny_model_dir, alpaca_file):
    """Finding 4 (and jit_compile): no npu_fusion_attention, no bf16, online compilation by default."""
    probe, summary, err = train(tmp_path, tiny_model_dir, alpaca_file, soc="Ascend910A")
    assert probe["rc"] == 0, err[-3000:]
    # sdpa, run per packed sequence by the trainer's packed sdpa (no varlen kernel on this chip)
    assert (summary["precision"], summary["attn_implementation"]) == ("fp16", "provision_packed_sdpa")
    assert summary["npu"] == {"soc_family": "ascend910", "inf_nan": False, "jit_compile": True,
                              "max_seqs_per_batch": None}
    assert probe["fa_calls"] == 0 and all(r["loss_scale"] > 0 for r in metrics(summary))
    probe, _, err = train(tmp_path, tiny_model_dir, alpaca_file, soc="Ascend910A",
                          attn_implementation="flash_attention_2")
    assert probe["rc"] == 2 and "npu_fusion_attention does not run on Ascend910A" in err


def test_zero2_with_fp16_is_refused_on_a_saturating_chip(tmp_path, tiny_model_dir, alpaca_file):
    """Finding 5: DeepSpeed would never see the overflow of a chip that saturates. Without deepspeed installed
    the config is refused earlier for the missing library (train/requirements.py); the same refusal on this
    chip is checked without it through the self-test (test_selftest.py, first-generation 910)."""
    from provisioner.train.requirements import installed

    if not installed("deepspeed"):
        pytest.skip("deepspeed is optional; strategy zero2 is refused before the chip is read when it is missing")
    probe, _, err = train(tmp_path, tiny_model_dir, alpaca_file, soc="Ascend910A", strategy="zero2",
                          attn_implementation="sdpa", optimizer="adamw")
    assert probe["rc"] == 2
    assert "strategy: zero2 with fp16 would apply saturated gradients on Ascend910A" in err
    assert "use strategy: ddp" in err


def test_full_fine_tuning_runs_npu_flash_attention_in_the_autocast_dtype(tmp_path, tiny_model_dir, alpaca_file):
    """Finding 6: transformers 4.57 (torch 2.6-2.9 sets) picks the kernel dtype from CUDA's autocast state.
    It also swaps flash_attention_2 for a CUDA kernel from the Hub when the `kernels` package is installed
    (the dev extra installs it): without the trainer's fix, loading the model fails."""
    assert importlib.util.find_spec("kernels") is not None, "the dev extra installs kernels"
    probe, summary, err = train(tmp_path, tiny_model_dir, alpaca_file, method="full",
                                tokenizer=str(tiny.qwen_tokenizer_dir()),
                                path=(npu_fake.transformers_env("4.57.6"),))
    assert probe["rc"] == 0, err[-3000:]
    assert summary["attn_implementation"] == "flash_attention_2"
    assert probe["fa_calls"] > 0 and probe["fa_dtypes"] == ["bfloat16"]
    assert "NPU flash attention runs in bf16" in err
    assert "would swap it for the CUDA kernel kernels-community/flash-attn" in err


def test_flat_packing_stays_within_the_varlen_limit(tmp_path, tiny_model_dir):
    """Finding 6: one varlen npu_fusion_attention call takes at most 1K sequences."""
    data = tmp_path / "many.json"
    data.write_text(json.dumps([{"instruction": f"q{i}", "input": "", "output": "a"} for i in range(1400)]))
    probe, summary, err = train(tmp_path, tiny_model_dir, data, max_seq_len=65536, micro_batch_size=1,
                                max_steps=2, system_prompt="")
    assert probe["rc"] == 0, err[-3000:]
    assert summary["packing"] is True and 900 < probe["fa_max_seqs"] <= 1024


def test_the_memory_plan_takes_off_what_the_chip_already_holds(tmp_path, tiny_model_dir, alpaca_file):
    """Issue 22.5: on a device the plan reads what the chip holds before the run (mem_get_info: total less
    free; npu-smi shows 3-4 GB on an idle A2 chip) instead of assuming all of its HBM is free."""
    config = write_config(tmp_path / "train.yaml", model=str(tiny_model_dir), data=[str(alpaca_file)],
                          output_dir=str(tmp_path / "out"), max_steps=1, max_seq_len=64, micro_batch_size=1,
                          save_steps=0, progress_bar=False)
    proc = npu_fake.run(["-m", "provisioner.train", "--config", str(config), "--json"],
                        npu_fake.env(tmp_path, FAKE_NPU_HELD_MIB=4175))
    assert proc.returncode == 0, proc.stderr[-3000:]
    plan = json.loads(proc.stdout.strip().splitlines()[-1])["memory"]["plan"]
    assert plan["held_gib"] == pytest.approx(4175 / 1024, abs=1e-3)
    assert plan["held_by"] == "in use on npu:0 before the run (mem_get_info)"
    assert plan["available_gib"] == pytest.approx(64 - 4175 / 1024, abs=1e-3) and plan["fits"] is True
