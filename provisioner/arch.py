"""CPU architecture names: the spellings users, uname, image labels and CANN install files use, mapped to
the two this package speaks (x86_64, aarch64)."""

from __future__ import annotations

import os

ALIASES = {"x86_64": "x86_64", "aarch64": "aarch64", "amd64": "x86_64", "arm64": "aarch64"}
ARCHES = ("x86_64", "aarch64")  # the names the matrices, stacks and image labels use


def normalize(name: object) -> str | None:
    """x86_64 / aarch64 for any known spelling (any case), else None."""
    return ALIASES.get(str(name or "").strip().lower())


def machine() -> str | None:
    """This machine's architecture, normalized (None for one Ascend software is not built for)."""
    return normalize(os.uname().machine)
