"""HostReport (+ an image's Stack) x Matrix -> the provision.audit/1 document.

Each check is a small function of an AuditContext (audit_context.py) that
yields findings; they are grouped by what they look at: the software stack
(audit_driver), the chips (audit_chips), how containers reach the NPU
(audit_system) and an image (audit_image). CHECKS runs them in order through
findings.run_checks, so a check that raises becomes a `check-crashed` finding
and the audit goes on. Facts (which HDK a CANN needs, chip families,
thresholds) come from the matrix. The text rendering is in audit_report.py.
"""

from __future__ import annotations

from provisioner.host.audit_chips import (
    check_card,
    check_chip_busy,
    check_chip_family,
    check_chip_health,
    check_npu_smi,
    check_training,
)
from provisioner.host.audit_context import AuditContext, AuditOptions
from provisioner.host.audit_driver import (
    check_cann_arch,
    check_driver_cann,
    check_driver_images,
    check_firmware,
    check_probe,
    check_stack_presence,
)
from provisioner.host.audit_image import check_image
from provisioner.host.audit_system import (
    check_account,
    check_devices,
    check_docker,
    check_runtime_paths,
    check_shm,
)
from provisioner.host.findings import counts, exit_code, ordered, run_checks

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.matrix.loader import Matrix
    from provisioner.shapes import HostReport

SCHEMA = "provision.audit/1"
MODES = ("runtime", "devices", "cdi")

CHECKS = [
    ("probe", check_probe),
    ("stack-presence", check_stack_presence),
    ("driver-cann", check_driver_cann),
    ("driver-images", check_driver_images),
    ("firmware", check_firmware),
    ("cann-arch", check_cann_arch),
    ("npu-smi", check_npu_smi),
    ("chip-health", check_chip_health),
    ("chip-busy", check_chip_busy),
    ("chip-family", check_chip_family),
    ("training", check_training),
    ("card", check_card),
    ("devices", check_devices),
    ("account", check_account),
    ("docker", check_docker),
    ("runtime-paths", check_runtime_paths),
    ("shm", check_shm),
    ("image", check_image),
]


def audit(report: HostReport, matrix: Matrix, options: AuditOptions | None = None, checks=None) -> dict:
    """Run the checks on a HostReport; returns the provision.audit/1 document."""
    ctx = AuditContext(report, matrix, options or AuditOptions())
    if ctx.options.card:
        _ = ctx.card  # an unknown --card is bad input (exit 2), not a crashed check
    found = ordered(run_checks(checks if checks is not None else CHECKS, ctx))
    return {
        "schema": SCHEMA,
        "host": report,
        "options": {"card": ctx.options.card, "task": ctx.task, "mode": ctx.options.mode, "image": ctx.options.image},
        "image": ({"ref": ctx.options.image, "stack_id": (ctx.options.image_stack or {}).get("id"),
                   "recommended": ctx.recommendation} if ctx.options.image_stack is not None else None),
        "findings": [f.to_dict() for f in found],
        "summary": counts(found),
        "exit_code": exit_code(found),
    }


def chip_rows(matrix) -> list[dict]:
    """The matrix rows the probe classifies npu-smi chip names with."""
    return matrix.rows("chips")


def runtime_mounts(matrix) -> list[str]:
    """The paths Ascend Docker Runtime mounts (checked when the host has no base.list)."""
    return [r["path"] for r in matrix.rows("audit_runtime_mounts")]
