"""The jobs as the frameworks run them at the commits the matrix pins (matrices/jobs.yaml `sources:`): what the
rendered scripts and configs pass, checked against the upstream behaviour each row cites."""

from __future__ import annotations

import ast
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

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


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"


def _argparse_flags(path: Path) -> set[str]:
    """The --flags a script's argparse parser declares (read from its source, as the script cannot be imported
    without MindSpore)."""
    flags = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and str(a.value).startswith("--")}
    return flags


def _calls(script: str) -> dict[str, set[str]]:
    """python <script> --flag ... commands of a rendered step: script -> the flags it is given."""
    out: dict[str, set[str]] = {}
    for cmd in re.split(r"\n(?=python )", script.replace("\\\n", " ")):
        m = re.match(r"python (\S+)(.*)", cmd)
        if m:
            out[m.group(1)] = set(re.findall(r"(?<!\S)--[a-z_]+", m.group(2).split("\n")[0]))
    return out


def _mindformers_stack(stacks, version: str) -> dict:
    from provisioner.resolve.cached import stack_for

    mindspore = {"1.6.0": "2.7.0", "1.7.0": "2.7.1", "1.8.0": "2.7.2"}[version]
    _, stack = stack_for([], {"card": "800T-A2", "framework": "mindspore", "mindspore": mindspore,
                              "extras": ("mindformers",)})
    assert stack["extras"]["mindformers"]["version"] == version
    return stack


@pytest.mark.parametrize("version", ["1.6.0", "1.7.0", "1.8.0"])
def test_mindspore_preprocess_scripts_exist_at_the_pinned_commit_with_the_flags_passed(version, shipped, stacks,
                                                                                         sft_job):
    """1.6.0 (68fa8494) has no research/qwen2_5/alpaca_converter.py or qwen2_5_preprocess.py: its README runs the
    research/qwen2 ones. Each path the step runs is a file of the upstream tree at the commit the matrix pins
    (tests/fixtures/frameworks/mindformers-scripts/<commit>), and declares every flag the step passes."""
    stack = _mindformers_stack(stacks, version)
    commit = stack["extras"]["mindformers"]["commits"]["mindformers"]
    tree = FIXTURES / "mindformers-scripts" / commit[:8]
    p = build(shipped, sft_job(MS_SFT), stack)
    calls = _calls(p.files["steps/01-preprocess.sh"])
    assert len(calls) == 2, calls
    for script, flags in calls.items():
        assert (tree / script).is_file(), f"MindFormers {version} @ {commit[:8]} has no {script}"
        assert flags and flags <= _argparse_flags(tree / script), (script, flags - _argparse_flags(tree / script))


def test_a_mindformers_release_without_known_script_paths_is_refused(shipped, stacks, sft_job):
    stack = json.loads(json.dumps(stacks["mindformers"]))
    stack["extras"]["mindformers"]["version"] = "1.5.0"
    msg = refused(shipped, sft_job(MS_SFT), stack)
    assert ("image img cannot run a mindspore-sft job: its stack names release 1.5.0, and the paths of its qwen2 data"
            " scripts are known for releases 1.6.0, 1.7.0, 1.8.0 only") in msg
    assert "provision build --card 800T-A2 --recipe mindspore --with mindformers" in msg


def test_grpo_refuses_sharegpt_data_which_no_mindspeed_rl_handler_reads(shipped, stacks, sft_job, tmp_path):
    """R1SharegptStyleInstructionHandler exists in no MindSpeed-RL release (data_handler.py @ 62e9928a has the
    R1 alpaca handler only): format sharegpt would fail in preprocess_data.py after the image was started."""
    from tests.jobs.conftest import EXAMPLES

    text = (EXAMPLES / "seed000-grpo-qwen25-7b.yaml").read_text().replace("format: orz", "format: sharegpt")
    job = sft_job(text)
    from provisioner.errors import ProvisionError

    with pytest.raises(ProvisionError) as exc:
        build(shipped, job, stacks["rl"], chips=8)
    assert str(exc.value).endswith("job.yaml:12: data format 'sharegpt' has no mindspeed-rl handler (known: alpaca, orz)")


def _hydra_overrides(script: str) -> dict[str, str]:
    """key=value words of the resume `overrides=(...)` array of a rendered GRPO train step."""
    m = re.search(r"overrides=\((actor_config[^)]*)\)", script)
    assert m, "the train step has no resume overrides"
    return dict(word.split("=", 1) for word in m.group(1).split())


