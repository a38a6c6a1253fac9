"""The jobs as the frameworks run them at the commits the matrix pins (matrices/jobs.yaml `sources:`): what the
rendered scripts and configs pass, checked against the upstream behaviour each row cites."""

from __future__ import annotations

import pytest
import yaml

from provisioner.jobs import plan
from tests.jobs.conftest import SFT


def build(shipped, job, stack, card="800T-A2", chips=4, nnodes=1):
    return plan.build(shipped, job, card=card, chips_per_node=chips, nnodes=nnodes, stack=stack, image="image img")


def refused(shipped, job, stack, **kw) -> str:
    with pytest.raises(plan.JobRefused) as exc:
        build(shipped, job, stack, **kw)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


MS_SFT = SFT.replace("mindspeed-llm-sft", "mindspore-sft")


# -- MindSpore Transformers -------------------------------------------------------------------------------


def test_mindspore_sft_loads_the_hf_safetensors_without_a_torch_conversion(shipped, stacks, sft_job):
    """MindFormers >= 1.5.0 loads the Hugging Face safetensors directory itself (research/qwen2_5/README.md);
    convert_weight.py imports torch, which the MindSpore image lacks: no convert step."""
    p = build(shipped, sft_job(MS_SFT), stacks["mindformers"])
    assert [s.id for s in p.steps] == ["preprocess", "train"]
    assert not any("convert_weight" in text or "import torch" in text for text in p.files.values())
    cfg = yaml.safe_load(p.files["configs/finetune.yaml"])
    assert (cfg["load_checkpoint"], cfg["load_ckpt_format"], cfg["auto_trans_ckpt"]) == (
        "/models/Qwen2.5-7B", "safetensors", True)
    (monitor,) = [c for c in cfg["callbacks"] if c["type"] == "CheckpointMonitor"]
    assert monitor["checkpoint_format"] == "safetensors"  # a resume reads the format load_ckpt_format names
    train = p.files["steps/02-train.sh"]
    assert "load_args=(--load_checkpoint /models/Qwen2.5-7B --auto_trans_ckpt True)" in train
    assert '--load_checkpoint "$out/checkpoint" --resume_training True' in train
