"""GRPO end to end on CPU through the real CLI and TRL: a learnable reward goes up, every metric is
logged, the reward panel is drawn and the policy is exported as a plain Hugging Face directory."""

from __future__ import annotations

import json

import pytest

from provisioner.train.cli import main
from provisioner.train.metrics import read_metrics
from tests.train.conftest import build_tiny_model, write_config

pytestmark = pytest.mark.slow
pytest.importorskip("trl")

# A random model with a peaked output distribution (large init) repeats a few tokens per context, so the
# groups carry signal from the first step (the demo's GRPO job builds the same model).
@pytest.fixture(scope="module")
def peaked_model(tmp_path_factory, tokenizer):
    return build_tiny_model(tmp_path_factory.mktemp("peaked-qwen2"), tokenizer, seed=0, init_range=1.0)


def prompts(path, n=4):
    path.write_text(
        "".join(
            json.dumps({"messages": [{"role": "user", "content": f"Say something about topic {i}."}], "ground_truth": str(i)})
            + "\n"
            for i in range(n)
        )
    )
    return path


def run(capsys, cfg) -> dict:
    rc = main(["--config", str(cfg), "--json"])
    out = capsys.readouterr().out.strip().splitlines()
    assert rc == 0
    return json.loads(out[-1])


def test_grpo_raises_a_learnable_reward_with_kl_and_clipping(tmp_path, capsys, peaked_model):
    """The demo's GRPO job (provisioner/demo/job.py prepare_grpo): the toy reward rises clearly."""
    from provisioner.demo.job import prepare_grpo

    args = prepare_grpo(tmp_path, root=str(tmp_path), model=peaked_model)
    cfg = args[1]
    key = f"{tmp_path}/toy_reward.py:ascii_only"
    summary = run(capsys, cfg)
    assert summary["method"] == "grpo" and summary["tuning"] == "full" and summary["steps"] == 24
    assert summary["rollout"] == "generate" and summary["device_type"] == "cpu"
    rows = read_metrics(tmp_path / "grpo-out" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 25))
    sampled = [r for r in rows if r["reward_mean"] is not None]  # generation steps (every other step)
    assert len(sampled) == 12
    first = sum(r["reward_mean"] for r in sampled[:3]) / 3
    last = sum(r["reward_mean"] for r in sampled[-3:]) / 3
    curve = [round(r["reward_mean"], 3) for r in sampled]
    print("reward per generation step:", curve)
    assert last > first + 0.3 and last > 0.75, curve  # about 0.25 -> 1.0
    assert all(r["rewards"][key] == pytest.approx(r["reward_mean"], abs=1e-6) for r in sampled)
    assert all(r["rewards"]["format"] == 0.0 for r in sampled)
    assert all(1.0 <= r["completion_length"] <= 4.0 and r["reward_std"] >= 0 for r in sampled)
    assert all(r["tokens"] > 0 and r["tokens_per_s"] > 0 for r in sampled)
    assert all(r["kl"] is not None and r["kl"] >= 0 for r in rows) and max(r["kl"] for r in rows) > 0
    assert all(r["clip_ratio"] is not None and 0 <= r["clip_ratio"] <= 1 for r in rows)
    assert summary["reward_last"] == sampled[-1]["reward_mean"]
    out = tmp_path / "grpo-out"
    import matplotlib.image

    height, width = matplotlib.image.imread(str(out / "loss_curve.png")).shape[:2]
    assert (width, height) == (800, 720)  # the loss panel and the reward panel
    assert summary["loss_curve"] == str(out / "loss_curve.png")
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out / "final")
    assert (out / "final" / "tokenizer.json").is_file()
    assert summary["checkpoint"].endswith("checkpoint-24")
    assert summary["memory"]["estimate_gib"] > 0 and summary["memory"]["measured_peak_gib"] > 0


def test_grpo_lora_exports_adapter_and_merged_model(tmp_path, capsys, monkeypatch, peaked_model):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # no matplotlib: no curve, and the summary says so
    cfg = write_config(
        tmp_path / "cfg.yaml",
        model=str(peaked_model),
        data=str(prompts(tmp_path / "prompts.jsonl", 2)),
        output_dir=str(tmp_path / "out"),
        method="grpo",
        max_steps=2,
        micro_batch_size=4,
        save_steps=0,
        export_merged=True,
        grpo=dict(num_generations=4, max_completion_len=8, rewards=["math", "format"]),
    )
    summary = run(capsys, cfg)
    assert summary["tuning"] == "lora" and summary["rewards"] == ["math", "format"]
    rows = read_metrics(tmp_path / "out" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and set(rows[0]["rewards"]) == {"math", "format"}
    assert summary["checkpoint"] is None  # save_steps 0: no checkpoints, only the export
    out = tmp_path / "out"
    assert summary["loss_curve"] is None and not (out / "loss_curve.png").exists()
    assert (out / "final" / "adapter_model.safetensors").is_file()
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(out / "merged")


def test_grpo_full_with_fsdp_across_two_processes(tmp_path, peaked_model):
    """The strategy maps onto accelerate's FSDP2 plugin: two ranks sample, score and update one policy."""
    from tests.train.test_distributed import run_ok

    cfg = write_config(
        tmp_path / "cfg.yaml",
        model=str(peaked_model),
        data=str(prompts(tmp_path / "prompts.jsonl")),
        output_dir=str(tmp_path / "out"),
        method="grpo",
        strategy="fsdp",
        max_steps=2,
        learning_rate=5e-3,
        micro_batch_size=8,
        save_steps=0,
        system_prompt="",
        grpo=dict(tuning="full", num_generations=8, max_completion_len=4, beta=0.02, rewards=["format"]),
    )
    summary = run_ok(cfg)
    assert summary["world_size"] == 2 and summary["strategy"] == "fsdp" and summary["steps"] == 2
    rows = read_metrics(tmp_path / "out" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and all(r["kl"] is not None for r in rows)
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(tmp_path / "out" / "final")  # gathered from the shards
