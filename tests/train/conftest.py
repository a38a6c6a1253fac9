"""Fixtures for the trainer tests: the real Qwen tokenizer, a tiny random Qwen2 saved with
save_pretrained, and small Alpaca / chat data files. Everything is offline."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from provisioner.train import tiny

# Before torch is imported anywhere in the test process.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[2]


def tokenizer_files() -> Path:
    return tiny.qwen_tokenizer_dir()


@pytest.fixture(scope="session")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_files()))


def build_tiny_model(
    path: Path, tokenizer, seed: int = 0, layers: int = 2, hidden: int = 64, init_range: float = 0.2
) -> Path:
    """A random-weight Qwen2ForCausalLM, saved the way a real checkpoint is."""
    return tiny.build_qwen2(path, tokenizer, seed=seed, layers=layers, hidden=hidden, init_range=init_range)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), tokenizer)


def alpaca_records(n: int, seed: int = 0) -> list[dict]:
    return tiny.arithmetic_alpaca(n, seed)


@pytest.fixture(scope="session")
def alpaca_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "alpaca.json"
    path.write_text(json.dumps(alpaca_records(64), indent=1))
    return path


@pytest.fixture(scope="session")
def alpaca_jsonl(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "alpaca.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in alpaca_records(48, seed=1)))
    return path


def write_config(path: Path, **values) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(values, sort_keys=False))
    return path


def train_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
        PYTHONPATH=str(REPO),
    )
    return env


PYTHON = sys.executable