def test_grpo_reference_model_stays_the_initial_weights_after_a_resume(shipped, stacks, sft_job):
    """integrated_worker.py @ 62e9928a loads the reference from rl_config.integrated_mode_config.ref_model_load_path,
    else from actor_config.load, which the resume points at the actor's latest checkpoint: the KL term would then
    pull the policy towards itself. After the resume overrides, the reference must still load the initial weights."""
    from tests.jobs.conftest import EXAMPLES

    p = build(shipped, sft_job((EXAMPLES / "seed000-grpo-qwen25-7b.yaml").read_text()), stacks["rl"], chips=8)
    cfg = yaml.safe_load(p.files["configs/grpo.yaml"])
    overrides = _hydra_overrides(p.files["steps/04-train.sh"])
    actor_load = overrides["actor_config.load"].strip('"')
    assert actor_load == "$save"  # the resume loads the actor's checkpoints
    assert not any(k.startswith("rl_config.") for k in overrides)
    # upstream's choice: getattr(integrated_mode_config, "ref_model_load_path", None), None -> the actor's load
    ref = (cfg["rl_config"].get("integrated_mode_config") or {}).get("ref_model_load_path") or actor_load
    assert ref == p.paths["weights"] == cfg["actor_config"]["load"]
    assert cfg["rl_config"]["use_integrated_worker"] is True  # validate_config.py refuses the section otherwise


# -- MindSpeed-LLM ----------------------------------------------------------------------------------------


def _mindspeed_llm_stack(stacks, bundle: dict) -> dict:
    """The MindSpeed-LLM SFT stack with the extra a build of this set writes (release, refs, commits)."""
    stack = json.loads(json.dumps(stacks["llm"]))
    extra = stack["extras"]["mindspeed_llm"]
    extra.update(set=bundle["id"], release=str(bundle["release"]), mindspeed_llm=str(bundle["mindspeed_llm_ref"]),
                 commits=dict(bundle["commits"]))
    return stack


def _declared(path: Path) -> set[str]:
    return _argparse_flags(path) if path.is_file() else set()


@pytest.mark.parametrize("set_id", ["mindspeed-llm-2.0.0", "mindspeed-llm-2.1.0", "mindspeed-llm-2.2.0",
                                    "mindspeed-llm-2.3.0", "mindspeed-llm-26.0.0", "mindspeed-llm-26.1.0"])
def test_mindspeed_llm_sft_pads_to_the_batch_not_the_sequence_length_where_the_release_can(set_id, shipped, stacks,
                                                                                            sft_job):
    """Without --no-pad-to-seq-lengths the collator pads every sample to --seq-length (data_samplers.py @
    1bdd9700: a 300-token sample trains as 4096 tokens); upstream's own tune_qwen25_7b scripts pass it from 2.3.0
    on. The flag is passed exactly where the set's MindSpeed-LLM declares it (finetune.py of the fixture checkout
    at the pinned commit; 2.0.0 and 2.1.0 have no such file), and always next to --variable-seq-lengths."""
    bundle = next(b for b in shipped.rows("llm_bundles") if b["id"] == set_id)
    finetune = FIXTURES / set_id / "mindspeed_llm" / "mindspeed_llm" / "features_manager" / "finetune" / "finetune.py"
    declared = _declared(finetune)
    p = build(shipped, sft_job(SFT), _mindspeed_llm_stack(stacks, bundle))
    words = set(p.files["steps/03-train.sh"].replace("\\\n", " ").split())
    assert "--variable-seq-lengths" in words
    assert ("--no-pad-to-seq-lengths" in words) == ("--no-pad-to-seq-lengths" in declared), (set_id, sorted(declared))
    if finetune.is_file():
        assert "--variable-seq-lengths" in declared  # the fixture is the right file
    assert ("--no-pad-to-seq-lengths" in words) == (set_id not in ("mindspeed-llm-2.0.0", "mindspeed-llm-2.1.0",
                                                                    "mindspeed-llm-2.2.0"))


@pytest.mark.filterwarnings("ignore:invalid escape sequence")  # upstream's source text, parsed with ast
@pytest.mark.parametrize("set_id", ["mindspeed-llm-2.0.0", "mindspeed-llm-2.1.0", "mindspeed-llm-2.2.0",
                                    "mindspeed-llm-2.3.0", "mindspeed-llm-26.0.0", "mindspeed-llm-26.1.0"])
