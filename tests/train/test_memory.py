"""The memory plan: parameter counts from config.json, the Qwen2.5-7B verdicts on 4 x 64 GB, refusals with
the smallest change that fits (by --check and by the run, before any weight is loaded), strategy libraries
refused up front, and the estimate against the measured peak of real CPU runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from provisioner.train import memory, memory_fit
from provisioner.train.cli import main
from provisioner.train.config import ConfigError, load_config
from tests.train.conftest import PYTHON, alpaca_records, tokenizer_files, train_env, write_config

# config.json of Qwen/Qwen2.5-7B and Qwen/Qwen2.5-0.5B on the Hugging Face hub (the fields the plan reads).
QWEN25_7B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "vocab_size": 152064,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
QWEN25_05B = {
    **QWEN25_7B,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
}


def test_parameter_counts_from_config_json():
    # Published sizes: Qwen2.5-7B 7.61B, Qwen2.5-0.5B 0.49B (q/k/v biases, tied embeddings on 0.5B).
    assert memory.model_shape(QWEN25_7B).params == 7_615_616_512
    assert memory.model_shape(QWEN25_05B).params == 494_032_768
    llama = {**QWEN25_7B, "model_type": "llama", "attention_bias": False}
    assert memory.model_shape(llama).params == 7_615_616_512 - 28 * (3584 + 2 * 512)
    with pytest.raises(ConfigError, match="lacks hidden_size"):
        memory.model_shape({"model_type": "qwen2", "vocab_size": 10})


@pytest.fixture
def seven_b(tmp_path):
    """A Qwen2.5-7B directory with config.json and the tokenizer, but no weights: plans need none."""
    d = tmp_path / "qwen2.5-7b"
    shutil.copytree(tokenizer_files(), d)
    (d / "config.json").write_text(json.dumps(QWEN25_7B))
    data = tmp_path / "data.json"
    data.write_text(json.dumps(alpaca_records(16)))
    return d, data


def check(capsys, args):
    rc = main(["--check", "--json", *args])
    cap = capsys.readouterr()
    return rc, json.loads(cap.out.strip().splitlines()[-1]), cap.err


def test_qwen25_7b_full_on_four_64gb_chips_ddp_refused_sharded_accepted(tmp_path, capsys, seven_b):
    model, data = seven_b
    base = [f"model={model}", f"data={data}", f"output_dir={tmp_path / 'out'}", "method=full", "card=800T-A2",
            "max_seq_len=2048", "--world-size", "4"]
    rc, res, err = check(capsys, base)
    assert rc == 2 and res["status"] == "refused"
    plan = res["memory"]
    assert plan["fits"] is False and plan["capacity_gib"] == 64.0 and plan["device"] == "800T-A2 per-chip HBM"
    # 16 bytes per parameter before activations: fp32 weights + fp32 gradients + two fp32 AdamW moments.
    states = sum(plan["per_device_gib"][k] for k in ("weights", "gradients", "optimizer state"))
    assert states == pytest.approx(16 * 7_615_616_512 / 2**30, rel=1e-3)
    line = err.strip().splitlines()[-1]
    assert line.startswith("provision-train: error: memory: the plan needs") and "does not" not in line.split(":")[0]
    assert "smallest change that fits: strategy=" in line
    for strategy in ("fsdp", "zero3", "zero2"):
        rc, res, _ = check(capsys, [*base, f"strategy={strategy}"])
        assert rc == 0 and res["memory"]["fits"] is True, (strategy, res["memory"])
        assert res["memory"]["total_gib"] < 64
    # With checkpointing off the activations of 2048 tokens x 28 layers are counted in full.
    rc, res, _ = check(capsys, [*base, "strategy=fsdp", "gradient_checkpointing=false", "micro_batch_size=8"])
    assert res["memory"]["per_device_gib"]["activations"] == pytest.approx(
        res["memory"]["activations_without_checkpointing_gib"], rel=0.05
    )


def test_the_suggested_settings_give_the_plan_they_were_priced_at(tmp_path, seven_b):
    """Applying the suggestion's key=value words to the config yields the estimated total: a new strategy is
    priced without optimizer offload, so where `auto` would turn offload on (zero2) the words say it is off."""
    model, data = seven_b
    words = [f"model={model}", f"data={data}", f"output_dir={tmp_path}/o", "method=full"]
    cap, label, _ = memory_fit.card_capacity("910B3")
    p = memory_fit.plan(load_config(None, words), 4, "bf16", cap, label, strategies=["ddp", "zero2"])
    assert p.fits is False and p.suggestion == ["strategy=zero2", "offload_optimizer=false"]
    applied = memory_fit.plan(load_config(None, words + p.suggestion), 4, "bf16", cap, label, strategies=["ddp", "zero2"])
    assert applied.fits is True and applied.total == p.suggestion_total


def test_suggestion_is_the_smallest_change_with_the_strategies_at_hand(tmp_path, seven_b):
    model, data = seven_b
    cfg = load_config(None, [f"model={model}", f"data={data}", f"output_dir={tmp_path}/o", "method=full"])
    cap, label, bf16 = memory_fit.card_capacity("910B3")
    assert cap == 64 * 2**30 and bf16 is True
    p = memory_fit.plan(cfg, 4, "bf16", cap, label, strategies=["ddp", "fsdp"])  # no deepspeed here
    assert p.fits is False and p.suggestion == ["strategy=fsdp"]
    # One chip of 32 GB (910B4): sharding over one device does not help; offload or LoRA must.
    cap4, label4, _ = memory_fit.card_capacity("910B4")
    one = memory_fit.plan(cfg, 1, "bf16", cap4, label4, strategies=["ddp", "zero2", "zero3", "fsdp"])
    assert one.fits is False and one.suggestion
    assert any(w.startswith(("offload_", "method=lora")) for w in one.suggestion), one.suggestion
    assert one.suggestion_total <= cap4
    # A micro-batch of 16 at 4096 tokens: the first change that fits keeps the global batch.
    big = load_config(
        None,
        [f"model={model}", f"data={data}", f"output_dir={tmp_path}/o", "method=lora", "micro_batch_size=16",
         "max_seq_len=4096", "gradient_accumulation_steps=2"],
    )
    p = memory_fit.plan(big, 4, "bf16", cap, label, strategies=["ddp"])
    mbs = next(w for w in p.suggestion if w.startswith("micro_batch_size="))
    ga = next(w for w in p.suggestion if w.startswith("gradient_accumulation_steps="))
    assert int(mbs.split("=")[1]) * int(ga.split("=")[1]) == 32


def test_the_run_refuses_a_plan_that_cannot_fit_before_loading_weights(tmp_path, seven_b):
    model, data = seven_b
    cfg = write_config(tmp_path / "c.yaml", model=str(model), data=str(data), output_dir=str(tmp_path / "out"),
                       method="full", card="910B4", max_steps=1)
    proc = subprocess.run([PYTHON, "-m", "provisioner.train", "--config", str(cfg)], capture_output=True, text=True,
                          env=train_env(), timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and "memory: the plan needs" in errors[0] and "910B4 HBM" in errors[0]
    assert "Traceback" not in proc.stderr and not (tmp_path / "out" / "checkpoints").exists()


def test_a_strategy_whose_library_is_missing_is_refused_up_front(tmp_path, capsys, monkeypatch, tiny_model_dir,
                                                                 alpaca_file):
    base = [f"model={tiny_model_dir}", f"data={alpaca_file}", f"output_dir={tmp_path / 'out'}"]
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # what an environment without deepspeed looks like
    for strategy in ("zero2", "zero3"):
        rc = main(["--check", *base, f"strategy={strategy}"])
        err = capsys.readouterr().err.strip().splitlines()
        assert rc == 2 and len(err) == 1
        assert f"strategy: {strategy} needs DeepSpeed, which is not installed" in err[0]
        assert "deepspeed>=" in err[0]  # the range the matrix's extras allow
    assert main(["--check", *base, "strategy=fsdp"]) == 0  # FSDP2 needs only torch
    monkeypatch.setitem(sys.modules, "trl", None)
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"prompt": "1+1?", "ground_truth": "2"}) + "\n")
    rc = main(["--check", f"model={tiny_model_dir}", f"data={data}", f"output_dir={tmp_path / 'o2'}", "method=grpo"])
    assert rc == 2 and "method: grpo needs TRL" in capsys.readouterr().err


def test_deepspeed_in_this_environment_is_a_version_the_matrix_allows():
    ds = pytest.importorskip("deepspeed")
    from packaging.requirements import Requirement

    from provisioner.matrix import loader

    row = next(r for r in loader.load().rows("extras") if r["name"] == "deepspeed")
    assert Requirement(row["requirement"]).specifier.contains(ds.__version__.split("+")[0])


@pytest.mark.slow
@pytest.mark.parametrize("method", ["full", "lora"])
def test_estimate_within_15_percent_of_the_measured_cpu_peak(tmp_path, tokenizer, method):
    from provisioner.train import tiny

    model = tiny.build_qwen2(tmp_path / "small", tokenizer, hidden=256, layers=4, heads=4, kv_heads=2,
                             intermediate=768)
    data = tmp_path / "data.json"
    data.write_text(json.dumps(alpaca_records(64)))
    cfg = write_config(tmp_path / "c.yaml", model=str(model), data=str(data), output_dir=str(tmp_path / "out"),
                       method=method, max_steps=3, max_seq_len=512, micro_batch_size=2, save_steps=0)
    # A fresh process, as a real run is: a long test process's allocator holds memory that earlier tests freed,
    # and reuses it without raising the resident set, so the peak it measures would be too low.
    proc = subprocess.run([PYTHON, "-m", "provisioner.train", "--config", str(cfg), "--json"], capture_output=True,
                          text=True, env=train_env(), timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    mem = json.loads(proc.stdout.strip().splitlines()[-1])["memory"]
    estimate, measured = mem["estimate_gib"], mem["measured_peak_gib"]
    assert measured and abs(estimate - measured) / measured < 0.15, mem
    assert mem["plan"]["fits"] is True and mem["device"] == "host memory available"
