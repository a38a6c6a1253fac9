"""Fixtures for the framework-job tests: real resolved stacks, model configs, job files.

Stacks come from the shipped matrix (`provision resolve --profile ...`), so the framework rule is checked
against what `provision build` would write into an image label: the MindSpore Transformers stack is the
profile's resolved `--with mindformers`, as the mindspore recipe builds it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"
QWEN7B_CONFIG = FIXTURES / "qwen25-7b" / "config.json"
FAKE = HERE / "fake"
EXAMPLES = HERE.parents[1] / "examples" / "jobs"


@pytest.fixture(scope="session")
def shipped():
    from provisioner.matrix import loader

    return loader.load()


def _resolve(**options) -> dict:
    from provisioner.resolve.cached import stack_for

    _, stack = stack_for([], options)
    return stack


@pytest.fixture(scope="session")
def stacks() -> dict:
    return {
        "llm": _resolve(profile="mindspeed-llm-2.3.0-a2"),
        "rl": _resolve(profile="mindspeed-rl-2.0.0-grpo"),
        "rl220": _resolve(profile="mindspeed-rl-2.2.0-grpo"),
        "rl230": _resolve(profile="mindspeed-rl-2.3.0-grpo"),
        # MindSpeed-RL 2.1.0: the set a CANN 8.2.RC1 stack with torch 2.5.1 carries (a site's Python 3.10 image)
        "rl210": _resolve(card="800T-A2", cann="8.2.RC1", torch="2.5.1", python="3.10", extras=("apex", "mindspeed-llm"),
                          base_image="registry.example.com/ascend/cann:8.2.rc1-910b-ubuntu22.04-py3.10"),
        "plain": _resolve(card="800T-A2"),
        "mindspore": _resolve(profile="mindspore-2.7.1-a2"),
        "mindformers": _resolve(profile="mindspore-2.7.1-a2", extras=("mindformers",)),
    }


def write_job(folder: Path, text: str, name: str = "job.yaml", config: Path | None = QWEN7B_CONFIG) -> Path:
    """A job file in `folder`; `model_config: config.json` next to it (a copy of `config`) unless config is None."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if config is not None:
        shutil.copyfile(config, folder / "config.json")
        text = text.rstrip("\n") + "\nmodel_config: config.json\n"
    path.write_text(text)
    return path


SFT = """\
kind: mindspeed-llm-sft
name: qwen25-7b-sft
model: /models/Qwen2.5-7B
data: {path: /data/alpaca_data.json, format: alpaca}
parallel: {tensor: 2, pipeline: 1, data: 2}
train: {seq_length: 4096, global_batch_size: 64, steps: 2000, save_interval: 500}
output: /output/qwen25-7b-sft
"""


@pytest.fixture
def sft_job(tmp_path):
    """write(overrides text appended to a valid TP2 x DP2 MindSpeed-LLM SFT job) -> loaded JobSpec."""
    from provisioner.jobs import spec

    def make(text: str = SFT, **kw):
        return spec.load(str(write_job(tmp_path, text, **kw)))

    return make


def tiny_model(folder: Path, *, heads: int = 4, kv_heads: int = 2, layers: int = 2, vocab: int = 151936) -> Path:
    """A Qwen2-shaped model directory: config.json and the real Qwen tokenizer files (no weights: the fake
    frameworks read the config and tokenizer only)."""
    from provisioner.train.tiny import qwen_tokenizer_dir

    folder.mkdir(parents=True, exist_ok=True)
    for f in qwen_tokenizer_dir().iterdir():
        if f.is_file():
            shutil.copyfile(f, folder / f.name)
    config = json.loads(QWEN7B_CONFIG.read_text())
    config.update(hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, vocab_size=vocab, max_position_embeddings=1024)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


def alpaca(path: Path, n: int = 24) -> Path:
    from provisioner.train.tiny import arithmetic_alpaca

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(arithmetic_alpaca(n)))
    return path


def records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# -- images for the docker tests ----------------------------------------------------------------------

STACK_LABEL = "org.provision.stack"
FAKE_LLM_CHECKOUT = "/opt/frameworks/MindSpeed-LLM"