def test_the_checkpoint_flags_are_megatrons_at_the_pinned_commit(set_id, shipped, stacks, sft_job):
    """The save / load flags of the SFT train step (the weights-only last save of keep_checkpoints 0 included:
    --no-save-optim --no-save-rng) are declared by megatron/training/arguments.py at the Megatron-LM commit the
    set pins (tests/fixtures/frameworks/megatron-args/<commit>, byte for byte)."""
    bundle = next(b for b in shipped.rows("llm_bundles") if b["id"] == set_id)
    commit = bundle["commits"]["megatron"]
    declared = _argparse_flags(FIXTURES / "megatron-args" / commit[:8] / "megatron" / "training" / "arguments.py")
    p = build(shipped, sft_job(SFT.replace("save_interval: 500", "keep_checkpoints: 0")),
              _mindspeed_llm_stack(stacks, bundle))
    words = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", p.files["steps/03-train.sh"]))
    used = {w for w in words if re.fullmatch(r"--(no-)?(save|load)(-[a-z]+)*|--finetune", w)}
    assert {"--save", "--load", "--save-interval", "--no-save-optim", "--no-save-rng", "--no-load-optim",
            "--no-load-rng", "--finetune"} <= used
    assert used <= declared, sorted(used - declared)


def test_a_mindspeed_rl_set_names_no_mindspeed_llm_release_so_gets_no_release_bound_flag(shipped, stacks, sft_job):
    """MindSpeed-RL 2.0.0 carries MindSpeed-LLM 421ef7bc (a commit, no release): job_flags rows do not apply."""
    p = build(shipped, sft_job(SFT), stacks["rl"])
    assert "--no-pad-to-seq-lengths" not in p.files["steps/03-train.sh"]


# -- MindSpore Transformers: epochs ---------------------------------------------------------------------------

FAKE_MSRUN = """#!/bin/bash
# records its arguments and writes the meta.json CheckpointMonitor writes at the last step
printf '%s\\n' "$@" > "$MSRUN_ARGS"
out=""; prev=""
for a in "$@"; do if [ "$prev" = --output_dir ]; then out="$a"; fi; prev="$a"; done
mkdir -p "$out/checkpoint/rank_0"
echo "{\\"last_step\\": $FAKE_LAST_STEP}" > "$out/checkpoint/rank_0/meta.json"
"""


def _run_mindspore_train(p, tmp_path: Path, records: str | None, node_rank: str = "0",
                         msrun: str = FAKE_MSRUN) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "msrun"
    fake.write_text(msrun)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    Path(p.checkout).mkdir(parents=True, exist_ok=True)
    if records is not None:
        Path(p.paths["data_prefix"] + ".records").parent.mkdir(parents=True, exist_ok=True)
        Path(p.paths["data_prefix"] + ".records").write_text(records)
    script = tmp_path / "train.sh"
    script.write_text(p.files["steps/02-train.sh"])
    env = {**os.environ, "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
           "MSRUN_ARGS": str(tmp_path / "msrun.args"), "FAKE_LAST_STEP": str(p.spec.train.steps),
           "NODE_RANK": node_rank}
    done = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    args = (tmp_path / "msrun.args").read_text().split("\n") if (tmp_path / "msrun.args").exists() else []
    return done, args


