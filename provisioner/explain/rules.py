"""The error table (matrices/errors.yaml `errors`) as a line classifier.

A row's `match` fragments are plain text: the first row, in file order, with a fragment contained in the line
classifies it. Two rows have no fragments and are assigned here when no other row matched: `python-exception`
(a line that ends a Python traceback: `SomeError: ...` or `pkg.mod.SomeError`) and `cann-error-code` (any other
CANN code: E, a module letter, four digits). An overlay that removes them only loses that fallback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

PYTHON_EXCEPTION = "python-exception"
CANN_CODE = "cann-error-code"
_PY_EXC = re.compile(r"^(?:[A-Za-z_][\w]*\.){0,8}[A-Z]\w{0,80}(?:Error|Exception)(?::|$)")
_CANN = re.compile(r"(?<![A-Za-z0-9])(E[A-Z]\d{4})(?![0-9])")


@dataclass(frozen=True)
class Rule:
    id: str
    role: str  # cause | consequence | symptom | warning
    kind: str
    says: str
    fix: str | None
    code: str | None
    match: tuple[str, ...]
    example: str | None
    source: tuple[str, ...]


class Rules:
    def __init__(self, rules: list[Rule]):
        self.rules = rules
        self.by_id = {r.id: r for r in rules}
        self._matching = [r for r in rules if r.match]
        # one search over every fragment finds the few lines worth the row-by-row test (file order decides)
        frags = sorted({f for r in self._matching for f in r.match}, key=len, reverse=True)
        self._any = re.compile("|".join(map(re.escape, frags))) if frags else None

    @classmethod
    def from_matrix(cls, matrix) -> Rules:
        return cls([Rule(r["id"], r["role"], r["kind"], " ".join(r["says"].split()),
                         " ".join(r["fix"].split()) if r.get("fix") else None, r.get("code"),
                         tuple(r.get("match") or ()), r.get("example"),
                         tuple(matrix.source_ref(s) for s in r["source"]))
                    for r in matrix.rows("errors")])

    def classify(self, text: str) -> tuple[Rule, str | None] | None:
        """The rule for a line (after its prefixes) and the CANN code it carries, or None."""
        code_m = _CANN.search(text)
        code = code_m.group(1) if code_m else None
        if self._any is not None and self._any.search(text):
            for rule in self._matching:
                for frag in rule.match:
                    if frag in text:
                        return rule, code or rule.code
        if code and (r := self.by_id.get(CANN_CODE)):
            return r, code
        if _PY_EXC.match(text) and (r := self.by_id.get(PYTHON_EXCEPTION)):
            return r, None
        return None
