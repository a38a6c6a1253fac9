"""The memory plan: parameter counts from config.json, the Qwen2.5-7B verdicts on 4 x 64 GB, refusals with
the smallest change that fits (by --check and by the run, before any weight is loaded), strategy libraries
refused up front, and the estimate against the measured peak of real CPU runs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from provisioner.train import memory, memory_fit
from provisioner.train.cli import main
from provisioner.train.config import ConfigError, load_config
from tests.train.conftest import PYTHON, REPO, alpaca_records, tokenizer_files, train_env, write_config

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
QWEN25_15B = {
    **QWEN25_7B,
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_attention_heads": 12,
    "num_hidden_layers": 28,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "tie_word_embeddings": True,
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


# ---- capacity: the card's smallest HBM, what an idle chip holds (issues 27.3, 22.5) ----------------------------

SAMPLES = REPO / "tests" / "fixtures" / "npu-smi"
QWEN25_14B = {**QWEN25_7B, "hidden_size": 5120, "intermediate_size": 13824, "num_attention_heads": 40,
              "num_hidden_layers": 48, "num_key_value_heads": 8}


def test_300t_a2_is_planned_on_the_smallest_hbm_its_chips_may_have_and_says_it_is_unconfirmed(tmp_path):
    cap, label, bf16 = memory_fit.card_capacity("300T-A2")
    assert cap == 32 * 2**30 and bf16 is True  # the first chip model's 64 GiB before
    assert "unconfirmed" in label and "910B4" in label and label.startswith("300T-A2 per-chip HBM")
    # A card whose memory the matrix confirms says nothing more.
    assert memory_fit.card_capacity("800T-A2")[1] == "800T-A2 per-chip HBM"
    d = tmp_path / "qwen2.5-14b"
    shutil.copytree(tokenizer_files(), d)
    (d / "config.json").write_text(json.dumps(QWEN25_14B))
    (tmp_path / "d.json").write_text(json.dumps(alpaca_records(4)))
    cfg = load_config(None, [f"model={d}", f"data={tmp_path}/d.json", f"output_dir={tmp_path}/o", "method=lora",
                             "strategy=zero2"])
    p = memory_fit.plan(cfg, 2, "bf16", cap, label, strategies=["ddp"], held=memory_fit.held_memory("300T-A2"))
    assert p.fits is False, p.lines()  # bf16 weights alone are 27.5 GiB
    assert "300T-A2" in memory_fit.refusal(p) and "unconfirmed" in memory_fit.refusal(p)


def test_910b4_1_has_its_own_64_gb():
    # npu-smi prints Name 910B4-1 with 65536 MB (Project-HAMi/HAMi-WebUI#47); it was planned as a 32 GB 910B4.
    for name in ("910B4-1", "Ascend910B4-1"):
        cap, label, _ = memory_fit.card_capacity(name)
        assert cap == 64 * 2**30 and label == "910B4-1 HBM"
    assert memory_fit.card_capacity("Ascend910B4")[0] == 32 * 2**30


def test_what_an_idle_chip_holds_is_taken_off_the_capacity(tmp_path, capsys, seven_b, monkeypatch):
    model, data = seven_b
    held, by = memory_fit.held_memory("800T-A2")
    assert held == 4175 * 2**20 and "idle 910b chip" in by  # the largest idle HBM-Usage of the A2 samples (910B1)
    assert memory_fit.held_memory("800T-A3")[0] == 3143 * 2**20
    base = [f"model={model}", f"data={data}", f"output_dir={tmp_path / 'out'}", "method=lora", "card=800T-A2"]
    rc, res, _ = check(capsys, base)
    plan = res["memory"]
    assert rc == 0 and plan["held_gib"] == pytest.approx(4.077, abs=1e-3)
    assert plan["available_gib"] == pytest.approx(64 - 4.077, abs=1e-3)
    # A plan between the two figures fits the chip's HBM but not what is left of it.
    cfg = load_config(None, base[:4] + ["micro_batch_size=4", "max_seq_len=11264"])
    cap, label, _ = memory_fit.card_capacity("800T-A2")
    p = memory_fit.plan(cfg, 1, "bf16", cap, label, strategies=["ddp"])
    assert cap - 4175 * 2**20 < p.total <= cap and p.fits is True
    p = memory_fit.plan(cfg, 1, "bf16", cap, label, strategies=["ddp"], held=memory_fit.held_memory("800T-A2"))
    assert p.fits is False and "held by an idle 910b chip" in memory_fit.refusal(p)


def test_held_memory_is_read_from_the_host_where_there_is_one(tmp_path, monkeypatch):
    # npu-smi on the PATH (a real A2 sample with one chip busier than idle): --check reads the host.
    sample = (SAMPLES / "npu-smi_info_910B2_x8_A2_npu-smi-24.1.0.3_with_cann_toolkit_info.txt").read_text()
    sample = sample.replace("3395 / 65536", "9000 / 65536", 1)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "info.txt").write_text(sample)
    (bin_dir / "npu-smi").write_text(f"#!/bin/sh\ncat {bin_dir / 'info.txt'}\n")
    (bin_dir / "npu-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    held, by = memory_fit.held_memory("800T-A2")
    assert held == 9000 * 2**20 and "npu-smi info" in by and "8" in by
    # The run's own device: total less free, as the allocator reports it.
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index=None: (60 * 2**30, 64 * 2**30))

    class Dev:
        type, index = "cuda", 0

    assert memory_fit.held_memory(None, Dev()) == (4 * 2**30, "in use on cuda:0 before the run (mem_get_info)")


# ---- what the plan used to leave out (issue 22.5) --------------------------------------------------------------

def test_fsdp_foreach_adamw_and_npu_fused_adamw_step_temporaries_are_counted(tmp_path, seven_b):
    model, data = seven_b
    base = [f"model={model}", f"data={data}", f"output_dir={tmp_path}/o", "method=full", "max_seq_len=2048"]
    cap, label, _ = memory_fit.card_capacity("800T-A2")
    # FSDP2's torch AdamW(foreach=True): _foreach_sqrt(exp_avg_sq) copies every local shard once.
    p = memory_fit.plan(load_config(None, [*base, "strategy=fsdp"]), 8, "bf16", cap, label, strategies=["ddp"])
    tmp = next(i for i in p.items if i.name == "step temporaries")
    assert tmp.bytes == pytest.approx(4 * 7_615_616_512 / 8) and tmp.phases == ("optimizer step",)
    assert tmp.bytes / 2**30 == pytest.approx(3.55, abs=0.01)
    # Offloaded, the step runs on the CPU: nothing on the device.
    off = memory_fit.plan(load_config(None, [*base, "strategy=fsdp", "offload_params=true"]), 8, "bf16", cap, label)
    assert not [i for i in off.items if i.name == "step temporaries"]
    # NpuFusedAdamW (DDP on an NPU): the square root and its quotient over the combined buffer, each fp32.
    d = tmp_path / "qwen2.5-1.5b"
    shutil.copytree(tokenizer_files(), d)
    (d / "config.json").write_text(json.dumps(QWEN25_15B))
    one = memory_fit.plan(load_config(None, [f"model={d}", *base[1:]]), 1, "bf16", cap, label, strategies=["ddp"])
    fused = next(i for i in one.items if i.name == "step temporaries")
    psi = memory.model_shape(QWEN25_15B).params
    assert fused.bytes == pytest.approx(2 * 4 * psi) and "NpuFusedAdamW" in fused.note
    assert one.peak_phase == "optimizer step"
    # `optimizer: adamw` on an NPU is torch's foreach AdamW: one copy; CUDA's fused AdamW works in place.
    plain = memory_fit.plan(load_config(None, [f"model={d}", *base[1:], "optimizer=adamw"]), 1, "bf16", cap, label)
    assert next(i for i in plain.items if i.name == "step temporaries").bytes == pytest.approx(4 * psi)
    cuda = memory_fit.plan(load_config(None, [f"model={d}", *base[1:]]), 1, "bf16", cap, label, device_type="cuda")
    assert not [i for i in cuda.items if i.name == "step temporaries"]


@pytest.fixture
def vllm_host(tmp_path, monkeypatch):
    """What an image with vLLM looks like to the rollout decision: vllm and vllm_ascend packages and the
    dist-info of each (and of TRL), found by importlib without importing anything."""

    def make(vllm: str = "0.11.0", trl: str = "1.2.0"):
        site = tmp_path / f"site-{vllm}-{trl}"
        for name, ver in (("vllm", vllm), ("vllm_ascend", vllm), ("trl", trl)):
            if name != "trl":
                (site / name).mkdir(parents=True)
                (site / name / "__init__.py").write_text("")
            info = site / f"{name}-{ver}.dist-info"
            info.mkdir(parents=True)
            (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {ver}\n")
        monkeypatch.syspath_prepend(str(site))

    return make


def test_colocated_vllm_is_counted_whenever_rollout_auto_picks_it(tmp_path, capsys, seven_b, vllm_host):
    model, _ = seven_b
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"prompt": "1+1?", "ground_truth": "2"}) + "\n")
    base = [f"model={model}", f"data={data}", f"output_dir={tmp_path / 'o'}", "method=grpo", "grpo.tuning=lora",
            "card=800T-A2"]
    vllm_host("0.11.0", "1.2.0")  # TRL 1.2.0 supports vLLM 0.11.0..0.18.0 (trl/import_utils.py)
    rc, res, _ = check(capsys, base)
    gib = res["memory"]["per_device_gib"]
    assert rc == 0 and gib["vLLM rollout"] == pytest.approx(0.3 * 64) and "KV cache" not in gib


def test_rollout_auto_checks_the_vllm_version_trl_supports(tmp_path, capsys, seven_b, vllm_host):
    model, _ = seven_b
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"prompt": "1+1?", "ground_truth": "2"}) + "\n")
    base = [f"model={model}", f"data={data}", f"output_dir={tmp_path / 'o'}", "method=grpo", "grpo.tuning=lora",
            "card=800T-A2"]
    vllm_host("0.10.0", "1.2.0")
    rc, res, _ = check(capsys, base)  # auto: transformers generate, whose KV cache the plan counts
    assert rc == 0 and "vLLM rollout" not in res["memory"]["per_device_gib"]
    assert "KV cache" in res["memory"]["per_device_gib"]
    rc = main(["--check", *base, "grpo.rollout=vllm"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "TRL 1.2.0 supports vLLM >=0.11.0,<=0.18.0" in err[0] and "vllm 0.10.0" in err[0]


def test_fsdp2_offload_with_vllm_is_refused_on_the_npu(tmp_path, capsys, seven_b, vllm_host):
    from provisioner.train.requirements import vllm_rollout

    model, _ = seven_b
    data = tmp_path / "p.jsonl"
    data.write_text(json.dumps({"prompt": "1+1?", "ground_truth": "2"}) + "\n")
    vllm_host("0.11.0", "1.2.0")
    words = [f"model={model}", f"data={data}", f"output_dir={tmp_path / 'o'}", "method=grpo", "strategy=fsdp",
             "offload_params=true"]
    with pytest.raises(ConfigError, match="moves FSDP2's offloaded parameters to 'cuda'.*strategy zero3"):
        vllm_rollout(load_config(None, [*words, "grpo.rollout=vllm"]), "npu")
    on, why = vllm_rollout(load_config(None, words), "npu")  # auto: generate, and why
    assert on is False and "'cuda'" in why
    assert vllm_rollout(load_config(None, words), "cuda") == (True, "")  # "cuda" is right on a GPU
    assert vllm_rollout(load_config(None, words[:-1]), "npu") == (True, "")  # without offload


# ---- gradient_checkpointing: auto, k of L layers (issue 27.8) -------------------------------------------------

def _gc_plan(model, data, tmp_path, gc, capacity=None, extra=()):
    words = [f"model={model}", f"data={data}", f"output_dir={tmp_path}/o", "method=lora", "micro_batch_size=4",
             "max_seq_len=8192", f"gradient_checkpointing={gc}", *extra]
    return memory_fit.plan(load_config(None, words), 1, "bf16", capacity, "a card", strategies=["ddp"])


def test_partial_checkpointing_is_planned_layer_by_layer(tmp_path, seven_b):
    """k checkpointed layers keep k layer inputs and the other layers' full activations (the first k recompute,
    after the others are freed: at least one full layer is alive), and as many autocast weight copies."""
    model, data = seven_b
    act = {k: next(i.bytes for i in _gc_plan(model, data, tmp_path, k).items if i.name == "activations")
           for k in (0, 1, 2, 14, 27, 28)}
    assert act[0] == next(i.bytes for i in _gc_plan(model, data, tmp_path, "false").items if i.name == "activations")
    assert act[28] == next(i.bytes for i in _gc_plan(model, data, tmp_path, "true").items if i.name == "activations")
    step = act[1] - act[2]  # a full layer less one layer's input
    assert step > 0 and act[14] == pytest.approx(act[2] - 12 * step) and act[27] == pytest.approx(act[2] - 25 * step)
    # 27 of 28: the last layer's full activations are the one full layer alive, as a recompute's are when all
    # 28 recompute; all 28 keep one layer input more.
    kept = act[28] - act[27]
    assert 0 < kept < step / 4
    assert act[0] - act[1] == pytest.approx(step)
    mixed = [f"model={model}", f"data={data}", f"output_dir={tmp_path}/o", "method=full"]
    copies = {k: next(i.bytes for i in memory_fit.plan(load_config(None, [*mixed, f"gradient_checkpointing={k}"]), 1,
                                                        "bf16", None, "").items if i.name == "autocast copies")
              for k in (0, 10, 28)}
    layer = memory.model_shape(QWEN25_7B).layer_params * 2
    assert copies[0] - copies[10] == pytest.approx(10 * layer) and copies[10] - copies[28] == pytest.approx(17 * layer)
    with pytest.raises(ConfigError, match="gradient_checkpointing: 29 layers, but .* has 28 decoder layers"):
        _gc_plan(model, data, tmp_path, 29)


def test_auto_checkpoints_the_fewest_layers_that_fit(tmp_path, seven_b):
    model, data = seven_b
    none, every = _gc_plan(model, data, tmp_path, 0), _gc_plan(model, data, tmp_path, 28)
    # The plan fits without checkpointing: none.
    p = _gc_plan(model, data, tmp_path, "auto", none.total)
    assert p.setup.checkpointed == 0 and p.fits is True and p.total == none.total
    assert p.checkpointing_why.startswith("auto: 0 of 28 layers; the plan fits without checkpointing")
    # Between: the fewest layers whose plan fits.
    for k in (1, 9, 27):
        budget = _gc_plan(model, data, tmp_path, k).total
        p = _gc_plan(model, data, tmp_path, "auto", budget + 2**20)
        assert p.setup.checkpointed == k and p.total == budget, k
        assert f"auto: {k} of 28 layers, the fewest that fit" in p.checkpointing_why
    assert "checkpointing 9 of 28 layers" in _gc_plan(model, data, tmp_path, "auto", _gc_plan(
        model, data, tmp_path, 9).total).setup.describe()
    # Only the most checkpointing fits: 27 of 28 layers (all 28 would keep one layer input more).
    p = _gc_plan(model, data, tmp_path, "auto", every.total)
    assert p.setup.checkpointed == 27 and p.total < every.total
    # Nothing fits: all layers, and the refusal's suggestion (a smaller micro-batch, auto decided for it too).
    cap = _gc_plan(model, data, tmp_path, 27).total - 2**20
    p = _gc_plan(model, data, tmp_path, "auto", cap)
    assert p.setup.checkpointed == 28 and p.fits is False and "even that does not fit" in p.checkpointing_why
    assert p.suggestion and not any(w.startswith("gradient_checkpointing") for w in p.suggestion)
    applied = _gc_plan(model, data, tmp_path, "auto", cap, p.suggestion)
    assert applied.fits is True and applied.total == p.suggestion_total
    # No capacity to plan against: all layers, as true.
    assert _gc_plan(model, data, tmp_path, "auto").setup.checkpointed == 28


def test_auto_for_grpo_is_all_or_nothing_and_check_says_what_auto_chose(tmp_path, capsys, seven_b):
    model, data = seven_b
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "1+1?", "ground_truth": "2"}) + "\n")
    words = [f"model={model}", f"data={prompts}", f"output_dir={tmp_path}/o", "method=grpo", "grpo.rollout=hf"]
    plan = lambda gc, cap: memory_fit.plan(load_config(None, [*words, f"gradient_checkpointing={gc}"]), 1,  # noqa: E731
                                           "bf16", cap, "a card", strategies=["ddp"])
    every, none = plan("true", None).total, plan("false", None).total
    p = plan("auto", (every + none) / 2)  # some layers fewer than all would fit; TRL cannot do that
    assert p.setup.checkpointed == 28 and p.fits is True and "TRL checkpoints all or none" in p.checkpointing_why
    assert plan("auto", none).setup.checkpointed == 0
    with pytest.raises(ConfigError, match="method grpo checkpoints every layer or none"):
        load_config(None, [*words, "gradient_checkpointing=20"])
    from provisioner.train.grpo.trainer import checkpointing

    assert checkpointing(load_config(None, [*words, "gradient_checkpointing=auto"])) is True
    # --check on a card: the JSON and the text say k of L and why.
    base = [f"model={model}", f"data={data}", f"output_dir={tmp_path / 'out'}", "method=lora", "card=800T-A2",
            "micro_batch_size=4", "max_seq_len=8192", "gradient_checkpointing=auto"]
    rc, res, _ = check(capsys, base)
    mem = res["memory"]
    assert rc == 0 and mem["layers"] == 28 and 0 < mem["checkpointed_layers"] < 28 and mem["fits"] is True
    assert mem["checkpointing_why"].startswith(f"auto: {mem['checkpointed_layers']} of 28 layers, the fewest that fit")
    assert main(["--check", *base]) == 0
    assert f"  checkpointing: auto: {mem['checkpointed_layers']} of 28 layers" in capsys.readouterr().out
    for bad in ("-1", "some", "1.5"):
        with pytest.raises(ConfigError, match="gradient_checkpointing: must be true, false, auto or a number"):
            load_config(None, [*base[:3], f"gradient_checkpointing={bad}"])
