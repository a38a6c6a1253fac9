"""Chip-id lists, the one reading and writing of them: `--devices 0-3,6`, ASCEND_VISIBLE_DEVICES (the same
form, or names such as npu-1 / Ascend910-2), ASCEND_RT_VISIBLE_DEVICES (container-local ids, commas only),
and the short form reports print ("davinci0-3,6")."""

from __future__ import annotations

import re

from provisioner.errors import ProvisionError

_PART = re.compile(r"^(\d+)(?:-(\d+))?$")
_NAMED = re.compile(r"^[A-Za-z][A-Za-z0-9]*-(\d+)$")
# More than any Ascend host has (A3: 16 per node); stops a typo like 0-99999 from planning forever.
MAX_ID = 1023


class DeviceSpecError(ProvisionError):
    """A --devices value that cannot be read."""


def parse(spec: str, present: list[int] | None = None, flag: str = "--devices") -> list[int]:
    """Sorted, de-duplicated ids of a user's selection. ``all`` needs ``present`` (the ids the host has).

    Raises DeviceSpecError with one line naming the bad piece.
    """
    text = (spec or "").strip()
    if not text:
        raise DeviceSpecError(f"{flag} is empty: give physical chip ids such as 0-3,6 or 'all'")
    if text.lower() == "all":
        if not present:
            raise DeviceSpecError(f"{flag} all: the host has no chip device nodes")
        return sorted(set(present))
    ids: set[int] = set()
    for piece in text.split(","):
        piece = piece.strip()
        m = _PART.match(piece)
        if not m:
            raise DeviceSpecError(
                f"{flag} {spec!r}: cannot read {piece!r} (write ids and ranges like 0-3,6; no spaces inside a range)"
            )
        lo = int(m[1])
        hi = int(m[2]) if m[2] is not None else lo
        if hi < lo:
            raise DeviceSpecError(f"{flag} {spec!r}: range {piece!r} runs backwards (write {hi}-{lo})")
        if hi > MAX_ID:
            raise DeviceSpecError(f"{flag} {spec!r}: id {hi} is out of range (0-{MAX_ID})")
        ids.update(range(lo, hi + 1))
    return sorted(ids)


def read(value: str, names: bool = True) -> tuple[list[int], list[str]]:
    """A list someone else wrote (ASCEND_VISIBLE_DEVICES): (sorted ids, the pieces that could not be read).

    Ranges and ids as in `parse`; `void` and empty pieces name nothing; with `names`, `npu-1` or
    `Ascend910-2` name id 1 / 2 as Ascend Docker Runtime reads them.
    """
    ids: set[int] = set()
    unread: list[str] = []
    for piece in (value or "").split(","):
        piece = piece.strip()
        if not piece or piece.lower() == "void":
            continue
        m = _PART.match(piece)
        if m and int(m[2] if m[2] is not None else m[1]) >= int(m[1]):
            ids.update(range(int(m[1]), int(m[2] if m[2] is not None else m[1]) + 1))
        elif names and (n := _NAMED.match(piece)):
            ids.add(int(n[1]))
        else:
            unread.append(piece)
    return sorted(ids), unread


def plain(value: str) -> list[int] | None:
    """Comma-separated ids with nothing else (ASCEND_RT_VISIBLE_DEVICES, which CANN stops reading at the
    first character it does not expect), in the order given; None for anything else."""
    pieces = (value or "").split(",")
    if not value or not all(p.isdigit() for p in pieces):
        return None
    return [int(p) for p in pieces]


def format_ids(ids: list[int] | tuple[int, ...]) -> str:
    """The shortest list for ``ids``: [0,1,2,3,6] -> '0-3,6', [4,5] -> '4,5' (the runtime reads the same form)."""
    out: list[str] = []
    run: list[int] = []
    for i in sorted(set(ids)):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            out.append(_run(run))
        run = [i]
    if run:
        out.append(_run(run))
    return ",".join(out)


def _run(run: list[int]) -> str:
    if len(run) == 1:
        return str(run[0])
    if len(run) == 2:
        return f"{run[0]},{run[1]}"
    return f"{run[0]}-{run[-1]}"
