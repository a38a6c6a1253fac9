"""Turn a container's log byte chunks into whole lines: safe UTF-8 decoding, a tail for summaries.

Docker hands out log frames, not lines: a frame can end inside a line or inside
a multi-byte character. The decoder keeps the unfinished part for the next
chunk and replaces bytes that are not UTF-8 instead of failing the launch.
"""

from __future__ import annotations

import codecs
import re
from collections import deque
from collections.abc import Iterable

from provisioner.launch.torchrun import RANK_LINE

# A Python exception line as a worker prints it (after the rank prefix, if any).
# `python -m missing.module` says only this (no exception line).
_NO_MODULE = re.compile(r"^(?:\[rank(\d+)\]:)?\S*: (No module named .*)$")
_EXCEPTION = re.compile(r"^(?:\[rank(\d+)\]:)?\s*((?:[A-Za-z_][\w.]*)?(?:Error|Exception|Interrupt)(?::\s.*|:?\s*))$")


class LineSplitter:
    """Feed byte chunks, get complete lines (without the newline); keeps the last `tail` lines."""

    def __init__(self, tail: int = 50):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""
        self.tail: deque[str] = deque(maxlen=tail)
        self.count = 0

    def feed(self, chunk: bytes) -> list[str]:
        text = self._partial + self._decoder.decode(chunk)
        # \r alone (progress bars) also ends a line for our purposes.
        pieces = re.split(r"\r\n|\n|\r(?!$)", text)
        self._partial = pieces.pop()
        return self._keep(pieces)

    def close(self) -> list[str]:
        """The unfinished last line (and any bytes left in the decoder), if any."""
        rest = self._partial + self._decoder.decode(b"", final=True)
        self._partial = ""
        return self._keep([rest.rstrip("\r")] if rest else [])

    def _keep(self, lines: list[str]) -> list[str]:
        self.tail.extend(lines)
        self.count += len(lines)
        return lines


def ranks_seen(lines: Iterable[str]) -> set[int]:
    return {int(m[1]) for line in lines if (m := RANK_LINE.match(line))}


def error_in(line: str) -> tuple[int | None, str] | None:
    """(rank or None, error text) when `line` reports an error (an exception, a missing module)."""
    m = _EXCEPTION.match(line) or _NO_MODULE.match(line)
    if not m:
        return None
    return (int(m[1]) if m[1] is not None else None), m[2].strip()


def describe_error(found: tuple[int | None, str]) -> str:
    rank, text = found
    return f"rank {rank}: {text}" if rank is not None else text


def first_error(lines: Iterable[str]) -> str | None:
    """The first error line in `lines`, named by rank: 'rank 2: RuntimeError: ...'.

    A worker's own line (rank-prefixed) wins over torchrun's summary
    (ChildFailedError), which only says that some worker failed.
    """
    found = [f for f in map(error_in, lines) if f]
    best = next((f for f in found if f[0] is not None), found[0] if found else None)
    return describe_error(best) if best else None


def strip_rank(line: str) -> tuple[int | None, str]:
    m = RANK_LINE.match(line)
    return (int(m[1]), line[m.end():]) if m else (None, line)