@pytest.mark.parametrize(("records", "epochs", "per_epoch"), [
    ("52002\n", 4, 32000),     # Alpaca: 2000 x 64 = 2.46 passes -> 4 epochs of 500 steps, none above the records
    ("128000\n", 1, 128000),   # exactly one pass
    ("200000\n", 1, 128000),   # fewer samples than records: one partial epoch
    ("64000\n", 2, 64000),     # two whole passes
])
def test_mindspore_sft_epochs_never_draw_more_samples_than_the_records(records, epochs, per_epoch, shipped, stacks,
                                                                       sft_job, tmp_path):
    """MindDataset draws num_samples above the record count with replacement (8.5 % of Alpaca never seen in
    2000 steps): the train step splits steps x global batch into the fewest equal epochs that fit the records
    (the preprocess step writes the count) and passes --epochs / --num_samples (run_mindformer.py, ints), so
    MindFormers runs exactly the job's steps (dataset size x epochs in sink mode) with no sample twice an epoch."""
    text = MS_SFT.replace("/output/qwen25-7b-sft", str(tmp_path / "out")) + f"framework_dir: {tmp_path / 'mf'}\n"
    p = build(shipped, sft_job(text), stacks["mindformers"])
    cfg = yaml.safe_load(p.files["configs/finetune.yaml"])
    assert "num_samples" not in cfg["train_dataset"]["data_loader"]
    assert p.steps[0].outputs[-1] == p.paths["data_prefix"] + ".records"
    assert "wc -l < \"$partial/messages.json\"" in p.files["steps/01-preprocess.sh"]
    done, args = _run_mindspore_train(p, tmp_path, records)
    assert done.returncode == 0, done.stderr
    got = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i] in ("--epochs", "--num_samples")}
    assert got == {"--epochs": str(epochs), "--num_samples": str(per_epoch)}
    tr = p.spec.train
    assert epochs * per_epoch == tr.steps * tr.global_batch_size and per_epoch % tr.global_batch_size == 0
    assert per_epoch <= int(records)
    assert f"{records.strip()} records: {epochs} epoch(s) of {per_epoch} samples" in done.stdout


def test_mindspore_sft_refuses_data_smaller_than_one_global_batch(shipped, stacks, sft_job, tmp_path):
    text = MS_SFT.replace("/output/qwen25-7b-sft", str(tmp_path / "out")) + f"framework_dir: {tmp_path / 'mf'}\n"
    p = build(shipped, sft_job(text), stacks["mindformers"])
    done, args = _run_mindspore_train(p, tmp_path, "10\n")
    assert done.returncode == 1 and not args
    assert "the data has 10 records, fewer than one global batch (64)" in done.stderr
    done, args = _run_mindspore_train(p, tmp_path, "")
    assert done.returncode == 1 and "no record count in" in done.stderr


def test_run_mindformer_declares_every_flag_the_train_step_passes(shipped, stacks, sft_job, tmp_path):
    """run_mindformer.py of the MindFormers fixture (v1.7.0, 8ccc49b3) declares every --flag the step gives it
    (the same at 68fa8494 and 1a72d558: JOB-MF, JOB-MF-EPOCHS)."""
    import tarfile

    with tarfile.open(FIXTURES / "mindformers-v1.7.0.tar.gz") as tar:
        (tmp_path / "run_mindformer.py").write_bytes(tar.extractfile("mindformers/run_mindformer.py").read())
    declared = _argparse_flags(tmp_path / "run_mindformer.py")
    p = build(shipped, sft_job(MS_SFT), stacks["mindformers"])
    text = p.files["steps/02-train.sh"].replace("\\\n", " ")
    (call,) = [line for line in text.split("\n") if line.startswith("msrun ")]
    call = call[call.index(" run_mindformer.py "):]
    passed = set(re.findall(r"(?<!\S)--[a-z_]+", call))
    load = set(re.findall(r"(?<![\w-])--[a-z_]+", " ".join(re.findall(r"load_args=\(([^)]*)\)", text))))
    assert {"--epochs", "--num_samples", "--train_dataset_dir"} <= passed
    assert passed | load <= declared, sorted((passed | load) - declared)


# -- launchers as upstream's: msrun, Ray ---------------------------------------------------------------------


def test_msrun_binds_cores_lifts_the_process_limit_and_tails_this_nodes_first_global_rank(shipped, stacks, sft_job,
                                                                                         tmp_path):
    """As MindFormers' scripts/msrun_launcher.sh: msrun --bind_core=True after ulimit -u unlimited. On node 1 of 2
    msrun names the logs by global rank (node_rank x local_worker_num + index: _api.py), so node 1's first worker
    writes worker_2.log with 2 chips a node; the step streams that file (it used to wait on a worker_0.log that
    only node 0 has)."""
    text = MS_SFT.replace("/output/qwen25-7b-sft", str(tmp_path / "out")) + f"framework_dir: {tmp_path / 'mf'}\n"
    p = plan.build(shipped, sft_job(text), card="800T-A2", chips_per_node=2, nnodes=2, stack=stacks["mindformers"],
                   image="image img")
    train = p.files["steps/02-train.sh"]
    assert train.index("ulimit -u unlimited") < train.index("\nmsrun ")
    fake = FAKE_MSRUN + ('logs=""; for a in "$@"; do case "$a" in --log_dir=*) logs="${a#--log_dir=}";; esac; done\n'
                         'for r in 0 1 2 3; do echo "line of worker $r" >> "$logs/worker_$r.log"; done\nsleep 1.5\n')
    done, args = _run_mindspore_train(p, tmp_path, "52002\n", node_rank="1", msrun=fake)
    assert done.returncode == 0, done.stderr
    assert "--bind_core=True" in args and "--node_rank=1" in args and "--local_worker_num=2" in args
    assert "line of worker 2" in done.stdout and "line of worker 0" not in done.stdout


