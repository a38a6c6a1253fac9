"""A small JSON cache under ~/.cache/provision (or PROVISION_CACHE), for the loaded matrix and resolutions.

Entries are keyed by a fingerprint of the inputs; writes are atomic and a
read-only home only costs the cache, never the command. PROVISION_NO_CACHE
turns it off.
"""

from __future__ import annotations

import json
import os
import zlib

MAX_ENTRY = 64 << 20  # bytes; the loaded matrix is well under 1 MiB


def cache_dir() -> str:
    return os.environ.get("PROVISION_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "provision"
    )


def fingerprint(*parts: str) -> str:
    """A short, stable digest of text parts (crc32 twice over; not for security)."""
    blob = "\x00".join(parts).encode()
    return f"{zlib.crc32(blob):08x}{zlib.adler32(blob):08x}{len(blob):x}"


def read(name: str):
    """The entry's object, or None (a miss) when it is absent, unreadable, truncated or altered: the first
    line is the fingerprint of the rest, so a corrupt entry is never used and the next write replaces it."""
    if os.environ.get("PROVISION_NO_CACHE"):
        return None
    try:
        with open(os.path.join(cache_dir(), name), "rb") as fh:
            blob = fh.read(MAX_ENTRY + 1)
        head, sep, body = blob.partition(b"\n")
        if not sep or len(blob) > MAX_ENTRY or head.decode("ascii") != _digest(body):
            return None
        return json.loads(body)
    except (OSError, ValueError, RecursionError):
        return None


def _digest(body: bytes) -> str:
    return f"{zlib.crc32(body):08x}{zlib.adler32(body):08x}{len(body):x}"


def write(name: str, obj) -> None:
    if os.environ.get("PROVISION_NO_CACHE"):
        return
    root = cache_dir()
    path = os.path.join(root, name)
    try:
        os.makedirs(root, exist_ok=True)
        tmp = os.path.join(root, f".{name}.{os.getpid()}.tmp")
        body = json.dumps(obj, separators=(",", ":")).encode()
        if len(body) > MAX_ENTRY:
            return
        with open(tmp, "wb") as fh:
            fh.write(_digest(body).encode() + b"\n" + body)
        os.replace(tmp, path)
    except (OSError, ValueError, RecursionError):
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass
