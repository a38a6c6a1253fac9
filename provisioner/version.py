"""This package's own version, read from its installed metadata (the one place that knows it).

`provision --version`, every `--json` document and the image labels carry it. It is read from the
`provisioner-<version>.dist-info/METADATA` that pip wrote (an editable install writes one too) with
`os` alone, because `importlib.metadata` costs more start-up time than the whole warm `provision resolve`
fast path (email, zipfile, pathlib and csv on import); only when that does not find exactly one
distribution does it ask `importlib.metadata`.

The Python the package needs (its Requires-Python, pyproject.toml's requires-python) is read from the
pyproject.toml of the checkout the package runs from, else the same way as the version: every image provision
builds installs provision itself, so the resolver holds each image's Python to it.
"""

from __future__ import annotations

import os
import sys

DIST = "provisioner"
VERSION_KEY = "provision_version"
UNKNOWN = "unknown"  # running from a source tree that was never installed

_cached: str | None = None
_cached_python: str | None = None


def version() -> str:
    """The installed distribution's version ("unknown" when the package is not installed)."""
    global _cached
    if _cached is None:
        _cached = _from_dist_info() or _from_importlib() or UNKNOWN
    return _cached


def requires_python() -> str:
    """The package's Requires-Python specifier (e.g. ``>=3.10``; "" when it names none or nothing can be read).

    The one place it is written is pyproject.toml's requires-python. Run from a checkout (the package beside a
    pyproject.toml that names it, as image/project.py finds it), that file is read: it is what an image installs,
    and an editable install's metadata keeps the value of the day it was installed. Otherwise (an installed
    wheel) the installed metadata is.
    """
    global _cached_python
    if _cached_python is None:
        src = requires_python_at()
        if src is None:
            src = _from_dist_info("Requires-Python") or _from_importlib("Requires-Python")
        _cached_python = src or ""
    return _cached_python


def requires_python_at(root: str | None = None) -> str | None:
    """requires-python of the [project] table of the pyproject.toml at `root` (default: the directory above this
    package), "" when that table names no requires-python, None when `root` is no checkout of this package.
    Read with a line scan, not a TOML parser: the CLI's fast path reads it."""
    import re

    if root is None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        with open(os.path.join(root, "pyproject.toml"), encoding="utf-8") as fh:
            text = fh.read(1 << 20)
    except (OSError, UnicodeDecodeError):
        return None
    table, name, floor = None, None, ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("["):
            table = stripped.split("#", 1)[0].strip()
            continue
        if table != "[project]":
            continue
        m = re.match(r"""(name|requires-python)\s*=\s*(["'])(.*?)\2""", stripped)
        if m and m.group(1) == "name":
            name = m.group(3)
        elif m:
            floor = m.group(3).strip()
    if name != DIST or not os.path.isdir(os.path.join(root, DIST)):
        return None
    return floor


def stamped(obj):
    """A JSON document with the tool's version after its `schema` (documents that are not objects as they are):
    every document provision and provision-train print carries it."""
    if not isinstance(obj, dict) or VERSION_KEY in obj:
        return obj
    out = {}
    if "schema" in obj:
        out["schema"] = obj["schema"]
    out[VERSION_KEY] = version()
    out.update(obj)
    return out


def _from_dist_info(header: str = "Version") -> str | None:
    """A header (Version: by default) of the METADATA of the first sys.path entry holding one
    provisioner-*.dist-info, as importlib.metadata finds it."""
    prefix = DIST + "-"
    for entry in sys.path:
        try:
            names = [n for n in os.listdir(entry or ".") if n.startswith(prefix) and n.endswith(".dist-info")]
        except OSError:
            continue
        if len(names) != 1:
            if names:
                return None  # several installs in one place: let importlib.metadata choose as pip would
            continue
        try:
            with open(os.path.join(entry or ".", names[0], "METADATA"), encoding="utf-8") as fh:
                for line in fh:
                    if not line.strip():
                        break  # the headers end at the first blank line
                    key, _, value = line.partition(":")
                    if key == header:
                        return value.strip() or None
        except OSError:
            return None
        return None
    return None


def _from_importlib(header: str = "Version") -> str | None:
    from importlib import metadata

    try:
        meta = metadata.metadata(DIST)
    except metadata.PackageNotFoundError:
        return None
    return meta[header] if header in meta else None
