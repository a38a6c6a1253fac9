"""Read SFT data files into conversations, naming file:line for every bad record.

Two record shapes are accepted, in JSON Lines or as one JSON array:
  alpaca: {"instruction", "input"?, "output", "system"?, "history"?: [[user, assistant], ...]}
  chat:   {"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]}
No torch here, so ``provision-train --check`` can validate data cheaply.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provisioner.train.config import ConfigError


class DataError(ConfigError):
    """A data file problem; the message starts with file:line."""


@dataclass(frozen=True)
class Conversation:
    system: str | None
    turns: tuple[tuple[str, str], ...]  # (user, assistant) pairs, in order
    source: str  # "file:line", for messages about this record


def load_conversations(paths: list[str], data_format: str = "auto") -> list[Conversation]:
    out: list[Conversation] = []
    for path in paths:
        for where, record in records(Path(path)):
            out.append(to_conversation(record, where, data_format))
    return out


def to_conversation(record: Any, where: str, data_format: str = "auto") -> Conversation:
    if not isinstance(record, dict):
        raise DataError(f"{where}: expected a JSON object, got {type(record).__name__}")
    fmt = data_format
    if fmt == "auto":
        if "messages" in record:
            fmt = "chat"
        elif "instruction" in record:
            fmt = "alpaca"
        else:
            raise DataError(f"{where}: neither 'messages' (chat) nor 'instruction' (alpaca) present")
    return _from_chat(record, where) if fmt == "chat" else _from_alpaca(record, where)


def _from_alpaca(rec: dict[str, Any], where: str) -> Conversation:
    instruction = _text(rec, "instruction", where, required=True)
    query = _text(rec, "input", where, required=False)
    output = _text(rec, "output", where, required=True)
    system = _text(rec, "system", where, required=False) or None
    history_raw = rec.get("history") or []
    if not isinstance(history_raw, list):
        raise DataError(f"{where}: 'history' must be a list of [user, assistant] pairs")
    turns: list[tuple[str, str]] = []
    for i, pair in enumerate(history_raw):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
            raise DataError(f"{where}: history[{i}] must be a [user, assistant] pair of strings")
        turns.append((pair[0], pair[1]))
    user = f"{instruction}\n{query}" if query else instruction
    turns.append((user, output))
    return Conversation(system=system, turns=tuple(turns), source=where)


def _from_chat(rec: dict[str, Any], where: str) -> Conversation:
    messages = rec.get("messages")
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{where}: 'messages' must be a non-empty list")
    system: str | None = None
    turns: list[tuple[str, str]] = []
    pending_user: str | None = None
    for i, msg in enumerate(messages):
        if (
            not isinstance(msg, dict)
            or not isinstance(msg.get("role"), str)
            or not isinstance(msg.get("content"), str)
        ):
            raise DataError(f"{where}: messages[{i}] must have string 'role' and 'content'")
        role, content = msg["role"], msg["content"]
        if role == "system":
            if i != 0:
                raise DataError(f"{where}: messages[{i}]: a system message is only allowed first")
            system = content
        elif role == "user":
            if pending_user is not None:
                raise DataError(f"{where}: messages[{i}]: two user messages in a row")
            pending_user = content
        elif role == "assistant":
            if pending_user is None:
                raise DataError(f"{where}: messages[{i}]: assistant message without a user message before it")
            turns.append((pending_user, content))
            pending_user = None
        else:
            raise DataError(f"{where}: messages[{i}]: unknown role {role!r} (system, user, assistant)")
    if pending_user is not None or not turns:
        raise DataError(f"{where}: conversation must end with an assistant message")
    return Conversation(system=system, turns=tuple(turns), source=where)


def _text(rec: dict[str, Any], key: str, where: str, required: bool) -> str:
    value = rec.get(key)
    if value is None:
        if required:
            raise DataError(f"{where}: missing {key!r}")
        return ""
    if not isinstance(value, str):
        raise DataError(f"{where}: {key!r} must be a string")
    if required and not value.strip():
        raise DataError(f"{where}: {key!r} is empty")
    return value


def records(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        bad_line = path.read_bytes()[: exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{bad_line}: not valid UTF-8") from None
    stripped = text.lstrip()
    if path.suffix == ".json" and stripped.startswith("["):
        yield from _array_records(path, text)
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{lineno}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{lineno}: invalid JSON: {exc.msg} (column {exc.colno})") from None


def _array_records(path: Path, text: str) -> Iterator[tuple[str, Any]]:
    """Walk a JSON array element by element so each record keeps its line number."""
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    n = len(text)

    def skip_ws(i: int) -> int:
        while i < n and text[i] in " \t\r\n":
            i += 1
        return i

    def line_of(i: int) -> int:
        return text.count("\n", 0, i) + 1

    pos = skip_ws(pos)
    if pos < n and text[pos] == "]":
        return
    while True:
        pos = skip_ws(pos)
        start = pos
        try:
            record, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg} (column {exc.colno})") from None
        yield f"{path}:{line_of(start)}", record
        pos = skip_ws(pos)
        if pos < n and text[pos] == ",":
            pos += 1
            continue
        if pos < n and text[pos] == "]":
            if skip_ws(pos + 1) != n:
                raise DataError(f"{path}:{line_of(pos + 1)}: invalid JSON: extra data after the array")
            return
        raise DataError(f"{path}:{line_of(pos)}: invalid JSON: expected ',' or ']' after a record")
