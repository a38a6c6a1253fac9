"""Real 2-process torchrun runs (gloo on CPU): training, kill -9 of a worker, exact resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from provisioner.train import checkpoint as ckpt
from provisioner.train.cli import main
from provisioner.train.metrics import read_metrics
from tests.train.conftest import PYTHON, train_env, write_config
from tests.train.test_checkpoint import _children

pytestmark = pytest.mark.slow


def torchrun(cfg: Path, *extra: str) -> list[str]:
    return [
        PYTHON,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "provisioner.train",
        "--config",
        str(cfg),
        *extra,
    ]


def run_ok(cfg: Path, *extra: str) -> dict:
    proc = subprocess.run(
        torchrun(cfg, "--json", *extra), env=train_env(), capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_cfg(d: Path, model: Path, data: Path, **over) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    values = dict(
        model=str(model),
        data=str(data),
        output_dir=str(d / "out"),
        max_seq_len=256,
        micro_batch_size=2,
        seed=5,
        save_steps=4,
        save_total_limit=0,
    )
    values.update(over)
    return write_config(d / "cfg.yaml", **values)


def test_torchrun_full_run(tmp_path, capsys, tiny_model_dir, alpaca_file):
    cfg = make_cfg(tmp_path, tiny_model_dir, alpaca_file, method="full", max_steps=8, learning_rate=3e-3)
    summary = run_ok(cfg)
    assert summary["world_size"] == 2 and summary["strategy"] == "ddp"
    rows = read_metrics(tmp_path / "out" / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert rows[-1]["loss"] < rows[0]["loss"] - 3.0, [r["loss"] for r in rows]
    assert all(r["tokens_per_s"] == pytest.approx(2 * r["tokens_per_s_per_device"], rel=1e-3) for r in rows)
    last = ckpt.complete_checkpoints(tmp_path / "out")[-1]
    assert sorted(p.name for p in (last / "rng").iterdir()) == ["rank-00000.pt", "rank-00001.pt"]
    assert (last / "model.safetensors").is_file() and (last / "optimizer.pt").is_file()
    # Two ranks x 1 micro-batch take the same micro-batches per step as one process x 2, and the loss is
    # normalised over the whole step, so the runs agree: the gradient averaging is exact.
    single = make_cfg(
        tmp_path / "single",
        tiny_model_dir,
        alpaca_file,
        method="full",
        max_steps=8,
        learning_rate=3e-3,
        gradient_accumulation_steps=2,
    )
    assert main(["--config", str(single)]) == 0
    single_rows = read_metrics(tmp_path / "single" / "out" / "metrics.jsonl")
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in single_rows], rel=1e-4)
    assert [r["tokens"] for r in rows] == [r["tokens"] for r in single_rows]
    # Resuming from the final checkpoint has nothing left to do and still reports the final loss (asked of the
    # in-process run: a third torchrun launch would only add the start-up of three processes).
    capsys.readouterr()
    assert main(["--config", str(single), "--resume", "auto", "--json"]) == 0
    again = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    single_final = json.loads((tmp_path / "single" / "out" / "summary.json").read_text())["final_loss"]
    assert again["resumed_from"].endswith("step-00000008") and again["final_loss"] == single_final
    assert [r["step"] for r in read_metrics(tmp_path / "single" / "out" / "metrics.jsonl")] == list(range(1, 9))


# In the `full` tier (make test-all): make test runs the same kill -9 of a worker and exact resume with FSDP
# (tests/train/test_sharded.py), and the RNG state's exact restore through the crash tests of test_checkpoint.py.
@pytest.mark.full
def test_kill_9_of_a_worker_then_resume_matches_an_uninterrupted_run(tmp_path, tiny_model_dir, alpaca_file):
    # LoRA dropout draws random numbers every step, so RNG state must be restored exactly too.
    common = dict(
        method="lora",
        max_steps=12,
        learning_rate=3e-2,
        gradient_accumulation_steps=2,
        save_steps=3,
        lora={"dropout": 0.1},
    )
    ref_cfg = make_cfg(tmp_path / "ref", tiny_model_dir, alpaca_file, **common)
    reference = run_ok(ref_cfg)
    ref_rows = read_metrics(tmp_path / "ref" / "out" / "metrics.jsonl")
    assert ref_rows[-1]["loss"] < ref_rows[0]["loss"] - 2.0, [r["loss"] for r in ref_rows]  # LoRA learns

    cfg = make_cfg(tmp_path / "kill", tiny_model_dir, alpaca_file, **common)
    metrics = tmp_path / "kill" / "out" / "metrics.jsonl"
    proc = subprocess.Popen(
        torchrun(cfg), env=train_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if metrics.exists() and any(r["step"] >= 7 for r in read_metrics(metrics)):
            break
        time.sleep(0.02)
    workers = _children(proc.pid)
    assert len(workers) == 2, "expected two worker processes under torchrun"
    os.kill(workers[1], signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode != 0, "torchrun should fail when a worker is killed"
    steps_before = [r["step"] for r in read_metrics(metrics)]
    assert 7 <= steps_before[-1] < 12

    resumed = run_ok(cfg, "--resume", "auto")
    resumed_step = int(Path(resumed["resumed_from"]).name.split("-")[1])
    assert resumed_step % 3 == 0 and 6 <= resumed_step <= steps_before[-1]
    rows = read_metrics(metrics)
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert resumed["final_loss"] == pytest.approx(reference["final_loss"], rel=1e-5)
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in ref_rows], rel=1e-5)


def zero2_offload_run(tmp_path: Path, model: Path, data: Path) -> tuple[Path, dict]:
    """A 2-rank ZeRO-2 LoRA run with the optimizer offloaded to CPU Adam: 6 steps, checkpoints at 3 and 6."""
    pytest.importorskip("deepspeed", reason="deepspeed is optional; ZeRO-2 is tested where it is installed")
    zcfg = make_cfg(tmp_path / "zero", model, data, strategy="zero2", offload_optimizer=True, **ZERO2_COMMON)
    zero = run_ok(zcfg)
    assert zero["strategy"] == "zero2" and zero["world_size"] == 2
    return zcfg, zero


# No LoRA dropout: then 2 ranks x 2 samples take the same steps as one process x 2 micro-batches of 2, which
# test_torchrun_full_run shows DDP does exactly, so one in-process run stands in for the DDP reference.
ZERO2_COMMON = dict(method="lora", max_steps=6, learning_rate=3e-2, save_steps=3, lora={"dropout": 0.0})


def test_zero2_offload_matches_ddp(tmp_path, tiny_model_dir, alpaca_file):
    zcfg, zero = zero2_offload_run(tmp_path, tiny_model_dir, alpaca_file)
    single = make_cfg(tmp_path / "single", tiny_model_dir, alpaca_file, gradient_accumulation_steps=2,
                      **ZERO2_COMMON)
    assert main(["--config", str(single)]) == 0
    ref_rows = read_metrics(tmp_path / "single" / "out" / "metrics.jsonl")
    zero_rows = read_metrics(tmp_path / "zero" / "out" / "metrics.jsonl")
    assert [r["tokens"] for r in zero_rows] == [r["tokens"] for r in ref_rows]
    for key in ("loss", "grad_norm", "lr"):
        assert [r[key] for r in zero_rows] == pytest.approx([r[key] for r in ref_rows], rel=1e-4), key
    last = ckpt.complete_checkpoints(tmp_path / "zero" / "out")[-1]
    assert (last / "zero").is_dir() and (last / "adapter_model.safetensors").is_file()


# The second DeepSpeed launch (ZeRO-2's own resume, ~50 s under make test's load) is in the `full` tier (make
# test-all); make test resumes the sharded FSDP state after a kill -9 (test_sharded.py).
@pytest.mark.full
def test_zero2_offload_resumes_exactly(tmp_path, tiny_model_dir, alpaca_file):
    zcfg, zero = zero2_offload_run(tmp_path, tiny_model_dir, alpaca_file)
    last = ckpt.complete_checkpoints(tmp_path / "zero" / "out")[-1]
    # Resume from step 3 (as if the run had died after it) and land on the same loss.
    import shutil

    shutil.rmtree(last)
    resumed = run_ok(zcfg, "--resume", "auto")
    assert resumed["resumed_from"].endswith("step-00000003")
    assert resumed["final_loss"] == pytest.approx(zero["final_loss"], rel=1e-5)
