"""Reward functions for GRPO, in TRL's calling convention.

A reward function takes ``prompts`` and ``completions`` (lists of strings, one
entry per sampled completion) plus every other dataset column as a keyword
list (here ``ground_truth``), and returns one float per completion (None:
no opinion, e.g. a record without a reference answer).

Built in:
  math    1.0 when the answer (inside <answer>…</answer> if present, else the
          whole completion; \\boxed{} first) is mathematically equal to the
          reference, checked with the math-verify package; else 0.0.
  format  1.0 when the completion is exactly <think>…</think> <answer>…</answer>
          (DeepSeek-R1's format, which the default GRPO system prompt asks for).
Anything else is an import path, ``package.module:function`` or
``path/to/file.py:function``, resolved when the run starts.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from provisioner.train.errors import ConfigError

BUILTIN = ("math", "format")
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.S)
_FORMAT = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.S)

RewardFn = Callable[..., list[float | None]]


def completion_text(completion: Any) -> str:
    """TRL passes plain strings for text prompts and message lists for conversational ones."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def _parse_gold(truth: str) -> list[Any]:
    from math_verify import parse

    # A bare LaTeX answer ("\frac{72}{5}", "2^{n+1}") parses fully only inside math delimiters.
    return parse(f"${truth}$") or parse(truth)


def _parse_answer(text: str) -> list[Any]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse

    m = _ANSWER.findall(text)
    region = m[-1] if m else text
    return parse(region, extraction_config=[LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig()])


def math_accuracy(
    prompts: Sequence[Any], completions: Sequence[Any], ground_truth: Sequence[str | None] | None = None, **_: Any
) -> list[float | None]:
    from math_verify import verify

    truths = list(ground_truth) if ground_truth is not None else [None] * len(completions)
    out: list[float | None] = []
    gold_cache: dict[str, list[Any]] = {}
    for completion, truth in zip(completions, truths, strict=True):
        if truth is None:
            out.append(None)
            continue
        gold = gold_cache.get(truth)
        if gold is None:
            gold = gold_cache[truth] = _parse_gold(truth)
        if not gold:  # a reference math-verify cannot read: no opinion rather than a wrong zero
            out.append(None)
            continue
        answer = _parse_answer(completion_text(completion))
        out.append(1.0 if answer and verify(gold, answer) else 0.0)
    return out


def format_think_answer(prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float | None]:
    return [1.0 if _FORMAT.match(completion_text(c)) else 0.0 for c in completions]


def _split(name: str) -> tuple[str, str]:
    target, sep, func = name.rpartition(":")
    if not sep:
        target, _, func = name.rpartition(".")
    if not target or not func:
        raise ConfigError(
            f"config: grpo.rewards: {name!r} is neither a built-in reward ({', '.join(BUILTIN)}) "
            "nor an import path like package.module:function or file.py:function"
        )
    return target, func


def check_reward_names(names: Sequence[str]) -> None:
    """Validate reward names without importing user code (the run imports it)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(f"config: grpo.rewards: {name!r} is listed twice")
        seen.add(name)
        if name in BUILTIN:
            continue
        target, _ = _split(name)
        if target.endswith(".py"):
            if not Path(target).is_file():
                raise ConfigError(f"config: grpo.rewards: {name!r}: file not found: {target}")
        else:
            try:
                spec = importlib.util.find_spec(target)
            except (ImportError, ValueError):
                spec = None
            if spec is None:
                raise ConfigError(f"config: grpo.rewards: {name!r}: module {target!r} not found")


def load_reward(name: str) -> RewardFn:
    if name == "math":
        return math_accuracy
    if name == "format":
        return format_think_answer
    target, func_name = _split(name)
    try:
        if target.endswith(".py"):
            spec = importlib.util.spec_from_file_location(Path(target).stem, target)
            if spec is None or spec.loader is None:
                raise ImportError(f"cannot load {target}")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except Exception as exc:
        raise ConfigError(f"config: grpo.rewards: {name!r}: import failed: {type(exc).__name__}: {exc}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ConfigError(f"config: grpo.rewards: {name!r}: {target} has no function {func_name!r}")
    return func


def load_rewards(names: Sequence[str]) -> list[RewardFn]:
    return [load_reward(n) for n in names]
