"""Chat rendering, tokenisation and prompt masking.

A conversation becomes alternating pieces of text that are either trained
(assistant answers and their end-of-turn token) or masked (system, user,
role headers). Pieces are tokenised separately so the mask boundary is
exact; the boundaries sit next to special tokens, where BPE never merges.

Two templates: ``chatml`` is Qwen2.5's, written here with its default system
prompt; ``tokenizer`` renders with the model's own chat template and finds
each answer in the rendered text (for models that are not ChatML).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from provisioner.train.config import QWEN25_SYSTEM_PROMPT, ConfigError
from provisioner.train.data import Conversation, DataError

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
    conv: Conversation, system_prompt: str | None, mask_history: bool, train_on_prompt: bool
) -> list[tuple[str, bool]]:
    """Return Qwen2.5 ChatML text pieces with their trained flag, adjacent same-flag pieces merged.
    ``system_prompt`` None means Qwen2.5's default; "" means no system turn."""
    pieces: list[tuple[str, bool]] = []
    default = QWEN25_SYSTEM_PROMPT if system_prompt is None else system_prompt
    system = conv.system if conv.system is not None else default
    prompt = f"{IM_START}system\n{system}{IM_END}\n" if system else ""
    last = len(conv.turns) - 1
    for i, (user, assistant) in enumerate(conv.turns):
        prompt += f"{IM_START}user\n{user}{IM_END}\n{IM_START}assistant\n"
        train_this = not mask_history or i == last
        pieces.append((prompt, train_on_prompt))
        pieces.append((f"{assistant}{IM_END}", train_this))
        prompt = "\n"  # the newline after <|im_end|> belongs to the next prompt
    return _merge(pieces)


def render_with_tokenizer(
    conv: Conversation, tokenizer: Any, system_prompt: str | None, mask_history: bool, train_on_prompt: bool
) -> list[tuple[str, bool]]:
    """Render with the tokenizer's chat template; each answer (plus the EOS token right after it) is trained."""
    system = conv.system if conv.system is not None else system_prompt
    msgs = [{"role": "system", "content": system}] if system else []
    for user, assistant in conv.turns:
        msgs += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    try:
        text = tokenizer.apply_chat_template(msgs, tokenize=False)
    except Exception as exc:  # jinja errors of all kinds
        raise DataError(f"{conv.source}: the tokenizer's chat template failed: {exc}") from None
    eos = tokenizer.eos_token or ""
    pieces: list[tuple[str, bool]] = []
    prev = cursor = 0
    last = len(conv.turns) - 1
    for i, (user, assistant) in enumerate(conv.turns):
        at = text.find(user.strip(), cursor)
        answer = assistant.strip()  # templates commonly strip message content
        start = text.find(answer, at + len(user.strip())) if at >= 0 else -1
        if start < 0:
            raise DataError(
                f"{conv.source}: turn {i + 1} is not found verbatim in the chat template's output"
            )
        end = start + len(answer)
        if eos and text.startswith(eos, end):
            end += len(eos)
        pieces.append((text[prev:start], train_on_prompt))
        pieces.append((text[start:end], not mask_history or i == last))
        prev = cursor = end
    pieces.append((text[prev:], train_on_prompt))
    return _merge([p for p in pieces if p[0]])


def _merge(pieces: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    merged: list[tuple[str, bool]] = []
    for text, flag in pieces:
        if merged and merged[-1][1] == flag:
            merged[-1] = (merged[-1][0] + text, flag)
        else:
            merged.append((text, flag))
    return merged


def _has_token(tokenizer: Any, tok: str) -> bool:
    ids = tokenizer.convert_tokens_to_ids(tok)
    return ids is not None and ids != tokenizer.unk_token_id


def resolve_template(requested: str, tokenizer: Any) -> str:
    """``auto``: ChatML when the tokenizer has its tokens (Qwen), else the tokenizer's own template."""
    if requested == "auto":
        requested = "chatml" if _has_token(tokenizer, IM_START) else "tokenizer"
    if requested == "chatml":
        for tok in (IM_START, IM_END):
            if not _has_token(tokenizer, tok):
                raise ConfigError(
                    f"config: template: chatml needs the {tok} token, which the tokenizer lacks"
                )
    elif not getattr(tokenizer, "chat_template", None):
        raise ConfigError("config: template: the tokenizer has no chat template; use template: chatml")
    return requested


def tokenize(
    convs: Sequence[Conversation],
    tokenizer: Any,
    max_seq_len: int,
    system_prompt: str | None,
    mask_history: bool = False,
    train_on_prompt: bool = False,
    template: str = "chatml",
) -> tuple[list[Example], int]:
    """Tokenise conversations; returns the examples and how many were dropped.

    Long samples are cut at ``max_seq_len`` from the end; a sample left with no
    trained token (its prompt alone fills the window) is dropped.
    """
    fn = render if template == "chatml" else lambda c, *a: render_with_tokenizer(c, tokenizer, *a)
    rendered = [fn(c, system_prompt, mask_history, train_on_prompt) for c in convs]
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
