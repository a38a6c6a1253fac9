"""Single-process runs through the real CLI path: loss falls, metrics, exports, accumulation."""

from __future__ import annotations

import json
import struct

import pytest
import torch

from provisioner.train import checkpoint as ckpt
from provisioner.train.cli import main
from provisioner.train.metrics import read_metrics
from tests.train.conftest import write_config

STEP_KEYS = {
    "step",
    "epoch",
    "loss",
    "lr",
    "grad_norm",
    "tokens_per_s",
    "tokens_per_s_per_device",
    "mfu",
    "peak_mem_gib",
    "step_time_s",
    "tokens",
}


def run_cli(capsys, cfg_path, *extra):
    rc = main(["--config", str(cfg_path), "--json", *extra])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    return json.loads(out[-1])


def base_cfg(tmp_path, model, data, **over):
    values = dict(
        model=str(model),
        data=str(data),
        output_dir=str(tmp_path / "out"),
        max_seq_len=256,
        micro_batch_size=2,
        save_steps=0,
        seed=3,
    )
    values.update(over)
    return write_config(tmp_path / "cfg.yaml", **values)


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_full_run_loss_falls_with_metrics_eval_and_checkpoints(tmp_path, capsys, tiny_model_dir, alpaca_file):
    cfg = base_cfg(
        tmp_path,
        tiny_model_dir,
        alpaca_file,
        method="full",
        max_steps=12,
        learning_rate=3e-3,
        save_steps=4,
        save_total_limit=2,
        eval_split=0.1,
        eval_steps=6,
    )
    summary = run_cli(capsys, cfg)
    out = tmp_path / "out"
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert all(STEP_KEYS <= r.keys() for r in rows)
    assert rows[-1]["loss"] < rows[0]["loss"] - 3.0, [r["loss"] for r in rows]
    assert [r["step"] for r in rows if "eval_loss" in r] == [6, 12]
    assert rows[-1]["eval_loss"] < rows[5]["eval_loss"]
    assert summary["eval_loss"] == rows[-1]["eval_loss"] and summary["final_loss"] == rows[-1]["loss"]
    assert rows[0]["lr"] < rows[1]["lr"] and rows[-1]["lr"] < rows[2]["lr"]  # warmup, then decay
    assert all(r["mfu"] is None for r in rows)  # CPU without peak_tflops
    assert all(r["grad_norm"] > 0 and r["tokens_per_s_per_device"] > 0 for r in rows)
    assert summary["packing"] is True and summary["precision"] == "fp32" and summary["device_type"] == "cpu"
    assert summary["train_samples"] + summary["eval_samples"] == 64
    # save_steps 4 and save_total_limit 2: steps 8 and 12 are kept, 4 was rotated away.
    assert [p.name for p in ckpt.complete_checkpoints(out)] == ["step-00000008", "step-00000012"]
    assert not list((out / "checkpoints").glob(".*"))
    assert png_size(out / "loss_curve.png") == (800, 480)
    assert summary["loss_curve"] == str(out / "loss_curve.png")
    # The exported model is a plain transformers checkpoint with the trained weights.
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    final = AutoModelForCausalLM.from_pretrained(out / "final")
    saved = load_file(out / "checkpoints" / "step-00000012" / "model.safetensors")
    name = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(final.state_dict()[name], saved[name])
    assert (out / "final" / "tokenizer.json").is_file()
    assert json.loads((out / "summary.json").read_text())["final_loss"] == summary["final_loss"]


def test_lora_run_exports_adapter_and_merged_weights(tmp_path, capsys, tiny_model_dir, alpaca_file):
    cfg = base_cfg(
        tmp_path,
        tiny_model_dir,
        alpaca_file,
        method="lora",
        max_steps=10,
        learning_rate=3e-2,
        export_merged=True,
        peak_tflops=0.5,
    )
    summary = run_cli(capsys, cfg)
    rows = read_metrics(tmp_path / "out" / "metrics.jsonl")
    assert rows[-1]["loss"] < rows[0]["loss"] - 2.0, [r["loss"] for r in rows]
    assert all(0 < r["mfu"] < 1 for r in rows)  # peak given: MFU is reported
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out = tmp_path / "out"
    assert (out / "final" / "adapter_model.safetensors").is_file()
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    adapted = PeftModel.from_pretrained(base, out / "final").eval()
    merged = AutoModelForCausalLM.from_pretrained(out / "merged").eval()
    ids = torch.tensor([[151644, 872, 198, 9707, 151645]])
    with torch.no_grad():
        assert torch.allclose(adapted(input_ids=ids).logits, merged(input_ids=ids).logits, atol=1e-4)
        plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)(input_ids=ids).logits
    assert not torch.allclose(plain, merged(input_ids=ids).logits, atol=1e-3)  # training changed something
    assert summary["merged_dir"] == str(out / "merged")