def test_grpo_raises_the_open_file_limit_and_keeps_tensorboard_under_the_output(shipped, stacks, sft_job, tmp_path):
    """As MindSpeed-RL's grpo_trainer_qwen25_7b.sh: ulimit -n 32768 before ray start, on every node. Its trainer
    opens SummaryWriter() without a log_dir (trainer/base.py): runs/ in the directory ray start runs in (the
    checkout) links to <output>/tensorboard, on every node, before the head or a worker starts."""
    from tests.jobs.conftest import EXAMPLES

    p = build(shipped, sft_job((EXAMPLES / "seed000-grpo-qwen25-7b-2nodes.yaml").read_text()), stacks["rl"], chips=8,
              nnodes=2)
    train = p.files["steps/04-train.sh"]
    worker_branch = train.index('if [ "$NODE_RANK" != 0 ]')
    assert train.index("ulimit -n 32768") < worker_branch and train.index("ln -sfn") < worker_branch
    m = re.search(r"(?ms)^# TensorBoard:.*?^fi\n", train)
    assert m and f"tensorboard={p.paths['output']}/tensorboard" in m.group(0)
    block = m.group(0).replace(p.paths["output"], str(tmp_path / "out"))
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    for _ in range(2):  # again on a resume: the link is replaced, not nested
        subprocess.run(["bash", "-c", "set -euo pipefail\n" + block], cwd=checkout, check=True)
    assert os.readlink(checkout / "runs") == str(tmp_path / "out" / "tensorboard")
    assert (tmp_path / "out" / "tensorboard").is_dir() and not (tmp_path / "out" / "tensorboard" / "tensorboard").exists()
    (checkout / "runs").unlink()
    (checkout / "runs").mkdir()  # a real runs/ directory of the image is left alone
    subprocess.run(["bash", "-c", "set -euo pipefail\n" + block], cwd=checkout, check=True)
    assert not (checkout / "runs").is_symlink()


# -- MindSpeed-RL's own config classes and validator --------------------------------------------------------

# The MindSpeed-RL sets whose config classes the GRPO job is checked against: the job's stack (tests/jobs/conftest.py
# `stacks`) and the set's fixture checkout (the upstream files at the set's pinned commit, byte for byte).
RL_SETS = {"2.0.0": "rl", "2.1.0": "rl210", "2.2.0": "rl220", "2.3.0": "rl230"}


def rl_checkout(release: str) -> Path:
    return FIXTURES / f"mindspeed-rl-{release}" / "mindspeed_rl"


@pytest.fixture
def mindspeed_rl_config_cls(monkeypatch):
    """load(release, nodes) -> mindspeed_rl.config_cls from the set's fixture checkout (62e9928a for 2.0.0, tags
    v2.1.0 bfe1bd5a, v2.2.0 194b52b7 and v2.3.0 4b30d034), imported without the package __init__ files (they import torch, Ray and the
    datasets); mindspeed_rl.utils, which pulls in the tokenizer, is replaced by its Loggers alone, recording the
    warnings BaseConfig.update gives for unknown keys, and mindspeed_rl.utils.utils (2.2.0's validator imports
    and 2.3.0's import it) by get_node_nums alone, the Ray cluster's live node count (ray.nodes()) as the job's nodes."""
    import importlib
    import types

    warnings: list[str] = []

    class Loggers:
        def __init__(self, name):
            self.name = name

        def warning(self, msg, *a, **k):
            warnings.append(str(msg))

        info = debug = error = warning

    def load(release: str, nodes: int = 1):
        checkout = rl_checkout(release)
        pkg = types.ModuleType("mindspeed_rl")
        pkg.__path__ = [str(checkout / "mindspeed_rl")]
        sub = types.ModuleType("mindspeed_rl.config_cls")
        sub.__path__ = [str(checkout / "mindspeed_rl" / "config_cls")]
        utils = types.ModuleType("mindspeed_rl.utils")
        utils.__path__ = []
        utils.Loggers = Loggers
        utils_utils = types.ModuleType("mindspeed_rl.utils.utils")
        utils_utils.get_node_nums = lambda: nodes
        for name in [n for n in sys.modules if n == "mindspeed_rl" or n.startswith("mindspeed_rl.")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, "mindspeed_rl", pkg)
        monkeypatch.setitem(sys.modules, "mindspeed_rl.config_cls", sub)
        monkeypatch.setitem(sys.modules, "mindspeed_rl.utils", utils)
        monkeypatch.setitem(sys.modules, "mindspeed_rl.utils.utils", utils_utils)
        return {n: importlib.import_module(f"mindspeed_rl.config_cls.{n}")
                for n in ("megatron_config", "rl_config", "generate_config", "validate_config")}

    yield load, warnings
    for name in [n for n in sys.modules if n.startswith("mindspeed_rl.config_cls.")]:
        monkeypatch.delitem(sys.modules, name, raising=False)


