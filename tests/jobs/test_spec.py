"""The job file: every field checked, every error one line naming file:line."""

from __future__ import annotations

import pytest

from provisioner.errors import ProvisionError
from provisioner.jobs import spec
from tests.jobs.conftest import QWEN7B_CONFIG, SFT, write_job


def test_a_valid_job_file(sft_job):
    job = sft_job()
    assert (job.kind, job.name, job.model, job.output) == ("mindspeed-llm-sft", "qwen25-7b-sft", "/models/Qwen2.5-7B",
                                                            "/output/qwen25-7b-sft")
    assert job.parallel == spec.Parallel(2, 1, 2) and job.parallel.chips == 4
    assert (job.train.seq_length, job.train.global_batch_size, job.train.steps, job.train.save_every) == (4096, 64, 2000, 500)
    assert job.train.micro_batch_size == 1 and job.resume is True and job.storage == "shared"
    assert job.data.format == "alpaca" and job.grpo is None
    assert job.model_config.endswith("/config.json")
    assert job.to_dict()["model_config"] == "config.json" and job.to_dict()["source"] == "job.yaml"


def _error(tmp_path, text: str, config=QWEN7B_CONFIG) -> str:
    path = write_job(tmp_path, text, config=config)
    with pytest.raises(ProvisionError) as exc:
        spec.load(str(path))
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


@pytest.mark.parametrize("edit, line, words", [
    (("parallel:", "paralell:"), 5, "unknown key 'paralell'"),
    (("steps: 2000", "steps: 2000, stpes: 3"), 6, "unknown key 'stpes' in train"),
    (("tensor: 2", "tensor: two"), 5, "parallel.tensor must be a whole number >= 1"),
    (("tensor: 2", "tensor: 0"), 5, "parallel.tensor must be a whole number >= 1"),
    (("/output/qwen25-7b-sft", "/output/my job"), 7, "give an absolute path"),
    (("/output/qwen25-7b-sft", "output/rel"), 7, "give an absolute path"),
    (("/output/qwen25-7b-sft", "/output/../etc"), 7, "no spaces, quotes, variables or '..'"),
    (("/models/Qwen2.5-7B", "/models/$(reboot)"), 3, "give an absolute path"),
    (("name: qwen25-7b-sft", "name: Qwen_SFT"), 2, "use lower-case letters, digits and '-'"),
    (("format: alpaca", "format: csv"), 4, "data.format must be one of alpaca, sharegpt, orz"),
    (("/data/alpaca_data.json", "/alpaca_data.json"), 4, "put the data file in a directory of its own"),
    (("/data/alpaca_data.json", "/"), 4, "put the data file in a directory of its own"),
    (("save_interval: 500", "save_interval: 5000"), 6, "save_interval 5000 is more than steps 2000"),
    (("save_interval: 500", "save_interval: 500, lr: .nan"), 6, "train.lr must be a finite, non-negative number"),
    (("save_interval: 500", "save_interval: 500, lr: .inf"), 6, "train.lr must be a finite, non-negative number"),
    (("save_interval: 500", "save_interval: 500, min_lr: nan"), 6, "train.min_lr must be a finite"),
    (("save_interval: 500", "save_interval: 500, weight_decay: -.inf"), 6, "train.weight_decay must be a finite"),
    (("save_interval: 500", "save_interval: 500, lr: -1"), 6, "train.lr must be a finite, non-negative number"),
    (("output: /output/qwen25-7b-sft", "output: /output/qwen25-7b-sft\ngrpo: {temperature: .inf}"), 8,
     "grpo.temperature must be a finite, non-negative number"),
])
def test_field_errors_name_the_line(tmp_path, edit, line, words):
    old, new = edit
    assert old in SFT
    msg = _error(tmp_path, SFT.replace(old, new))
    assert msg.startswith(f"{tmp_path / 'job.yaml'}:{line}: ") and words in msg, msg


def test_missing_section_and_missing_field(tmp_path):
    assert "the job file needs train:" in _error(tmp_path, SFT.replace("train: {seq_length: 4096, global_batch_size: 64,"
                                                                       " steps: 2000, save_interval: 500}\n", ""))
    msg = _error(tmp_path, SFT.replace("steps: 2000, ", ""))
    assert msg.endswith("train needs steps:") and ":6:" in msg


def test_env_values_are_checked_before_they_reach_a_script(tmp_path):
    msg = _error(tmp_path, SFT + 'env:\n  HCCL_CONNECT_TIMEOUT: "1800$(id)"\n')
    assert ":9:" in msg and "no quotes or $" in msg
    msg = _error(tmp_path, SFT + "env:\n  HCCL_CONNECT_TIMEOUT: 1800.5\n")
    assert "give the value as text" in msg
    # A trailing newline is no escape: the grammars anchor at the very end (\Z, not $).
    assert ":9:" in _error(tmp_path, SFT + 'env:\n  HCCL_CONNECT_TIMEOUT: "1800\\n"\n')


def test_grpo_section_and_model_config(tmp_path):
    text = SFT.replace("mindspeed-llm-sft", "mindspeed-rl-grpo") + "grpo: {n_samples_per_prompt: 4, reward: [base_acc], gpu_memory_utilization: 0.5}\n"
    job = spec.load(str(write_job(tmp_path, text)))
    assert job.grpo.n_samples_per_prompt == 4 and job.grpo.gpu_memory_utilization == 0.5
    assert job.grpo.reward == ("base_acc",) and job.grpo.infer_tensor_parallel is None
    assert "gpu_memory_utilization must be in (0, 1)" in _error(tmp_path, text.replace("0.5", "1.5"))
    msg = _error(tmp_path, SFT + "model_config: nowhere/config.json\n", config=None)
    assert "model_config nowhere/config.json: no such file" in msg


def test_output_must_not_hold_the_model(tmp_path):
    msg = _error(tmp_path, SFT.replace("/output/qwen25-7b-sft", "/models/Qwen2.5-7B/out"))
    assert "must not contain each other" in msg


def test_yaml_errors_and_a_missing_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("kind: mindspeed-llm-sft\nparallel: [\n")
    with pytest.raises(ProvisionError, match=r"broken.yaml:\d+: invalid YAML"):
        spec.load(str(path))
    with pytest.raises(ProvisionError, match="no such file"):
        spec.load(str(tmp_path / "absent.yaml"))
