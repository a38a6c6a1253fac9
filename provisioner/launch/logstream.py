"""Turn a container's log byte chunks into whole lines: safe UTF-8 decoding, a tail for summaries, and the
quieting of what an intended stop makes torchrun print.

Docker hands out log frames, not lines: a frame can end inside a line or inside
a multi-byte character. The decoder keeps the unfinished part for the next
chunk and replaces bytes that are not UTF-8 instead of failing the launch.
"""

from __future__ import annotations

import codecs
import re
from collections import deque
from collections.abc import Iterable

from provisioner.devices.torchrun import RANK_LINE

# A Python exception line as a worker prints it (after the rank prefix, if any).
# `python -m missing.module` says only this (no exception line).
_NO_MODULE = re.compile(r"^(?:\[rank(\d+)\]:)?\S*: (No module named .*)$")
# torchrun's own notices when it is stopped ("W1202 23:39:33.777000 7 torch/.../api.py:753] Received 15 death
# signal, shutting down workers", "... Sending process 11 closing signal SIGTERM").
_STOP_NOTICE = re.compile(r"^[IWE]\d{4} \S+ \d+ \S+\] (?:Received \d+ death signal|Sending process \d+ closing signal)")
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
# The exceptions a stop raises: torchrun's on SIGTERM/SIGINT/SIGHUP, a worker's on SIGINT.
_STOP_EXCEPTIONS = re.compile(r"^(?:[\w.]+\.)?(?:SignalException|KeyboardInterrupt)\b")
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


class StopQuieter:
    """Once a stop is intended (`active`), hold back what the stop itself makes the job print: torchrun's
    "death signal" / "closing signal" notices and every traceback (per rank) that ends in the stop's own
    exception (SignalException, KeyboardInterrupt). Any other line passes, and so does a traceback ending in
    another exception (a checkpoint that failed to save while stopping is worth seeing). Before `active` every
    line passes. The caller keeps the full log in its tail either way."""

    def __init__(self) -> None:
        self.active = False
        self.dropped = 0
        self._held: dict[int | None, list[str]] = {}  # rank -> an unfinished traceback

    def feed(self, lines: list[str]) -> list[str]:
        if not self.active and not self._held:
            return lines
        out: list[str] = []
        for line in lines:
            rank, text = strip_rank(line)
            held = self._held.get(rank)
            if held is not None:
                held.append(line)
                if text and not text[0].isspace() and not text.startswith((_TRACEBACK, *_CHAINED)):
                    del self._held[rank]  # the exception line: the block is complete
                    if _STOP_EXCEPTIONS.match(text):
                        self.dropped += len(held)
                    else:
                        out += held
            elif self.active and text.startswith(_TRACEBACK):
                self._held[rank] = [line]
            elif self.active and _STOP_NOTICE.match(text):
                self.dropped += 1
            else:
                out.append(line)
        return out

    def close(self) -> list[str]:
        """Tracebacks that never ended (the process was killed mid-way): shown, as nothing says what they were."""
        out = [line for held in self._held.values() for line in held]
        self._held.clear()
        return out
