"""The stack for the host a command targets: `provision resolve|render|build` with --for-host/--root/--npu-smi-output.

The wiring only (no click here: the fast path of `provision resolve` uses it too): load the matrix, read the host
the options name (provisioner/host/buildfacts.py), resolve with its constraints (provisioner/resolve/hostfit.py).
The host's notes are returned, not printed, so a caller that falls back to another path prints them once.
"""

from __future__ import annotations

import os
import sys

from provisioner.errors import ProvisionError


def stack_for(overlays, options: dict, host: dict) -> tuple:
    """(matrix, stack, record) for resolve ``options`` on the host ``host`` names (pop_host's dict).

    A refusal raises ResolveError carrying the host record as ``exc.host``; bad input ProvisionError.
    """
    from provisioner.matrix import loader
    from provisioner.resolve import hostfit

    matrix = loader.load(list(overlays or ()))
    stack, record = hostfit.resolve(matrix, options, _facts(matrix, host))
    return matrix, stack, record


def known_good(overlays, options: dict, host: dict) -> dict | None:
    """The known-good fix of the field report ``options["profile"]`` for the same host (resolve/knowngood.py)."""
    from provisioner.matrix import loader
    from provisioner.resolve import knowngood

    matrix = loader.load(list(overlays or ()))
    return knowngood.fix(matrix, options["profile"], options, _facts(matrix, host))


def _facts(matrix, host: dict) -> dict | None:
    """The facts of the host ``host`` names (None: no host)."""
    from provisioner.resolve import hostfit

    where = hostfit.target(host.get("for_host"), host.get("root"), host.get("npu_smi_outputs") or (), os.environ)
    if where is None:
        return None
    if not os.path.isdir(where["root"]):
        raise ProvisionError(f"--root {where['root']}: not a directory")
    for item in where["npu_smi_outputs"]:
        if not os.path.isfile(item):
            raise ProvisionError(f"--npu-smi-output {item}: no such file")
    from provisioner.host import buildfacts

    return buildfacts.read(where["root"], where["npu_smi_outputs"], chip_rows=matrix.rows("chips"))


def print_notes(record: dict | None, stream=None) -> None:
    """The host's notes, one line each on stderr (no driver found, a driver override, unread chips)."""
    for note in (record or {}).get("notes") or ():
        print(f"provision: {note}", file=stream or sys.stderr)
