"""Output helpers of the command line that need no click: JSON documents on stdout, the version line.

`emit_json` is the one place every `--json` document goes through: it adds the `provision_version` of the
tool that wrote it (after `schema`), so a saved document says which release made it.
"""

from __future__ import annotations

import json
import sys

RESOLVE_SCHEMA = "provision.resolve/1"
VERSION_KEY = "provision_version"


def version_line() -> str:
    """What `provision --version` prints."""
    from provisioner.version import version

    return f"provision {version()}"


def stamped(obj):
    """A JSON document with the tool's version after its `schema` (documents that are not objects as they are)."""
    if not isinstance(obj, dict) or VERSION_KEY in obj:
        return obj
    from provisioner.version import version

    out = {}
    if "schema" in obj:
        out["schema"] = obj["schema"]
    out[VERSION_KEY] = version()
    out.update(obj)
    return out


def emit_json(obj) -> None:
    json.dump(stamped(obj), sys.stdout, indent=2, sort_keys=False, ensure_ascii=False)
    sys.stdout.write("\n")


def refused_doc(schema: str, reasons: list[str], **extra) -> dict:
    """The JSON document of a refusal: {"schema", "status": "refused", "reasons", ...extra}."""
    return {"schema": schema, "status": "refused", "reasons": list(reasons), **extra}
