"""Output helpers of the command line that need no click: JSON documents on stdout."""

from __future__ import annotations

import json
import sys

RESOLVE_SCHEMA = "provision.resolve/1"


def emit_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, ensure_ascii=False)
    sys.stdout.write("\n")


def refused_doc(schema: str, reasons: list[str], **extra) -> dict:
    """The JSON document of a refusal: {"schema", "status": "refused", "reasons", ...extra}."""
    return {"schema": schema, "status": "refused", "reasons": list(reasons), **extra}
