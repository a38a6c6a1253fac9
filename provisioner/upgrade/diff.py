"""Two stacks side by side (`provision diff A B`): every part that changes, every package of the lock that
changes, the driver each side needs (the one driver-fit module answers: provisioner/resolve/driverfit.py), and
what the change breaks or needs from the matrix's rules (provisioner/upgrade/rules.py).

The document is plain JSON (schema provision.diff/1, docs/json.md); `render` prints it for people.
"""

from __future__ import annotations

SCHEMA = "provision.diff/1"
PARTS = ("card", "arch", "os", "python", "base_image", "cann", "torch", "torch_npu", "mindspore", "apex", "dtype")


def _value(stack: dict, key: str) -> str | None:
    item = stack.get(key)
    if key == "card":
        return (item or {}).get("id")
    if key == "base_image":
        return (item or {}).get("ref") or None
    if key == "apex":
        return f"{item.get('ref')} (setuptools {item.get('setuptools')})" if isinstance(item, dict) else None
    if key == "dtype":
        return (item or {}).get("compute")
    if isinstance(item, dict):
        return item.get("version")
    return item if isinstance(item, str) else None


def _order(a: str | None, b: str | None) -> str:
    from provisioner.versions import VersionError, parse

    if a == b:
        return "same"
    if a is None:
        return "added"
    if b is None:
        return "removed"
    try:
        return "upgraded" if parse(b) > parse(a) else "downgraded"
    except VersionError:
        return "changed"


def driver_side(matrix, stack: dict) -> dict:
    """{needs (in words), row, matrix to judge with} for a stack: its label's HDK list first, else this matrix's."""
    from provisioner.resolve import driverfit

    notes: list[str] = []
    row, judge_with = driverfit.stack_row(matrix, stack, notes)
    if row is None:
        return {"needs": "unknown (the matrix has no row for its CANN)", "row": None, "matrix": judge_with,
                "notes": notes}
    return {"needs": driverfit.needs(judge_with, row)[0], "row": row, "matrix": judge_with, "notes": notes}


def candidates(matrix, rows: list[dict]) -> list[str]:
    """HDK versions worth naming: the exact ones the rows list and the ones matrices/hdk.yaml has."""
    from provisioner.resolve import driverfit
    from provisioner.versions import V, sort_versions

    seen: dict = {}
    for row in rows:
        for v in driverfit._exact_listed(row):
            seen.setdefault(str(v).lower(), str(v))
    for row in matrix.rows("hdk"):
        seen.setdefault(row["version"].lower(), row["version"])
    return sort_versions([v for v in seen.values() if V(v)])


def fits(driver: str, side: dict) -> bool:
    from provisioner.resolve import driverfit

    return side["row"] is not None and driverfit.driver_fit(driver, side["row"], side["matrix"]) == "ok"


