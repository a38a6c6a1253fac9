"""This package's own version, read from its installed metadata (the one place that knows it).

`provision --version`, every `--json` document and the image labels carry it. It is read from the
`provisioner-<version>.dist-info/METADATA` that pip wrote (an editable install writes one too) with
`os` alone, because `importlib.metadata` costs more start-up time than the whole warm `provision resolve`
fast path (email, zipfile, pathlib and csv on import); only when that does not find exactly one
distribution does it ask `importlib.metadata`.
"""

from __future__ import annotations

import os
import sys

DIST = "provisioner"
VERSION_KEY = "provision_version"
UNKNOWN = "unknown"  # running from a source tree that was never installed

_cached: str | None = None


def version() -> str:
    """The installed distribution's version ("unknown" when the package is not installed)."""
    global _cached
    if _cached is None:
        _cached = _from_dist_info() or _from_importlib() or UNKNOWN
    return _cached


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


def _from_dist_info() -> str | None:
    """The Version: header of the first sys.path entry holding one provisioner-*.dist-info, as
    importlib.metadata finds it."""
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
                    if key == "Version":
                        return value.strip() or None
        except OSError:
            return None
        return None
    return None


def _from_importlib() -> str | None:
    from importlib import metadata

    try:
        return metadata.version(DIST)
    except metadata.PackageNotFoundError:
        return None
