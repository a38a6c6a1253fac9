"""Findings: what `provision audit` and `provision doctor` tell the user.

A finding has a severity (error / warning / info), a stable check id, a
one-line message and a one-line fix. The exit code of a run follows from the
worst finding: 2 with any error, 1 with warnings only, 0 otherwise.
Checks run isolated: one that raises becomes a `check-crashed` finding and the
run goes on, so a bug in one check never hides what the others found.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from provisioner.text import one_line

ERROR, WARNING, INFO = "error", "warning", "info"
SEVERITIES = (ERROR, WARNING, INFO)
_RANK = {ERROR: 0, WARNING: 1, INFO: 2}


@dataclass(frozen=True)
class Finding:
    severity: str
    id: str
    message: str
    remedy: str = ""
    check: str = ""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}")

    def to_dict(self) -> dict:
        return asdict(self)


def error(id: str, message: str, remedy: str = "") -> Finding:
    return Finding(ERROR, id, one_line(message), one_line(remedy))


def warning(id: str, message: str, remedy: str = "") -> Finding:
    return Finding(WARNING, id, one_line(message), one_line(remedy))


def info(id: str, message: str, remedy: str = "") -> Finding:
    return Finding(INFO, id, one_line(message), one_line(remedy))


def exit_code(findings: Iterable[Finding]) -> int:
    worst = 0
    for f in findings:
        if f.severity == ERROR:
            return 2
        if f.severity == WARNING:
            worst = 1
    return worst


def ordered(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings, then infos; the check order is kept within each."""
    return sorted(findings, key=lambda f: _RANK[f.severity])


def counts(findings: Iterable[Finding]) -> dict[str, int]:
    out = {"errors": 0, "warnings": 0, "infos": 0}
    for f in findings:
        out[f.severity + "s" if f.severity != INFO else "infos"] += 1
    return out


Check = Callable[..., Iterable[Finding]]


def run_checks(checks: Iterable[tuple[str, Check]], *args, **kwargs) -> list[Finding]:
    """Run each (name, check) with the same arguments; a crash becomes a finding."""
    out: list[Finding] = []
    for name, check in checks:
        try:
            found = list(check(*args, **kwargs) or ())
        except Exception as exc:  # noqa: BLE001 - isolating checks is the point
            where = traceback.extract_tb(exc.__traceback__)[-1]
            out.append(Finding(
                WARNING,
                "check-crashed",
                one_line(f"check {name} failed internally ({type(exc).__name__}: {exc}) at"
                          f" {where.filename.rsplit('/', 1)[-1]}:{where.lineno}; its part of the report is missing"),
                "report this as a bug in provision, with the output of --json",
                name,
            ))
            continue
        for f in found:
            out.append(f if f.check else Finding(f.severity, f.id, f.message, f.remedy, name))
    return out