class _Node(dict):
    """A mapping read by key or by attribute, as hydra's DictConfig sections are (train_grpo.py passes them on)."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _nodes(value):
    if isinstance(value, dict):
        return _Node({k: _nodes(v) for k, v in value.items()})
    return [_nodes(v) for v in value] if isinstance(value, list) else value


@pytest.mark.parametrize("release", sorted(RL_SETS))
@pytest.mark.parametrize("example", ["seed000-grpo-qwen25-7b.yaml", "seed000-grpo-qwen25-7b-2nodes.yaml"])
def test_grpo_config_passes_mindspeed_rls_own_config_classes_and_validator(example, release, shipped, stacks,
                                                                           sft_job, mindspeed_rl_config_cls):
    """The rendered configs as the set's cli/train_grpo.py reads them (2.0.0 @ 62e9928a, 2.1.0 @ bfe1bd5a,
    2.2.0 @ 194b52b7, 2.3.0 @ 4b30d034:
    parse_training_config: MegatronConfig of megatron_training + actor_config with the model group, RLConfig,
    GenerateConfig, then validate_rl_args): every key is one the config classes know (BaseConfig.update warns on
    any other and drops it), the reference's integrated_mode_config included, and the validator accepts the whole."""
    from tests.jobs.conftest import EXAMPLES

    load, warnings = mindspeed_rl_config_cls
    nnodes = 2 if "2nodes" in example else 1
    stack = stacks[RL_SETS[release]]
    assert stack["extras"]["mindspeed_llm"]["set"] == f"mindspeed-rl-{release}"
    mods = load(release, nnodes)
    p = build(shipped, sft_job((EXAMPLES / example).read_text()), stack, chips=8, nnodes=nnodes)
    config = yaml.safe_load(p.files["configs/grpo.yaml"])
    config["model"] = yaml.safe_load(p.files["configs/model/job_model.yaml"])  # hydra's `defaults: model`
    config = _nodes(config)
    actor = mods["megatron_config"].MegatronConfig({**config["megatron_training"], **config["actor_config"]},
                                                   config["model"])
    rl = mods["rl_config"].RLConfig(config["rl_config"])
    generate = mods["generate_config"].GenerateConfig(config["generate_config"])
    # RLConfig reads mini_batch_size from the dict itself after update(), which warns first (as for upstream's
    # own configs): a key is unknown when no class knows it and none reads it from config_dict
    read_itself = set(re.findall(r"config_dict\.get\('(\w+)'", (rl_checkout(release) / "mindspeed_rl"
                                                                   / "config_cls" / "rl_config.py").read_text()))
    unknown = {m.group(1) for w in warnings if (m := re.match(r"The key: (\w+) is missing", w))} - read_itself
    assert read_itself and unknown == set() and all(w.startswith("The key: ") for w in warnings), warnings
    assert rl.use_integrated_worker and rl.integrated_mode_config == {"ref_model_load_path": p.paths["weights"]}
    # integrated_worker.py initialize reads it so
    assert getattr(rl.integrated_mode_config, "ref_model_load_path", None) == p.paths["weights"]
    warnings.clear()
    mods["validate_config"].validate_rl_args(actor, actor, actor, rl, generate)  # raises ValueError on a bad rule
    assert warnings == []
