"""GRPO prompt records: the question to sample from and, for rule rewards, the reference answer.

Accepted shapes, in JSON Lines or one JSON array, each naming file:line when wrong:
  orz    Open-Reasoner-Zero's orz_math_57k_collected.json: a two-item dialogue
         [{"from": "human", "value": Q}, {"from": "assistant", "ground_truth": {"value": A}}]
  gsm8k  {"question": Q, "answer": "...reasoning...\\n#### 72"} (the number after #### is the answer)
  chat   {"messages": [{"role": "system"|"user"|"assistant", ...}, ..., {"role": "user", ...}],
          "ground_truth": A} (also "prompt" as a message list or a string, TRL's style)
No torch here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from provisioner.train.data import DataError, records

# DeepSeek-R1's reasoning prompt (arXiv:2501.12948, table 1), the one the format reward checks.
R1_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves it. "
    "The assistant first thinks about the reasoning process in the mind and then provides the user with the "
    "answer. The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>."
)
_GSM8K_ANSWER = re.compile(r"####\s*(.+?)\s*$", re.S)


@dataclass(frozen=True)
class PromptRecord:
    system: str | None
    turns: tuple[tuple[str, str], ...]  # (role, content), ending with a user turn
    ground_truth: str | None
    source: str  # file:line


def load_prompts(paths: list[str], data_format: str = "auto") -> list[PromptRecord]:
    out: list[PromptRecord] = []
    for path in paths:
        from pathlib import Path

        for where, record in records(Path(path)):
            out.append(to_prompt(record, where, data_format))
    return out


def to_prompt(record: Any, where: str, data_format: str = "auto") -> PromptRecord:
    fmt = data_format if data_format != "auto" else _detect(record, where)
    if fmt == "orz":
        return _from_orz(record, where)
    if fmt == "gsm8k":
        return _from_gsm8k(record, where)
    return _from_chat(record, where)


def _detect(record: Any, where: str) -> str:
    if isinstance(record, list):
        return "orz"
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object or an orz dialogue list, got {type(record).__name__}")
    if "messages" in record or "prompt" in record:
        return "chat"
    if "question" in record:
        return "gsm8k"
    raise DataError(
        f"{where}: not a prompt record: expected 'messages' or 'prompt' (chat), 'question' (gsm8k) "
        "or an orz dialogue list"
    )


def _from_orz(rec: Any, where: str) -> PromptRecord:
    if not (isinstance(rec, list) and len(rec) == 2 and all(isinstance(x, dict) for x in rec)):
        raise DataError(f"{where}: an orz record is a list of two objects: the question and the ground truth")
    question = rec[0].get("value")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: orz record: [0].value must be the question text")
    truth = rec[1].get("ground_truth")
    value = truth.get("value") if isinstance(truth, dict) else None
    if not _scalar(value):
        raise DataError(f"{where}: orz record: [1].ground_truth.value must be the reference answer")
    return PromptRecord(None, (("user", question),), _text(value), where)


def _from_gsm8k(rec: Any, where: str) -> PromptRecord:
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected a JSON object with 'question' and 'answer'")
    question, answer = rec.get("question"), rec.get("answer")
    if not isinstance(question, str) or not question.strip():
        raise DataError(f"{where}: missing 'question'")
    if not isinstance(answer, str):
        raise DataError(f"{where}: missing 'answer'")
    m = _GSM8K_ANSWER.search(answer)
    if m is None:
        raise DataError(f"{where}: 'answer' has no '#### <final answer>' line (GSM8K style)")
    return PromptRecord(None, (("user", question),), m.group(1).replace(",", "").strip(), where)


def _from_chat(rec: Any, where: str) -> PromptRecord:
    if not isinstance(rec, dict):
        raise DataError(f"{where}: expected a JSON object with 'messages' and 'ground_truth'")
    messages = rec.get("messages", rec.get("prompt"))
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: 'messages' must be a non-empty list (or 'prompt' a string)")
    system: str | None = None
    turns: list[tuple[str, str]] = []
    for i, msg in enumerate(messages):
        if not (isinstance(msg, dict) and isinstance(msg.get("role"), str) and isinstance(msg.get("content"), str)):
            raise DataError(f"{where}: messages[{i}] must have string 'role' and 'content'")
        role = msg["role"]
        if role == "system":
            if i != 0:
                raise DataError(f"{where}: messages[{i}]: a system message is only allowed first")
            system = msg["content"]
        elif role in ("user", "assistant"):
            if turns and turns[-1][0] == role:
                raise DataError(f"{where}: messages[{i}]: two {role} messages in a row")
            turns.append((role, msg["content"]))
        else:
            raise DataError(f"{where}: messages[{i}]: unknown role {role!r} (system, user, assistant)")
    if not turns or turns[-1][0] != "user":
        raise DataError(f"{where}: a GRPO prompt must end with a user message (the model writes the answer)")
    if turns[0][0] != "user":
        raise DataError(f"{where}: the first turn after the system message must be a user message")
    truth = rec.get("ground_truth")
    if truth is not None and not _scalar(truth):
        raise DataError(f"{where}: 'ground_truth' must be a string or a number")
    return PromptRecord(system, tuple(turns), None if truth is None else _text(truth), where)


def _scalar(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip()) or (
        isinstance(value, (int, float)) and not isinstance(value, bool)
    )


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else str(value)


def render_chatml(rec: PromptRecord, system_prompt: str | None) -> str:
    """Qwen2.5 ChatML up to the assistant header. ``system_prompt`` None: R1's reasoning prompt;
    "": none. A record's own system message wins."""
    from provisioner.train.chatml import IM_END, IM_START

    system = rec.system if rec.system is not None else (R1_SYSTEM_PROMPT if system_prompt is None else system_prompt)
    text = f"{IM_START}system\n{system}{IM_END}\n" if system else ""
    for role, content in rec.turns:
        text += f"{IM_START}{role}\n{content}{IM_END}\n"
    return text + f"{IM_START}assistant\n"


def as_messages(rec: PromptRecord, system_prompt: str | None) -> list[dict[str, str]]:
    """The record as chat messages, for models rendered with their own chat template."""
    system = rec.system if rec.system is not None else (R1_SYSTEM_PROMPT if system_prompt is None else system_prompt)
    out = [{"role": "system", "content": system}] if system else []
    return out + [{"role": r, "content": c} for r, c in rec.turns]


def check_records(records: list[PromptRecord], rewards: list[str]) -> None:
    """The math reward needs a reference answer on every record."""
    if not records:
        raise DataError("config: data: no prompt records")
    if "math" in rewards:
        for rec in records:
            if rec.ground_truth is None:
                raise DataError(f"{rec.source}: no ground_truth, which the math reward needs")
