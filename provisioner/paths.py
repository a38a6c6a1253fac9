"""Where the shipped data lives: the repository root in a checkout or an
editable install, ``provisioner/_data`` in an installed wheel."""

from __future__ import annotations

import os

_PKG = os.path.dirname(os.path.realpath(__file__))


def data_path(name: str) -> str:
    """The directory of shipped data ``name`` (matrices, templates, images), as a string.

    Plain os.path on purpose: `provision resolve` must start without importing pathlib.
    """
    for candidate in (os.path.join(os.path.dirname(_PKG), name), os.path.join(_PKG, "_data", name)):
        if os.path.isdir(candidate):
            return candidate
    raise FileNotFoundError(f"shipped data directory {name!r} not found next to {_PKG}")


def data_dir(name: str):
    """``data_path`` as a pathlib.Path."""
    from pathlib import Path

    return Path(data_path(name))
