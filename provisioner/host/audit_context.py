"""What every audit check reads: the options of a run and the AuditContext over a HostReport and the matrix.

The check modules (audit_driver, audit_chips, audit_system, audit_image, audit_env) take an
AuditContext and yield findings; the facts they share (driver version, chips,
families, the task, the card) are computed here once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.matrix.loader import Matrix
    from provisioner.shapes import HostReport


@dataclass
class AuditOptions:
    card: str | None = None
    task: str | None = None       # train / inference; None = the matrix policy's default
    mode: str | None = None       # how containers will get the NPU: runtime / devices / cdi
    image: str | None = None      # image reference, for messages
    image_stack: dict | None = None
    launch_env: dict | None = None  # launch variables a job will set (--env-file, --job, -e)
    launch_env_source: str = ""     # where they came from, for messages


@dataclass
class AuditContext:
    report: HostReport
    matrix: Matrix
    options: AuditOptions = field(default_factory=AuditOptions)
    recommendation: dict | None = None

    # ---- facts the checks share
    @property
    def driver(self) -> dict | None:
        return self.report.get("driver")

    @property
    def driver_version(self) -> str | None:
        return (self.driver or {}).get("version")

    @property
    def firmware(self) -> dict | None:
        return self.report.get("firmware")

    @property
    def canns(self) -> list[dict]:
        return self.report.get("cann") or []

    @property
    def npu_smi(self) -> dict:
        return self.report.get("npu_smi") or {}

    @property
    def chips(self) -> list[dict]:
        return self.npu_smi.get("chips") or []

    @property
    def devices(self) -> dict:
        return self.report.get("devices") or {"nodes": [], "davinci_ids": []}

    @property
    def arch(self) -> str | None:
        return ((self.report.get("system") or {}).get("arch"))

    @cached_property
    def families(self) -> list[str]:
        return sorted({c["family"] for c in self.chips if c.get("family")})

    @cached_property
    def task(self) -> str:
        if self.options.task:
            return self.options.task
        stack = self.options.image_stack
        if isinstance(stack, dict) and isinstance(stack.get("task"), str) and stack["task"]:
            return stack["task"]
        return self.matrix.policy.get("default_task", "train")

    @cached_property
    def card(self) -> tuple[dict, dict] | None:
        if not self.options.card:
            return None
        card, family, _ = self.matrix.lookup_card(self.options.card)
        return card, family

    @property
    def has_npu_hints(self) -> bool:
        return bool(self.driver or self.chips or self.devices.get("davinci_ids"))

    def limit(self, ident: str) -> int | None:
        row = next((r for r in self.matrix.rows("audit_limits") if r["id"] == ident), None)
        return row["value"] if row else None

    def family_name(self, fam: str) -> str:
        try:
            return self.matrix.family(fam)["name"]
        except StopIteration:
            return fam

    @property
    def host_card(self) -> str | None:
        """--card, or the reference card of the one chip family the host has (None when unknown)."""
        if self.options.card:
            return self.options.card
        if len(self.families) == 1:
            return self.matrix.family(self.families[0])["reference_card"]
        return None

    @property
    def card_flag(self) -> str:
        """' --card X' for the commands a finding suggests ('' when the card is not known)."""
        card = self.host_card
        return f" --card {card}" if card else ""
