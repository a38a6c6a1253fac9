"""Output helpers of the command line that need no click: JSON documents on stdout, the version line.

`emit_json` is the one place every `--json` document goes through: it adds the `provision_version` of the
tool that wrote it (after `schema`), so a saved document says which release made it.
"""

from __future__ import annotations

import json
import sys

from provisioner.version import stamped

RESOLVE_SCHEMA = "provision.resolve/1"


def version_line() -> str:
    """What `provision --version` prints."""
    from provisioner.version import version

    return f"provision {version()}"


def emit_json(obj) -> None:
    json.dump(stamped(obj), sys.stdout, indent=2, sort_keys=False, ensure_ascii=False)
    sys.stdout.write("\n")


def refused_doc(schema: str, reasons: list[str], **extra) -> dict:
    """The JSON document of a refusal: {"schema", "status": "refused", "reasons", ...extra}."""
    return {"schema": schema, "status": "refused", "reasons": list(reasons), **extra}
