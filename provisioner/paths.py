"""Where the shipped data lives: the repository root in a checkout or an
editable install, ``provisioner/_data`` in an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """Return the directory of shipped data ``name`` (matrices, templates, images)."""
    for candidate in (_PKG.parent / name, _PKG / "_data" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"shipped data directory {name!r} not found next to {_PKG}")