def diff(matrix, a: dict, b: dict, a_from: str = "", b_from: str = "", driver: str | None = None) -> dict:
    """The provision.diff/1 document of stacks `a` -> `b` (with `driver`: how a host driver fits each)."""
    from provisioner.resolve import driverfit
    from provisioner.resolve.stack import summary
    from provisioner.upgrade import rules, stacks

    parts = []
    for key in PARTS:
        va, vb = _value(a, key), _value(b, key)
        if va is None and vb is None:
            continue
        parts.append({"part": key, "a": va, "b": vb, "change": _order(va, vb) if key in (
            "python", "cann", "torch", "torch_npu", "mindspore") else ("same" if va == vb else "changed")})
    ea, eb = sorted(rules.extras_of(a) - {"apex"}), sorted(rules.extras_of(b) - {"apex"})
    for name in sorted(set(ea) | set(eb)):
        xa = (a.get("extras") or {}).get(name.replace("-", "_")) or {}
        xb = (b.get("extras") or {}).get(name.replace("-", "_")) or {}
        va = (xa.get("set") or xa.get("requirement") or "yes") if name in ea else None
        vb = (xb.get("set") or xb.get("requirement") or "yes") if name in eb else None
        parts.append({"part": f"with {name}", "a": va, "b": vb, "change": "same" if va == vb else "changed"})

    da, db = driver_side(matrix, a), driver_side(matrix, b)
    both = [v for v in candidates(matrix, [r for r in (da["row"], db["row"]) if r]) if fits(v, da) and fits(v, db)]
    only_b = [v for v in candidates(matrix, [db["row"]] if db["row"] else []) if fits(v, db)]
    drv: dict = {"a": da["needs"], "b": db["needs"], "both": both, "b_only": [v for v in only_b if v not in both],
                 "notes": da["notes"] + db["notes"], "host": None}
    if driver:
        def verdict(side):
            if side["row"] is None:
                return {"verdict": "unknown", "detail": "no HDK list for its CANN"}
            v, detail = driverfit.driver_verdict(driver, side["row"], side["matrix"])
            return {"verdict": v, "detail": detail}

        drv["host"] = {"version": driver, "a": verdict(da), "b": verdict(db)}

    la, oa, wa = stacks.lock_of(matrix, a)
    lb, ob, wb = stacks.lock_of(matrix, b)
    packages = []
    for name in sorted(set(la) | set(lb)):
        if la.get(name) != lb.get(name):
            packages.append({"name": name, "a": la.get(name), "b": lb.get(name), "change": _order(la.get(name), lb.get(name))})

    ra = {r["id"]: r for r in rules.judge(matrix, a, la)}
    rb = {r["id"]: r for r in rules.judge(matrix, b, lb)}
    found = []
    for rid in sorted(set(ra) | set(rb), key=lambda r: (r not in rb or not rb[r]["broken"], r)):
        r = rb.get(rid) or ra[rid]
        if rid in rb and rb[rid]["broken"]:
            status = "breaks"
        elif rid in rb and rid not in ra:
            status = "new"
        elif rid in ra and rid not in rb:
            status = "gone"
        else:
            continue  # holds on both sides: not a change
        found.append({"id": rid, "status": status, "says": r["says"], "fix": r.get("fix"), "source": r["source"]})

    cann_a, cann_b = _value(a, "cann"), _value(b, "cann")
    needs = []
    if cann_a != cann_b:
        needs.append(f"CANN {cann_a} -> {cann_b}: the host driver must be {db['needs']}"
                     + (f"; one driver runs both: {', '.join(both)}" if both else
                        f"; no driver the matrix knows runs both: upgrade the HDK with the move ({', '.join(only_b) or 'none listed'})"))
    ta, tb = _value(a, "torch"), _value(b, "torch")
    if ta != tb and (ta or tb):
        tna, tnb = _value(a, "torch_npu"), _value(b, "torch_npu")
        paired = ((b.get("torch_npu") or {}).get("released_with_cann"))
        needs.append(f"torch {ta} -> {tb}: torch_npu {tna} -> {tnb}" + (f" (released with CANN {paired})" if paired else ""))
    kept = rules.guards(matrix, b, lb)
    for p in packages:
        if p["name"] in ("numpy", "transformers", "deepspeed", "trl", "setuptools", "accelerate", "peft"):
            said = [f["says"] for f in found if f["id"].startswith(p["name"])]
            line = f"{p['name']} {p['a']} -> {p['b']}" + (f": {said[0]}" if said else "")
            if p["name"] in kept and p["b"]:
                g = kept[p["name"]]
                line += f"; kept clear of rule {g['id']} on B ({g['says']})"
            needs.append(line)
    return {
        "schema": SCHEMA, "status": "ok",
        "a": {"from": a_from, "id": a.get("id"), "summary": _summary(summary, a), "lock": oa, "lock_note": wa},
        "b": {"from": b_from, "id": b.get("id"), "summary": _summary(summary, b), "lock": ob, "lock_note": wb},
        "parts": parts, "driver": drv, "packages": packages, "rules": found, "changes": needs,
        "breaks": sum(1 for f in found if f["status"] == "breaks"),
    }


def _summary(summary, stack: dict) -> str:
    try:
        return summary(stack)
    except (KeyError, TypeError, AttributeError):
        return f"CANN {_value(stack, 'cann')}"


def render(doc: dict) -> str:
    """The diff for people: parts, driver, packages, rules."""
    from provisioner.text import table

    out = [f"A: {doc['a']['summary']} [{doc['a']['from']}]", f"B: {doc['b']['summary']} [{doc['b']['from']}]", ""]
    rows = [[p["part"], p["a"] or "-", p["b"] or "-", p["change"]] for p in doc["parts"] if p["change"] != "same"]
    if rows:
        out.append(table(rows, ["part", "A", "B", "change"]))
    same = [p["part"] for p in doc["parts"] if p["change"] == "same"]
    if same:
        out.append(f"unchanged: {', '.join(same)}")
    d = doc["driver"]
    out += ["", "driver:", f"  A needs {d['a']}", f"  B needs {d['b']}"]
    out.append(f"  runs both: {', '.join(d['both'])}" if d["both"] else
               f"  no driver the matrix knows runs both; B alone: {', '.join(d['b_only']) or 'none listed'}")
    if d["host"]:
        h = d["host"]
        for side in ("a", "b"):
            v = h[side]
            out.append(f"  host driver {h['version']} on {side.upper()}: {v['verdict']}" + (f" ({v['detail']})" if v["detail"] else ""))
    out += [f"  note: {n}" for n in d["notes"]]
    if doc["packages"]:
        out += ["", f"packages ({doc['a']['lock'] or 'no lock'} -> {doc['b']['lock'] or 'no lock'}):"]
        out.append(table([[p["name"], p["a"] or "-", p["b"] or "-", p["change"]]
                           for p in doc["packages"]], ["package", "A", "B", "change"]))
    for side in ("a", "b"):
        if doc[side]["lock_note"]:
            out.append(f"  {side.upper()} has no package lock here: {doc[side]['lock_note']}")
    if doc["changes"]:
        out += ["", "what changes:"] + [f"  - {c}" for c in doc["changes"]]
    if doc["rules"]:
        out += ["", "rules:"]
        for r in doc["rules"]:
            out.append(f"  [{r['status']}] {r['id']}: {r['says']}")
            if r.get("fix") and r["status"] != "gone":
                out.append(f"      fix: {r['fix']}")
    return "\n".join(out)
