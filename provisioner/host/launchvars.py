"""Launch variables (HCCL_*, TORCH_HCCL_*, the torch_npu and MindSpeed knobs) checked against the matrix.

Rules are rows of `audit_env` (matrices/audit.yaml): a known name has a kind (whole number in a range,
one of a few values, an IP, interface names, free text) and may be `legacy` (documented for old CANN
only). A range that differs on some chip families (HCCL_EXEC_TIMEOUT: [0, 2147483647] on A2/A3, (0, 17340]
on the first-generation 910) is a `by_family` entry; `Matrix.rule_for_family` gives the rule as it applies to one family,
and every check takes the family when it is known (audit: --card or the host's chips; doctor: the image's
stack or the NPU's name; the device plan: its card). A name under a prefix of `audit_env_prefixes` that no row knows is flagged: HCCL reads its
variables by exact name, so a typo is ignored without a word. `provision audit`, `provision doctor` and
framework job files share this one reading.

Also reads the KEY=VALUE / `export KEY=VALUE` lines of launch scripts and env files (`provision audit
--env-file`).
"""

from __future__ import annotations

import difflib
import ipaddress
import re
import shlex
from dataclasses import dataclass

INVALID, UNKNOWN, LEGACY = "invalid", "unknown", "legacy"
_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


@dataclass(frozen=True)
class Issue:
    name: str
    value: str
    problem: str  # invalid | unknown | legacy
    message: str
    remedy: str

    @property
    def severity(self) -> str:
        """As a job file sees it: a wrong value or an unknown name refuses the job; a legacy name is a note."""
        return "warning" if self.problem == LEGACY else "error"


def rules(matrix) -> dict[str, dict]:
    return {r["name"]: r for r in matrix.rows("audit_env")}


def prefixes(matrix) -> list[str]:
    return [r["prefix"] for r in matrix.rows("audit_env_prefixes")]


def relevant(matrix, env: dict) -> dict:
    """The variables of `env` these rules speak about (known names and flagged prefixes)."""
    known, pre = rules(matrix), prefixes(matrix)
    return {k: v for k, v in env.items() if k in known or any(k.startswith(p) for p in pre)}


def check(matrix, env: dict, family: str | None = None) -> list[Issue]:
    """Every problem with the launch variables in `env` (other variables are ignored), with the bounds of
    chip `family` where a rule has its own for it."""
    known, pre = rules(matrix), prefixes(matrix)
    out: list[Issue] = []
    for name in sorted(env):
        value = str(env[name])
        rule = known.get(name)
        if rule is not None:
            rule = matrix.rule_for_family(rule, family)
        if rule is None:
            prefix = next((p for p in pre if name.startswith(p)), None)
            if prefix is None:
                continue
            close = difflib.get_close_matches(name, [k for k in known if k.startswith(prefix)], n=1, cutoff=0.75)
            hint = f"; did you mean {close[0]}?" if close else ""
            out.append(Issue(name, value, UNKNOWN,
                             f"{name} is not a known {prefix}* variable{hint} (HCCL ignores names it does not know)",
                             f"use {close[0]}" if close else "check the name against the CANN environment-variable reference"))
            continue
        problem = value_problem(rule, value)
        if problem:
            out.append(Issue(name, value, INVALID, f"{name}={value}: {problem}", rule.get("notes") or "fix or unset it"))
        elif rule.get("status") == LEGACY:
            out.append(Issue(name, value, LEGACY, f"{name} is documented only for old CANN releases",
                             rule.get("notes") or "remove it"))
    return out


def value_problem(rule: dict, value: str) -> str | None:
    """Why `value` is wrong for `rule` (None when fine). Interface names are checked for syntax only."""
    kind = rule["kind"]
    value = value.strip()
    if kind == "int":
        if not re.fullmatch(r"-?\d+", value):
            return "not a whole number"
        n = int(value)
        lo, hi = rule.get("min"), rule.get("max")
        where = f" on {rule['applies_to']}" if rule.get("applies_to") else ""
        if lo is not None and hi is not None and not lo <= n <= hi:
            return f"outside [{lo}, {hi}]{where}"
        if lo is not None and n < lo:
            return f"below the minimum {lo}{where}"
        if hi is not None and n > hi:
            return f"above the maximum {hi}{where}"
        return None
    if kind == "choice":
        values = rule.get("values") or []
        return None if value in values else f"expected one of {', '.join(values)}"
    if kind == "ip":
        try:
            ipaddress.ip_address(value)
        except ValueError:
            return "not an IP address"
        return None
    if kind == "ifname":
        body = value.lstrip("^").lstrip("=")
        return None if [n for n in body.split(",") if n] else "no interface named"
    if kind == "ids":
        pieces = value.split(",")
        if not value or not all(p.isdigit() for p in pieces):
            return "give comma-separated container-local ids (0,1,...), no spaces"
        ids = [int(p) for p in pieces]
        return None if all(b > a for a, b in zip(ids, ids[1:], strict=False)) else "ids must be ascending"
    return None if value else "empty"


def parse_env_file(text: str, label: str) -> dict[str, str]:
    """KEY=VALUE and `export KEY=VALUE` lines of a shell script or env file (other lines are skipped;
    values are unquoted as the shell would, without expanding variables)."""
    from provisioner.errors import ProvisionError

    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("#"):
            continue
        m = _ASSIGN.match(line)
        if not m:
            continue
        raw = m[2].split(" #", 1)[0].strip()
        try:
            words = shlex.split(raw) if raw else [""]
        except ValueError as exc:
            raise ProvisionError(f"{label}:{n}: cannot read {m[1]}= ({exc})") from None
        out[m[1]] = words[0] if words else ""
    return out
