"""The breaking-change rules of matrices/upgrade.yaml (upgrade_rules), and the ones the other files' rows imply
(Apex's Python range and confirmed torch lines, DeepSpeed's range, a framework set's torch/Python/CANN), judged on a
stack and its lock.

A rule's `when` and `needs` map keys to values: ``package`` + ``version`` (a lock line), ``python`` / ``torch`` /
``torch_npu`` / ``cann`` (a version spec on that part), ``extra`` (a `--with` extra the stack carries). A rule that
cannot be read (an overlay's typo) is one ProvisionError naming it.
"""

from __future__ import annotations

from provisioner.errors import ProvisionError

KEYS = ("package", "version", "python", "torch", "torch_npu", "cann", "extra")


def part(stack: dict, key: str) -> str | None:
    """The version of a stack part (python, torch, torch_npu, cann), or None where the stack has none."""
    if key == "python":
        return stack.get("python")
    value = stack.get(key)
    return value.get("version") if isinstance(value, dict) else None


def extras_of(stack: dict) -> set[str]:
    out = {name.replace("_", "-") for name in (stack.get("extras") or {})}
    if stack.get("apex"):
        out.add("apex")
    return out


def _check(rule: dict, cond: dict, what: str) -> None:
    from provisioner.versions import Spec, VersionError

    unknown = sorted(set(cond) - set(KEYS))
    if unknown:
        raise ProvisionError(f"{rule.get('_at', 'upgrade_rules')}: rule {rule['id']!r}: {what} has unknown key"
                             f" {unknown[0]!r} (known: {', '.join(KEYS)})")
    if ("version" in cond) != ("package" in cond):
        raise ProvisionError(f"{rule.get('_at', 'upgrade_rules')}: rule {rule['id']!r}: {what} needs package and"
                             " version together")
    for key in ("version", "python", "torch", "torch_npu", "cann"):
        if key in cond:
            try:
                Spec(cond[key])
            except VersionError as exc:
                raise ProvisionError(f"{rule.get('_at', 'upgrade_rules')}: rule {rule['id']!r}: {what}.{key}: {exc}") from None


def holds(cond: dict, stack: dict, lock: dict[str, str]) -> bool:
    """Whether every term of `cond` holds on the stack and its lock (a missing part fails its term)."""
    from provisioner.versions import VersionError, spec

    for key, value in cond.items():
        try:
            if key == "package":
                have = lock.get(value.lower())
                if have is None or ("version" in cond and not spec(cond["version"]).matches(have)):
                    return False
            elif key == "extra":
                if value not in extras_of(stack):
                    return False
            elif key != "version":
                have = part(stack, key)
                if have is None or not spec(value).matches(have):
                    return False
        except VersionError:
            return False
    return True


def judge(matrix, stack: dict, lock: dict[str, str]) -> list[dict]:
    """Every rule that applies to the stack: {id, says, fix, broken, source} (broken: `needs` does not hold)."""
    out = []
    for rule in matrix.rows("upgrade_rules") if "upgrade_rules" in matrix.data else []:
        _check(rule, rule["when"], "when")
        _check(rule, rule.get("needs") or {}, "needs")
        if not holds(rule["when"], stack, lock):
            continue
        needs = rule.get("needs") or {}
        broken = bool(needs) and not holds(needs, stack, lock)
        out.append({"id": rule["id"], "says": rule["says"], "fix": rule.get("fix"), "broken": broken,
                    "needs": dict(needs), "source": [matrix.source_ref(s) for s in rule.get("source") or []]})
    return out + _component_rules(matrix, stack, lock)


