"""A small JSON cache under ~/.cache/provision (or PROVISION_CACHE), for the loaded matrix and resolutions.

Entries are keyed by a fingerprint of the inputs; writes are atomic and a
read-only home only costs the cache, never the command. PROVISION_NO_CACHE
turns it off.
"""

from __future__ import annotations

import json
import os
import zlib


def cache_dir() -> str:
    return os.environ.get("PROVISION_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "provision"
    )


def fingerprint(*parts: str) -> str:
    """A short, stable digest of text parts (crc32 twice over; not for security)."""
    blob = "\x00".join(parts).encode()
    return f"{zlib.crc32(blob):08x}{zlib.adler32(blob):08x}{len(blob):x}"


def read(name: str):
    if os.environ.get("PROVISION_NO_CACHE"):
        return None
    try:
        with open(os.path.join(cache_dir(), name), encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def write(name: str, obj) -> None:
    if os.environ.get("PROVISION_NO_CACHE"):
        return
    root = cache_dir()
    path = os.path.join(root, name)
    try:
        os.makedirs(root, exist_ok=True)
        tmp = os.path.join(root, f".{name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(obj, separators=(",", ":")))
        os.replace(tmp, path)
    except OSError:
        pass
