"""Parse chip selections: ``0-3,6`` (physical ids, as in ``ls /dev/davinci*``) or ``all``."""

from __future__ import annotations

import re

from provisioner.errors import ProvisionError

_PART = re.compile(r"^(\d+)(?:-(\d+))?$")
# More than any Ascend host has (A3: 16 per node); stops a typo like 0-99999 from planning forever.
MAX_ID = 1023


class DeviceSpecError(ProvisionError):
    """A --devices value that cannot be read."""


def parse(spec: str, present: list[int] | None = None) -> list[int]:
    """Sorted, de-duplicated ids. ``all`` needs ``present`` (the ids the host has).

    Raises DeviceSpecError with one line naming the bad piece.
    """
    text = (spec or "").strip()
    if not text:
        raise DeviceSpecError("--devices is empty: give physical chip ids such as 0-3,6 or 'all'")
    if text.lower() == "all":
        if not present:
            raise DeviceSpecError("--devices all: the host has no chip device nodes")
        return sorted(set(present))
    ids: set[int] = set()
    for piece in text.split(","):
        piece = piece.strip()
        m = _PART.match(piece)
        if not m:
            raise DeviceSpecError(
                f"--devices {spec!r}: cannot read {piece!r} (write ids and ranges like 0-3,6; no spaces inside a range)"
            )
        lo = int(m[1])
        hi = int(m[2]) if m[2] is not None else lo
        if hi < lo:
            raise DeviceSpecError(f"--devices {spec!r}: range {piece!r} runs backwards (write {hi}-{lo})")
        if hi > MAX_ID:
            raise DeviceSpecError(f"--devices {spec!r}: id {hi} is out of range (0-{MAX_ID})")
        ids.update(range(lo, hi + 1))
    return sorted(ids)


def format_ids(ids: list[int]) -> str:
    """The shortest spec for ``ids``: [0,1,2,3,6] -> '0-3,6' (the runtime accepts the same form)."""
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
