"""Output helpers of the command line that need no click: JSON documents on stdout, the version line,
refusals, and the one-line errors every failure becomes (`guarded`, shared by the click app and the fast paths).

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


def refuse(schema: str, exc, as_json: bool) -> int:
    """A refusal with reasons (PlanRefused): the refused document and exit 2 with --json, else `exc` is raised
    (one line on stderr)."""
    if as_json:
        emit_json(refused_doc(schema, exc.reasons))
        return 2
    raise exc


def error_line(text: str) -> None:
    """`provision: error: TEXT` as one line on stderr (the text folded to one line, control characters shown)."""
    from provisioner.text import one_line
    from provisioner.validate import comment

    sys.stderr.write(f"provision: error: {comment(one_line(text))}\n")
    sys.stderr.flush()


def guarded(run) -> int:
    """Call run() as the command line does: a ProvisionError, a path the system refuses or Ctrl-C becomes one
    line on stderr and its exit code (2, 2, 130) instead of a traceback."""
    from provisioner.errors import ProvisionError

    try:
        return run()
    except ProvisionError as exc:
        error_line(str(exc))
        return exc.exit_code
    except OSError as exc:
        # A path the user named that the system refuses (too long, a loop, no permission, ...): bad input.
        if isinstance(exc, BrokenPipeError):
            raise
        error_line((f"{exc.filename}: " if exc.filename else "") + (exc.strerror or str(exc)))
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("provision: interrupted\n")
        return 130