@pytest.mark.slow
def test_no_matplotlib_no_curve_and_the_summary_says_null(tmp_path, capsys, monkeypatch, tiny_model_dir,
                                                           alpaca_file):
    """Without matplotlib no PNG is drawn: the summary names no file that does not exist."""
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    summary = run_cli(capsys, base_cfg(tmp_path, tiny_model_dir, alpaca_file, method="lora", max_steps=2))
    out = tmp_path / "out"
    assert not (out / "loss_curve.png").exists()
    assert summary["loss_curve"] is None
    assert json.loads((out / "summary.json").read_text())["loss_curve"] is None


def test_accumulation_equals_a_bigger_micro_batch(tmp_path, capsys, tiny_model_dir, alpaca_jsonl):
    """Loss is normalised over all tokens of a step, so 2 x 2 micro-batches == 1 x 4."""
    losses = []
    for mbs, gas in ((2, 2), (4, 1)):
        d = tmp_path / f"m{mbs}"
        d.mkdir()
        cfg = base_cfg(
            d,
            tiny_model_dir,
            alpaca_jsonl,
            method="full",
            max_steps=4,
            learning_rate=3e-3,
            micro_batch_size=mbs,
            gradient_accumulation_steps=gas,
        )
        run_cli(capsys, cfg)
        losses.append([r["loss"] for r in read_metrics(d / "out" / "metrics.jsonl")])
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)


def test_unpacked_run_and_bf16_autocast_on_cpu(tmp_path, capsys, tiny_model_dir, alpaca_jsonl):
    cfg = base_cfg(
        tmp_path,
        tiny_model_dir,
        alpaca_jsonl,
        method="lora",
        max_steps=3,
        packing=False,
        precision="bf16",
        gradient_checkpointing=False,
    )
    summary = run_cli(capsys, cfg)
    assert summary["packing"] is False and summary["precision"] == "bf16"
    assert all(r["loss"] > 0 for r in read_metrics(tmp_path / "out" / "metrics.jsonl"))


def test_checkpointing_k_of_l_layers_recomputes_k_and_keeps_the_losses(tmp_path, capsys, monkeypatch, tiny_model_dir,
                                                                         alpaca_jsonl):
    """gradient_checkpointing: a number of layers (issue 27.8): the run recomputes exactly that many decoder layers
    (counted), its losses are the all-checkpointed run's, and the summary says what was chosen."""
    from provisioner.train import loop
    from provisioner.train.model import decoder_layers

    counts: list[list[int]] = []
    real = loop.load_model

    def counting(*args, **kwargs):
        model = real(*args, **kwargs)
        calls = [0] * len(decoder_layers(model))
        counts.append(calls)
        for i, layer in enumerate(decoder_layers(model)):
            def run(*a, _i=i, _f=layer.mlp.forward, **kw):
                calls[_i] += 1
                return _f(*a, **kw)

            layer.mlp.forward = run  # not a hook: the recompute in backward runs without module hooks
        return model

    monkeypatch.setattr(loop, "load_model", counting)
    losses, summaries = [], []
    for gc in (True, 1):
        d = tmp_path / f"gc-{gc}"
        d.mkdir()
        cfg = base_cfg(d, tiny_model_dir, alpaca_jsonl, method="full", max_steps=2, learning_rate=3e-3,
                       gradient_checkpointing=gc)
        summaries.append(run_cli(capsys, cfg))
        losses.append([r["loss"] for r in read_metrics(d / "out" / "metrics.jsonl")])
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    every, first = counts
    backwards = every[0] - first[1]  # one recompute of a checkpointed layer per micro-batch trained
    assert backwards == 2 and every == [first[0]] * 2 and first[0] == first[1] + backwards
    facts = [s["gradient_checkpointing"] for s in summaries]
    assert facts == [{"setting": True, "checkpointed_layers": 2, "layers": 2, "why": None},
                     {"setting": 1, "checkpointed_layers": 1, "layers": 2, "why": None}]
    assert summaries[1]["memory"]["plan"]["checkpointed_layers"] == 1