def guards(matrix, stack: dict, lock: dict[str, str]) -> dict[str, dict]:
    """{package: rule} for the rules the lock keeps clear of: the stack does not meet the rule's `needs`, and its
    lock holds the rule's package at a version outside `when` (numpy below 2 on CANN 8: numpy2-needs-cann9)."""
    out: dict[str, dict] = {}
    for rule in matrix.rows("upgrade_rules") if "upgrade_rules" in matrix.data else []:
        when, needs = rule["when"], rule.get("needs") or {}
        name = (when.get("package") or "").lower()
        if not needs or not name or name not in lock or holds(when, stack, lock):
            continue
        _check(rule, needs, "needs")
        if not holds(needs, stack, lock):
            out.setdefault(name, {"id": rule["id"], "says": rule["says"],
                                  "source": [matrix.source_ref(s) for s in rule.get("source") or []]})
    return out


def _component_rules(matrix, stack: dict, lock: dict[str, str]) -> list[dict]:
    """What Apex, DeepSpeed and a framework set's own rows say about the stack."""
    from provisioner.versions import PyRange, VersionError, spec

    out = []
    py = stack.get("python")
    apex = (matrix.rows("apex") or [None])[0]
    if apex and "apex" in extras_of(stack):
        refs = [matrix.source_ref(s) for s in apex.get("source") or []]
        try:
            inside = py is not None and py in PyRange(apex["python"])
        except VersionError:
            inside = False
        if not inside:
            out.append({"id": "apex-python", "broken": True, "needs": {"python": apex["python"]}, "source": refs,
                        "says": f"Ascend Apex builds on Python {apex['python']} only ({apex.get('python_note', '')});"
                                f" this stack has Python {py}",
                        "fix": f"--python within {apex['python']}, or drop --with apex"})
        torch = part(stack, "torch")
        if torch and torch not in (apex.get("torch_confirmed") or []):
            out.append({"id": "apex-torch-unconfirmed", "broken": False, "needs": {}, "source": refs,
                        "says": f"Apex with torch {torch} is unconfirmed (confirmed: "
                                f"{', '.join(apex.get('torch_confirmed') or [])})",
                        "fix": "build it and run the selftest before the long run"})
    ds = next((r for r in matrix.rows("extras") if r["name"] == "deepspeed"), None)
    if ds and lock.get("deepspeed"):
        from packaging.requirements import Requirement

        req = Requirement(ds["requirement"])
        if not req.specifier.contains(lock["deepspeed"], prereleases=True):
            out.append({"id": "deepspeed-range", "broken": True, "needs": {"deepspeed": str(req.specifier)},
                        "source": [matrix.source_ref(s) for s in ds.get("source") or []],
                        "says": f"deepspeed {lock['deepspeed']} is outside the range validated on NPU ({req})",
                        "fix": "use the package set's deepspeed lock (provision build --with deepspeed)"})
    ms = (stack.get("extras") or {}).get("mindspeed_llm")
    if isinstance(ms, dict) and ms.get("set"):
        bundle = next((b for b in matrix.rows("llm_bundles") if b["id"] == ms["set"]), None)
        if bundle is None:
            out.append({"id": "framework-set-unknown", "broken": True, "needs": {}, "source": [],
                        "says": f"framework set {ms['set']} is not in this matrix", "fix": "resolve --with mindspeed-llm again"})
        else:
            bad = []
            torch = part(stack, "torch")
            if torch and bundle.get("torch") and not any(spec(t).matches(torch) or torch.startswith(t + ".")
                                                         for t in bundle["torch"]):
                bad.append(f"torch {torch} (released for {', '.join(bundle['torch'])})")
            if py and bundle.get("python"):
                try:
                    if py not in PyRange(str(bundle["python"])):
                        bad.append(f"Python {py} (needs {bundle['python']})")
                except VersionError:
                    pass
            if bad:
                out.append({"id": "framework-set-support", "broken": True, "needs": {}, "source":
                            [matrix.source_ref(s) for s in bundle.get("source") or []],
                            "says": f"framework set {bundle['id']} does not support {', '.join(bad)}",
                            "fix": "resolve --with mindspeed-llm for the new stack: it picks a set that does"})
    return out
