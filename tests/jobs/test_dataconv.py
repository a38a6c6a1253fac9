"""GRPO data formats: Open-Reasoner-Zero's math data (`format: orz`), converted by the job's data step and read by
MindSpeed-RL's own preprocessing.

The fixture tests/jobs/fixtures/orz/orz_math_57k_head.json holds four records of data/orz_math_57k_collected.json as
a fork's copy holds them (avecplezir/Open-Reasoner-Zero @ e92ab5bc: the first three, and the first with a pass_at_n
beside the answer; every one of its 1785 records has one of these two shapes); Open-Reasoner-Zero @ 3fdd9a07
playground/zero_setting_base.py reads them by position, as dataconv does. The preprocessing is MindSpeed-RL's, run
from the fixture checkout (tests/fixtures/frameworks/mindspeed-rl-2.0.0/mindspeed_rl, 62e9928a byte for byte) with the
real Qwen tokenizer; only its Loggers module (which imports torch_npu and tensordict) is replaced.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from provisioner.jobs import dataconv, plan, spec
from provisioner.jobs.render import DATACONV
from provisioner.launch import jobrun
from tests.jobs.conftest import EXAMPLES, HERE, tiny_model, write_job

ORZ = HERE / "fixtures" / "orz" / "orz_math_57k_head.json"
RL_CHECKOUT = HERE.parents[0] / "fixtures" / "frameworks" / "mindspeed-rl-2.0.0" / "mindspeed_rl"
ANSWERS = ["n = 4", "65", "431", "\\frac{32}{35}"]


def test_orz_records_become_problem_answer_lines():
    rows, empty = dataconv.convert_orz(json.loads(ORZ.read_text()))
    assert empty == 0
    assert [r["answer"] for r in rows] == ANSWERS  # pass_at_n beside the value is left behind
    assert rows[0]["problem"].startswith("$P(x)$ is a polynomial of degree $3n$") and set(rows[0]) == {"problem", "answer"}


@pytest.mark.parametrize("record, says", [
    ({"from": "human", "value": "q"}, "record 0: expected a pair of turns"),
    ([{"from": "human", "value": "q"}], "record 0: expected a pair of turns"),
    ([{"from": "human", "value": "q"}, {"from": "assistant", "value": "a"}], "no ground_truth.value text"),
    ([{"from": "human", "value": "q"}, {"from": "assistant", "ground_truth": {"value": ["a"]}}],
     "no ground_truth.value text"),
    ([{"from": "human"}, {"from": "assistant", "ground_truth": {"value": "a"}}], "the first turn has no text value"),
])
def test_other_shapes_stop_the_conversion_naming_the_record(record, says):
    with pytest.raises(dataconv.BadRecord, match=says):
        dataconv.convert_orz([record])


def test_empty_problems_or_answers_are_left_out_and_counted():
    pair = lambda q, a: [{"from": "human", "value": q}, {"from": "assistant", "ground_truth": {"value": a}}]  # noqa: E731
    rows, empty = dataconv.convert_orz([pair("q", "1"), pair(" ", "2"), pair("q", ""), pair("q3", 3)])
    assert rows == [{"problem": "q", "answer": "1"}, {"problem": "q3", "answer": "3"}] and empty == 2


def test_the_script_runs_alone_and_refuses_bad_input_in_one_line(tmp_path):
    """As the job runs it: a file of its own, the standard library only (no provisioner, no torch)."""
    script = tmp_path / "dataconv.py"
    script.write_text(Path(dataconv.__file__).read_text())
    out = tmp_path / "orz.jsonl"
    ok = subprocess.run([sys.executable, "-I", "-S", str(script), "orz", str(ORZ), str(out)], capture_output=True,
                        text=True)
    assert ok.returncode == 0, ok.stderr
    assert [json.loads(line)["answer"] for line in out.read_text().splitlines()] == ANSWERS
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"prompt": []}))
    fail = subprocess.run([sys.executable, "-I", "-S", str(script), "orz", str(bad), str(tmp_path / "x.jsonl")],
                          capture_output=True, text=True)
    assert fail.returncode == 2 and fail.stderr.count("\n") == 1 and "expected a JSON list" in fail.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_the_seed_grpo_job_converts_then_preprocesses(shipped, stacks, sft_job):
    p = plan.build(shipped, sft_job((EXAMPLES / "seed000-grpo-qwen25-7b.yaml").read_text()), card="800T-A2",
                   chips_per_node=8, stack=stacks["rl"])
    assert [s.id for s in p.steps] == ["convert", "data", "preprocess", "train", "export"]
    data = yaml.safe_load(p.files["configs/data.yaml"])
    assert data["input"] == p.paths["data_input"] == "/output/qwen25-7b-grpo/data-orz/orz.jsonl"
    assert data["map_keys"] == {"prompt": "problem", "query": "", "response": "answer", "system": ""}
    assert data["handler_name"] == "R1AlpacaStyleInstructionHandler"
    assert p.files[DATACONV] == Path(dataconv.__file__).read_text()
    assert p.steps[1].outputs == ("/output/qwen25-7b-grpo/data-orz/orz.jsonl",)


def test_an_alpaca_grpo_job_has_no_data_step(shipped, stacks, sft_job):
    text = (EXAMPLES / "seed000-grpo-qwen25-7b.yaml").read_text().replace(
        "format: orz", 'format: alpaca\n  map_keys: {prompt: problem, query: "", response: answer, system: ""}')
    p = plan.build(shipped, sft_job(text), card="800T-A2", chips_per_node=8, stack=stacks["rl"])
    assert [s.id for s in p.steps] == ["convert", "preprocess", "train", "export"] and DATACONV not in p.files
    assert yaml.safe_load(p.files["configs/data.yaml"])["input"] == p.spec.data.path


def test_orz_refuses_map_keys_and_is_grpo_only(shipped, stacks, sft_job):
    text = (EXAMPLES / "seed000-grpo-qwen25-7b.yaml").read_text().replace(
        "format: orz", "format: orz\n  map_keys: {prompt: question}")
    with pytest.raises(plan.JobRefused) as exc:
        plan.build(shipped, sft_job(text), card="800T-A2", chips_per_node=8, stack=stacks["rl"])
    assert "job.yaml:13: data.map_keys does not apply to format orz" in str(exc.value)
    from provisioner.errors import ProvisionError
    from tests.jobs.conftest import SFT

    with pytest.raises(ProvisionError, match="data format 'orz' has no mindspeed-llm handler"):
        plan.build(shipped, sft_job(SFT.replace("format: alpaca", "format: orz")), card="800T-A2",
                   chips_per_node=4, stack=stacks["llm"])


_PREPROCESS = textwrap.dedent('''\
    """cli/preprocess_data.py's preprocess() (62e9928a) on the job's rendered configs/data.yaml."""
    import json, logging, sys, types
    import yaml

    checkout, config_path, overrides = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

    class Loggers:  # mindspeed_rl/utils/loggers.py imports torch_npu and tensordict
        def __init__(self, name="root", logger_level=logging.INFO):
            self.logger = logging.getLogger(name)

        def info(self, msg, *a, **k):
            self.logger.info(msg)

        warning = error = debug = info

    def package(name, path):
        mod = types.ModuleType(name)
        mod.__path__ = [path]  # the package without its __init__ (it imports Ray, vllm and the trainer)
        sys.modules[name] = mod

    for name, sub in (("mindspeed_rl", ""), ("mindspeed_rl.datasets", "/datasets"),
                      ("mindspeed_rl.utils", "/utils"), ("mindspeed_rl.config_cls", "/config_cls")):
        package(name, checkout + "/mindspeed_rl" + sub)
    loggers = types.ModuleType("mindspeed_rl.utils.loggers")
    loggers.Loggers = Loggers
    sys.modules["mindspeed_rl.utils.loggers"] = loggers
    sys.modules["mindspeed_rl.utils"].Loggers = Loggers  # as utils/__init__.py re-exports it

    from mindspeed_rl.config_cls.data_handler_config import DataHandlerConfig
    from mindspeed_rl.config_cls.validate_config import validate_data_handler_config
    from mindspeed_rl.datasets.data_handler import build_dataset, get_dataset_handler
    from mindspeed_rl.datasets.indexed_dataset import IndexedDataset
    from mindspeed_rl.datasets.preprocess_data import build_splitter
    from mindspeed_rl.utils.tokenizer import get_tokenizer

    with open(config_path) as f:
        config = yaml.safe_load(f)
    config.update(overrides)
    args = DataHandlerConfig(config)
    validate_data_handler_config(args)
    tokenizer = get_tokenizer(args.tokenizer_name_or_path, prompt_type=args.prompt_type,
                              prompt_type_path=args.prompt_type_path)
    handler = get_dataset_handler(args, build_dataset(args), tokenizer, build_splitter(args))
    handler.serialize_to_disk()
    hf = tokenizer.tokenizer
    out = {}
    for key in ("input_ids", "labels"):
        ds = IndexedDataset(args.output_prefix + "_" + key + "_document")
        out[key] = [hf.decode([int(t) for t in ds[i]]) for i in range(len(ds))]
    print(json.dumps(out))
''')


@pytest.mark.slow
def test_converted_orz_data_goes_through_mindspeed_rls_own_preprocessing(shipped, stacks, tmp_path):
    """The rendered data step (real bash, the job's tools/dataconv.py) converts the ORZ records; MindSpeed-RL's
    build_dataset, map_keys mapping (handler_utils.py) and R1AlpacaStyleInstructionHandler, from the fixture
    checkout, read the result as the rendered configs/data.yaml says: every prompt carries its problem in the
    qwen_r1 template, every label is its answer."""
    pytest.importorskip("datasets")
    model = tiny_model(tmp_path / "models" / "tiny")
    data = tmp_path / "data" / "orz_math_57k_collected.json"
    data.parent.mkdir()
    data.write_text(ORZ.read_text())
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    text = (f"kind: mindspeed-rl-grpo\nname: tiny-grpo\nmodel: {model}\ndata: {{path: {data}, format: orz}}\n"
            "parallel: {tensor: 1, pipeline: 1, data: 2}\n"
            "train: {seq_length: 256, global_batch_size: 4, steps: 2}\n"
            "grpo: {n_samples_per_prompt: 2, max_prompt_length: 128, max_response_length: 128}\n"
            f"output: {tmp_path / 'out'}\nframework_dir: {checkout}\n")
    p = plan.build(shipped, spec.load(str(write_job(tmp_path / "job", text, config=None))), card="800T-A2",
                   chips_per_node=2, stack=stacks["rl"])
    jobrun.write_files(p)
    step = next(s for s in p.steps if s.id == "data")
    run = subprocess.run(["bash", f"{p.job_dir}/steps/{step.script}"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "dataconv orz: 4 records" in run.stdout
    assert Path(p.paths["data_input"]).is_file() and not Path(p.paths["data_input"]).parent.with_suffix(".partial").exists()

    (tmp_path / "pre").mkdir()
    overrides = {"output_prefix": str(tmp_path / "pre" / "orz"), "workers": 1, "cache_dir": str(tmp_path / "cache")}
    script = tmp_path / "preprocess.py"
    script.write_text(_PREPROCESS)
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "HF_DATASETS_CACHE": str(tmp_path / "cache")}
    res = subprocess.run([sys.executable, str(script), str(RL_CHECKOUT), f"{p.paths['configs']}/data.yaml",
                          json.dumps(overrides)], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["labels"] == ANSWERS
    problems = [r[0]["value"] for r in json.loads(ORZ.read_text())]
    for prompt, problem in zip(out["input_ids"], problems, strict=True):
        assert prompt.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                                 "A conversation between User and Assistant.")
        assert prompt.endswith(f"{problem}<|im_end|>\n<|im_start|>assistant\n")
