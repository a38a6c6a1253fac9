"""Qwen2.5 ChatML rendering, tokenisation and prompt masking.

A conversation becomes alternating pieces of text that are either trained
(assistant answers and their ``<|im_end|>``) or masked (system, user, role
headers). Pieces are tokenised separately so the mask boundary is exact;
the boundaries sit next to special tokens, where BPE never merges across.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from provisioner.train.config import ConfigError
from provisioner.train.data import Conversation

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


@dataclass
class Example:
    """One tokenised sample. ``trained[t]`` says whether token t is a target."""

    ids: np.ndarray  # int32
    trained: np.ndarray  # bool, same length

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def n_targets(self) -> int:
        return int(self.trained[1:].sum())


def render(
    conv: Conversation, system_prompt: str, mask_history: bool, train_on_prompt: bool
) -> list[tuple[str, bool]]:
    """Return ChatML text pieces with their trained flag, adjacent same-flag pieces merged."""
    pieces: list[tuple[str, bool]] = []
    system = conv.system if conv.system is not None else system_prompt
    prompt = f"{IM_START}system\n{system}{IM_END}\n" if system else ""
    last = len(conv.turns) - 1
    for i, (user, assistant) in enumerate(conv.turns):
        prompt += f"{IM_START}user\n{user}{IM_END}\n{IM_START}assistant\n"
        train_this = not mask_history or i == last
        pieces.append((prompt, train_on_prompt))
        pieces.append((f"{assistant}{IM_END}", train_this))
        prompt = "\n"  # the newline after <|im_end|> belongs to the next prompt
    merged: list[tuple[str, bool]] = []
    for text, flag in pieces:
        if merged and merged[-1][1] == flag:
            merged[-1] = (merged[-1][0] + text, flag)
        else:
            merged.append((text, flag))
    return merged


def check_tokenizer(tokenizer: Any) -> None:
    for tok in (IM_START, IM_END):
        ids = tokenizer.convert_tokens_to_ids(tok)
        if ids is None or ids == tokenizer.unk_token_id:
            raise ConfigError(f"config: template: chatml needs the {tok} token, which the tokenizer lacks")


def tokenize(
    convs: Sequence[Conversation],
    tokenizer: Any,
    max_seq_len: int,
    system_prompt: str,
    mask_history: bool = False,
    train_on_prompt: bool = False,
) -> tuple[list[Example], int]:
    """Tokenise conversations; returns the examples and how many were dropped.

    Long samples are cut at ``max_seq_len`` from the end; a sample left with no
    trained token (its prompt alone fills the window) is dropped.
    """
    rendered = [render(c, system_prompt, mask_history, train_on_prompt) for c in convs]
    flat = [text for pieces in rendered for text, _ in pieces]
    # One batched call: the Rust tokenizer parallelises it.
    encoded = tokenizer(flat, add_special_tokens=False)["input_ids"] if flat else []
    examples: list[Example] = []
    dropped = 0
    k = 0
    for pieces in rendered:
        ids: list[int] = []
        trained: list[bool] = []
        for _, flag in pieces:
            toks = encoded[k]
            k += 1
            ids.extend(toks)
            trained.extend([flag] * len(toks))
        ids, trained = ids[:max_seq_len], trained[:max_seq_len]
        ex = Example(np.asarray(ids, dtype=np.int32), np.asarray(trained, dtype=bool))
        if ex.n_targets == 0:
            dropped += 1
            continue
        examples.append(ex)
    return examples, dropped
