"""Bounded checkpoints: what a job writes under its output (provisioner.jobs.disk), the free-space refusal, and
the rendered pruning function run with real bash over a Megatron-style save directory."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from provisioner.errors import ProvisionError
from provisioner.jobs import disk, plan
from tests.jobs.conftest import SFT

MS_SFT = SFT.replace("mindspeed-llm-sft", "mindspore-sft")


def build(shipped, job, stack, chips=4):
    return plan.build(shipped, job, card="800T-A2", chips_per_node=chips, stack=stack, image="image img")


def test_a_7b_sft_checkpoint_is_107_gb_and_the_job_keeps_two_plus_the_one_being_written(shipped, stacks, sft_job):
    """Qwen2.5-7B: 14 bytes a parameter (bf16 weights, fp32 master weights and Adam moments of the distributed
    optimizer): the ~107 GB the issue measured. 2000 steps saved every 500 are 4 checkpoints (428 GB before);
    the job holds 2 + 1 while the next is written, next to the converted and the exported weights."""
    p = build(shipped, sft_job(), stacks["llm"])
    d = p.disk
    assert round(d["checkpoint_bytes"] / disk.GB) == 107
    assert (d["saves"], d["keep_checkpoints"], d["checkpoints_held"]) == (4, 2, 3)
    assert d["parts_bytes"]["weights"] == d["parts_bytes"]["export"] == p.shape.params() * 2
    assert d["total_bytes"] == 3 * d["checkpoint_bytes"] + 2 * p.shape.params() * 2
    assert disk.describe(d) == ("about 350 GB: 3 checkpoints of 107 GB with optimizer state (train.keep_checkpoints 2,"
                                " and one more while the next is written), converted weights 15 GB, final Hugging"
                                " Face weights 15 GB")
    assert p.to_dict()["disk"] == d
    one = build(shipped, sft_job(SFT.replace("save_interval: 500", "save_interval: 500, keep_checkpoints: 1")),
                stacks["llm"])
    assert one.disk["checkpoints_held"] == 2 and one.disk["total_bytes"] < d["total_bytes"]


def test_mindformers_keeps_its_checkpoints_with_keep_checkpoint_max(shipped, stacks, sft_job):
    import yaml

    p = build(shipped, sft_job(MS_SFT.replace("save_interval: 500", "save_interval: 500, keep_checkpoints: 3")),
              stacks["mindformers"])
    (monitor,) = [c for c in yaml.safe_load(p.files["configs/finetune.yaml"])["callbacks"]
                  if c["type"] == "CheckpointMonitor"]
    assert monitor["keep_checkpoint_max"] == 3
    # no converted copy, no export: fp32 weights and Adam moments (12 bytes a parameter), 4 held of 4 saves
    assert p.disk["parts_bytes"]["weights"] == p.disk["parts_bytes"]["export"] == 0
    assert p.disk["checkpoint_bytes"] == p.shape.params() * 12 and p.disk["checkpoints_held"] == 4


def test_keep_checkpoints_must_be_a_whole_number(sft_job):
    with pytest.raises(ProvisionError) as exc:
        sft_job(SFT.replace("save_interval: 500", "save_interval: 500, keep_checkpoints: -1"))
    assert str(exc.value).endswith("job.yaml:6: train.keep_checkpoints must be a whole number >= 0, got -1")


def _words(script: str) -> set[str]:
    return set(script.replace("\\\n", " ").split())


def test_keep_0_with_one_save_writes_the_last_iteration_without_optimizer_state(shipped, stacks, sft_job):
    """keep_checkpoints 0 and no save_interval: the only save is the last iteration, nothing resumes from it, so
    it is written with --no-save-optim --no-save-rng (Megatron's checkpointing.py @ baf94af3 / a845aa7e leaves the
    optimizer and RNG state out): 2 bytes a parameter instead of 14; the export removes it once the Hugging Face
    weights are written, and the output keeps those and the converted weights only."""
    p = build(shipped, sft_job(SFT.replace("save_interval: 500", "keep_checkpoints: 0")), stacks["llm"])
    params = p.shape.params()
    d = p.disk
    assert (d["saves"], d["checkpoints_held"], d["optimizer_state"]) == (1, 1, False)
    assert d["checkpoint_bytes"] == params * 2 and d["total_bytes"] == 3 * params * 2
    assert d["kept_bytes"] == 2 * params * 2
    assert disk.describe(d) == ("about 46 GB: 1 checkpoint of 15 GB without optimizer state (train.keep_checkpoints"
                                " 0), converted weights 15 GB, final Hugging Face weights 15 GB; 30 GB kept after"
                                " the export (the checkpoints removed)")
    train = _words(p.files["steps/03-train.sh"])
    assert {"--no-save-optim", "--no-save-rng", "--save-interval"} <= train
    export = p.files["steps/04-export.sh"]
    assert export.index('publish "$partial/mg2hf" "$out"') < export.index(f"rm -rf {p.paths['checkpoints']}\n")
    # the default keeps the checkpoints, each with its optimizer state
    default = build(shipped, sft_job(SFT.replace("save_interval: 500", "")), stacks["llm"])
    assert "--no-save-optim" not in default.files["steps/03-train.sh"]
    assert "rm -rf " + default.paths["checkpoints"] not in default.files["steps/04-export.sh"]
    assert default.disk["kept_bytes"] == default.disk["total_bytes"] and default.disk["optimizer_state"]


def test_keep_0_with_saves_on_the_way_keeps_one_resumable_checkpoint_until_the_export(shipped, stacks, sft_job):
    """With save_interval the saves on the way are for a resume: they keep the optimizer state, the newest one
    stays while training runs (the pruner keeps 1), and the export step removes the last one."""
    p = build(shipped, sft_job(SFT.replace("save_interval: 500", "save_interval: 500, keep_checkpoints: 0")),
              stacks["llm"])
    d = p.disk
    assert (d["saves"], d["checkpoints_held"], d["optimizer_state"]) == (4, 2, True)
    assert d["kept_bytes"] == 2 * p.shape.params() * 2 < d["total_bytes"]
    assert "--no-save-optim" not in p.files["steps/03-train.sh"]
    assert "\nkeep_checkpoints=1\n" in p.files["steps/03-train.sh"]
    assert f"rm -rf {p.paths['checkpoints']}\n" in p.files["steps/04-export.sh"]


def test_keep_0_is_refused_where_nothing_is_exported(shipped, stacks, sft_job):
    """MindSpore Transformers jobs have no export step: their checkpoints are the result."""
    with pytest.raises(plan.JobRefused) as exc:
        build(shipped, sft_job(MS_SFT.replace("save_interval: 500", "keep_checkpoints: 0")), stacks["mindformers"])
    assert ("job.yaml:6: keep_checkpoints 0 removes the checkpoints once the final weights are exported, and"
            " mindspore-sft jobs export nothing") in str(exc.value)


class _Vfs:
    def __init__(self, free: int):
        self.f_bavail, self.f_frsize = free // 4096, 4096


def test_the_output_filesystem_must_hold_what_the_job_writes(shipped, stacks, sft_job, tmp_path):
    job = sft_job(SFT.replace("/output/qwen25-7b-sft", str(tmp_path / "out" / "sft")))
    p = build(shipped, job, stacks["llm"])
    need = p.disk["total_bytes"]
    seen = []

    def vfs(free):
        return lambda path: seen.append(path) or _Vfs(free)

    assert disk.check(job, p.disk, vfs(need + 4096)) == []
    assert seen == [str(tmp_path)]  # the nearest parent that exists: the filesystem the output is created on
    (msg,) = disk.check(job, p.disk, vfs(100 * disk.GB))
    assert "job.yaml:7: the job writes about 350 GB: 3 checkpoints" in msg
    assert msg.endswith(f"under {tmp_path / 'out' / 'sft'}, and its filesystem has 100 GB free; free space, lower"
                        " train.keep_checkpoints or choose another output")
    # what an earlier run wrote there counts as written
    out = tmp_path / "out" / "sft"
    out.mkdir(parents=True)
    (out / "blob").write_bytes(b"\0" * 8192)
    assert disk.check(job, p.disk, vfs(need - 4096)) == []

    def unreadable(path):
        raise PermissionError(path)

    assert disk.check(job, p.disk, unreadable) == []  # nothing read, nothing said


def _prune_function(script: str) -> str:
    m = re.search(r"(?ms)^keep_checkpoints=\d+\nprune_checkpoints\(\) \{\n.*?^\}\n", script)
    assert m, "no prune_checkpoints function in the train step"
    return m.group(0)


@pytest.mark.parametrize("kind", ["mindspeed-llm-sft", "mindspeed-rl-grpo"])
def test_the_train_step_prunes_complete_iterations_beyond_the_newest_kept(kind, shipped, stacks, sft_job, tmp_path):
    """Real bash over a save directory laid out as Megatron's checkpointing.py writes it (iter_%07d, then the
    tracker): the oldest complete iterations go, the newest keep_checkpoints stay, and an iteration above the
    tracker's (still being written) is never touched; a tracker that names no iteration prunes nothing."""
    from tests.jobs.conftest import EXAMPLES

    if kind == "mindspeed-llm-sft":
        p, script = build(shipped, sft_job(), stacks["llm"]), "steps/03-train.sh"
    else:
        p = build(shipped, sft_job((EXAMPLES / "seed000-grpo-qwen25-7b.yaml").read_text()), stacks["rl"], chips=8)
        script = next(f"steps/{s.script}" for s in p.steps if s.id == "train")
    text = p.files[script]
    assert text.index("start_pruner\n") < text.index("stop_pruner\n") < text.rindex("prune_checkpoints\n")
    save = tmp_path / "save"
    for it in (500, 1000, 1500, 2000):
        (save / f"iter_{it:07d}" / "mp_rank_00").mkdir(parents=True)
    (save / "latest_checkpointed_iteration.txt").write_text("1500")
    body = _prune_function(text)
    run = f'set -euo pipefail\nNODE_RANK=0\nsave="$1"\ntracker="$save/latest_checkpointed_iteration.txt"\n{body}prune_checkpoints\n'
    other = run.replace("NODE_RANK=0", "NODE_RANK=1")  # node 0 prunes; the others see the same shared directory
    subprocess.run(["bash", "-c", other, "prune", str(save)], capture_output=True, check=True)
    assert len(list(save.glob("iter_*"))) == 4
    out = subprocess.run(["bash", "-c", run, "prune", str(save)], capture_output=True, text=True, check=True)
    assert sorted(os.listdir(save)) == ["iter_0001000", "iter_0001500", "iter_0002000",
                                        "latest_checkpointed_iteration.txt"]
    assert out.stdout == "[provision-job] removing checkpoint iter_0000500 (train.keep_checkpoints: 2)\n"
    (save / "latest_checkpointed_iteration.txt").write_text("2000")
    subprocess.run(["bash", "-c", run, "prune", str(save)], check=True, capture_output=True)
    assert sorted(os.listdir(save))[:2] == ["iter_0001500", "iter_0002000"]
    (save / "latest_checkpointed_iteration.txt").write_text("release")
    subprocess.run(["bash", "-c", run, "prune", str(save)], check=True, capture_output=True)
    assert len(list(save.glob("iter_*"))) == 2
    assert Path(save / "iter_0002000" / "mp_rank_00").is_dir()
