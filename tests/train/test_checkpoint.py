"""Atomic checkpoints: an interrupted write never yields a checkpoint that resume accepts but cannot load."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from provisioner.train import checkpoint as ckpt
from provisioner.train.cli import main
from provisioner.train.metrics import read_metrics
from tests.train.conftest import PYTHON, train_env, write_config


def cfg_file(tmp_path, model, data, **over):
    values = dict(
        model=str(model),
        data=str(data),
        output_dir=str(tmp_path / "out"),
        method="full",
        max_seq_len=256,
        micro_batch_size=2,
        learning_rate=3e-3,
        seed=11,
        save_total_limit=0,
    )
    values.update(over)
    return write_config(tmp_path / "cfg.yaml", **values)


def assert_loadable(path: Path) -> None:
    """Open every file the manifest lists the way resume does."""
    from safetensors.torch import load_file

    manifest = json.loads((path / ckpt.MANIFEST).read_text())
    assert manifest["files"], path
    for rel in manifest["files"]:
        f = path / rel
        if f.suffix == ".safetensors":
            assert load_file(str(f))
        elif f.suffix == ".pt":
            torch.load(f, map_location="cpu", weights_only=True)
        elif f.suffix == ".json":
            json.loads(f.read_text())
    state = ckpt.read_state(path)
    assert state.step == int(path.name.split("-")[1])


def test_incomplete_checkpoints_are_never_picked(tmp_path, capsys, tiny_model_dir, alpaca_jsonl):
    assert (
        main(["--config", str(cfg_file(tmp_path, tiny_model_dir, alpaca_jsonl, max_steps=4, save_steps=2))])
        == 0
    )
    out = tmp_path / "out"
    two, four = (out / "checkpoints" / n for n in ("step-00000002", "step-00000004"))
    # Starting afresh on top of an old run's checkpoints is refused (exit 2, one line).
    assert main(["--config", str(cfg_file(tmp_path, tiny_model_dir, alpaca_jsonl, max_steps=4))]) == 2
    assert "already holds checkpoints (newest step-00000004); pass --resume auto" in capsys.readouterr().err
    assert ckpt.complete_checkpoints(out) == [two, four]
    for p in (two, four):
        assert_loadable(p)
    # A truncated file (e.g. storage lost the tail) disqualifies the checkpoint.
    opt = four / "optimizer.pt"
    opt.write_bytes(opt.read_bytes()[:100])
    assert ckpt.find_resume(out, "auto") == two
    # No manifest, or a state that disagrees with the name: not a checkpoint either.
    (two / ckpt.MANIFEST).unlink()
    assert ckpt.find_resume(out, "auto") is None
    with pytest.raises(ckpt.ConfigError, match="not a complete checkpoint"):
        ckpt.find_resume(out, str(two))
    # Leftovers of an interrupted write are ignored and cleaned at the next start.
    stale = out / "checkpoints" / ".tmp-step-00000006"
    stale.mkdir()
    (stale / ckpt.MANIFEST).write_text("{}")
    assert ckpt.find_resume(out, "auto") is None
    ckpt.clean_stale(out)
    assert not stale.exists()


def test_crash_inside_a_checkpoint_write_keeps_the_previous_one(
    tmp_path, capsys, tiny_model_dir, alpaca_jsonl, monkeypatch
):
    # LoRA with dropout draws random numbers every step: the resumed run matches only if the checkpoint's RNG
    # state comes back exactly too.
    run = dict(max_steps=6, save_steps=2, method="lora", learning_rate=3e-2, lora={"dropout": 0.1})
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    assert main(["--config", str(cfg_file(ref_dir, tiny_model_dir, alpaca_jsonl, **run))]) == 0
    reference = read_metrics(ref_dir / "out" / "metrics.jsonl")

    cfg = cfg_file(tmp_path, tiny_model_dir, alpaca_jsonl, **run)
    real_save = ckpt.save_torch
    calls = {"n": 0}

    def dying_save(obj, path):
        calls["n"] += 1
        if "step-00000004" in str(path):
            real_save(obj, path)
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # half written
            raise RuntimeError("simulated crash while writing")
        real_save(obj, path)

    monkeypatch.setattr(ckpt, "save_torch", dying_save)
    with pytest.raises(RuntimeError, match="simulated crash"):
        main(["--config", str(cfg)])
    out = tmp_path / "out"
    assert [p.name for p in ckpt.complete_checkpoints(out)] == ["step-00000002"]
    assert (out / "checkpoints" / ".tmp-step-00000004").is_dir()
    monkeypatch.setattr(ckpt, "save_torch", real_save)

    assert main(["--config", str(cfg), "--resume", "auto"]) == 0
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]  # lines past the checkpoint were replaced
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in reference], rel=1e-6)
    assert [p.name for p in ckpt.complete_checkpoints(out)] == [
        "step-00000002",
        "step-00000004",
        "step-00000006",
    ]


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def newest_step(out: Path) -> int:
    done = ckpt.complete_checkpoints(out)
    return int(done[-1].name.split("-")[1]) if done else 0


# Eight kill -9s at random moments (~40 s on 2 cores): the `full` tier (make test-all). make test keeps the
# deterministic forms: a crash inside a checkpoint write, and incomplete checkpoints never picked.
@pytest.mark.slow
@pytest.mark.full
def test_kill_9_at_random_moments_of_checkpoint_writes(tmp_path, tiny_model_dir, alpaca_jsonl):
    """Checkpoint every step (full weights + optimizer: most of the time goes to writing), kill -9 at
    random moments, and check every checkpoint resume would accept really loads."""
    cfg = cfg_file(tmp_path, tiny_model_dir, alpaca_jsonl, max_steps=400, save_steps=1, save_total_limit=3)
    out = tmp_path / "out"
    rng = random.Random(1)
    kills_mid_write = 0
    for attempt in range(8):
        proc = subprocess.Popen(
            [PYTHON, "-m", "provisioner.train", "--config", str(cfg), "--resume", "auto"],
            env=train_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.time() + 600  # a loaded machine starts torch slowly
            before = newest_step(out)
            while newest_step(out) <= before and time.time() < deadline:  # this run has saved once
                time.sleep(0.02)
            if attempt % 2 == 0:  # at a random moment
                time.sleep(rng.uniform(0.0, 0.6))
            else:  # as soon as a write is under way, whatever the machine's speed
                while not list((out / "checkpoints").glob(".tmp-*")) and time.time() < deadline:
                    time.sleep(0.005)
                time.sleep(rng.uniform(0.0, 0.01))
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if list((out / "checkpoints").glob(".tmp-*")):
            kills_mid_write += 1
        done = ckpt.complete_checkpoints(out)
        assert done, "no checkpoint survived"
        for p in done:
            assert_loadable(p)
        if kills_mid_write >= 2 and attempt >= 2:
            break
    assert kills_mid_write >= 1, "never managed to kill during a write"
    newest = ckpt.step_dir_name(newest_step(out))
    last = newest_step(out) + 2
    proc = subprocess.run(
        [
            PYTHON,
            "-m",
            "provisioner.train",
            "--config",
            str(cfg),
            "--resume",
            "auto",
            f"max_steps={last}",
            "--json",
        ],
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["resumed_from"].endswith(newest)
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == list(range(1, last + 1))