def _context(tmp: Path, checkout: str, target: str) -> Path:
    """A build context with the fake checkout at `target` (plus fakelib.py inside it)."""
    dest = tmp / target
    shutil.copytree(FAKE / checkout, dest, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(FAKE / "fakelib.py", dest / "fakelib.py")
    return tmp


def _build(client, context: Path, dockerfile: str, tag: str, labels: dict, buildargs: dict | None = None) -> str:
    import docker

    try:
        client.images.build(path=str(context), dockerfile=dockerfile, tag=tag, labels=labels, rm=True,
                            network_mode="host", buildargs=buildargs or {})
    except docker.errors.BuildError as exc:
        log = "".join(str(c.get("stream", c.get("error", ""))) for c in exc.build_log)
        pytest.fail(f"building {tag} failed: {exc}\n{log[-4000:]}")
    return tag


@pytest.fixture(scope="session")
def fake_llm_image(docker_client, provision_image, shipped, tmp_path_factory) -> str:
    """The test image (torch CPU + provision) with the fake MindSpeed-LLM checkout, a stack label that names the
    MindSpeed-LLM 2.3.0 set and the framework labels, as `provision build --recipe mindspeed-llm` writes them.
    The checkout lies at FAKE_LLM_CHECKOUT, not the recipe's place: the job finds it through the checkouts label."""
    from provisioner.image import labels

    stack = json.loads(docker_client.images.get(provision_image).labels[STACK_LABEL])
    row = next(r for r in shipped.rows("llm_bundles") if r["id"] == "mindspeed-llm-2.3.0")
    stack["extras"]["mindspeed_llm"] = {"set": row["id"], "kind": row["kind"], "release": row["release"],
                                        "mindspeed": row["mindspeed_ref"], "megatron": row["megatron_ref"],
                                        "mindspeed_llm": row["mindspeed_llm_ref"], "mindspeed_rl": None,
                                        "commits": dict(row["commits"])}
    checkouts = {name: {"commit": commit, "ref": row[f"{name}_ref"], "from": "fake",
                        "path": FAKE_LLM_CHECKOUT if name == "mindspeed_llm" else None}
                 for name, commit in row["commits"].items()}
    ctx = _context(tmp_path_factory.mktemp("fake-llm"), "mindspeed-llm", "MindSpeed-LLM")
    (ctx / "Dockerfile").write_text(f"FROM {provision_image}\nCOPY MindSpeed-LLM {FAKE_LLM_CHECKOUT}\n")
    return _build(docker_client, ctx, "Dockerfile", "provision-jobs-test/fake-mindspeed-llm:latest",
                  {STACK_LABEL: json.dumps(stack, separators=(",", ":")), labels.FRAMEWORK_SET_LABEL: row["id"],
                   labels.FRAMEWORK_KIND_LABEL: row["kind"],
                   labels.CHECKOUTS_LABEL: json.dumps(checkouts, separators=(",", ":"))})


@pytest.fixture(scope="session")
def ray_image(docker_client, base_image, stacks, tmp_path_factory) -> str:
    """The local base + Ray from the index + the fake MindSpeed-RL checkout, labelled with the resolved
    MindSpeed-RL 2.0.0 GRPO stack."""
    from tests.helpers.engine import trusted_ca_file

    ctx = _context(tmp_path_factory.mktemp("ray"), "mindspeed-rl", "MindSpeed-RL")
    for name in ("Dockerfile", "requirements.txt"):
        shutil.copyfile(HERE / "ray-image" / name, ctx / name)
    shutil.copyfile(trusted_ca_file(), ctx / "ca.pem")
    return _build(docker_client, ctx, "Dockerfile", "provision-jobs-test/ray:latest",
                  {STACK_LABEL: json.dumps(stacks["rl"], separators=(",", ":"))}, {"BASE": base_image})


def patched_host(name: str, tmp: Path, stack: dict):
    """A fake host with real device nodes (mknod, /dev/null's numbers: a container opens them) whose driver is
    the one `stack`'s CANN pairs with."""
    import os
    import re

    from tests.helpers import hosts

    if os.geteuid() != 0:
        pytest.fail("simulated hosts need root to mknod device nodes")
    host = hosts.materialize(name, tmp, nodes="mknod", null_numbers=True)
    info = host.root / "usr/local/Ascend/driver/version.info"
    info.write_text(re.sub(r"(?m)^Version=.*$", f"Version={stack['driver']['paired'][0]}", info.read_text()))
    return host
