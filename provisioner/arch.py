"""CPU architecture names: the spellings users, uname, image labels and CANN install files use, mapped to
the two this package speaks (x86_64, aarch64)."""

from __future__ import annotations

import os

ALIASES = {"x86_64": "x86_64", "aarch64": "aarch64", "amd64": "x86_64", "arm64": "aarch64"}
ARCHES = ("x86_64", "aarch64")  # the names the matrices, stacks and image labels use
PLATFORMS = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}  # what an engine builds and pulls for each


def normalize(name: object) -> str | None:
    """x86_64 / aarch64 for any known spelling (any case), else None."""
    return ALIASES.get(str(name or "").strip().lower())


def platform(name: object) -> str | None:
    """The engine platform (linux/amd64, linux/arm64) for any known spelling, else None."""
    arch = normalize(name)
    return PLATFORMS[arch] if arch else None


def machine() -> str | None:
    """This machine's architecture, normalized (None for one Ascend software is not built for)."""
    return normalize(os.uname().machine)
