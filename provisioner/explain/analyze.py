"""From classified lines to an explanation: the events in time across ranks, the first failing rank and chip, the
cause and fix, the ranks that only waited for it; the `provision.explain/1` document and its text.

Order: lines with a time are ordered by it; a line without one takes the time of the line before it in its file
of the same rank (or after it, above that rank's first time); a file without any time keeps its own order, after the timed files. Ties
keep file order. The first failure is the earliest `cause` event; without one the earliest `symptom` that names a
rank (status unexplained: something failed, no row says why); with only `consequence` events, the ranks they
waited for (a peer the line names, or a rank seen in the logs that did not time out) are the suspects. A rank is
what the line's prefix, torch_npu's RankID, a c10d `[Rank N]` or its file says; a plog line's comes from its PID.
"""

from __future__ import annotations

import datetime

from provisioner.explain.readlogs import Line, Source, clean
from provisioner.explain.rules import Rule, Rules

SCHEMA = "provision.explain/1"
MAX_EVENTS = 200  # events kept in the document (events_total says how many there were)


def _attribute(sources: list[Source]) -> set[int]:
    """Fill each line's rank, PID and device from what other lines say about its PID, its file and its rank."""
    pid_rank: dict[int, int] = {}
    pid_device: dict[int, int] = {}
    rank_device: dict[int, int] = {}
    rank_pid: dict[int, int] = {}
    seen: set[int] = set()
    for s in sources:
        for ln in s.lines:
            if ln.rank is None and s.rank is not None:
                ln.rank = s.rank
            if ln.pid is None and s.pid is not None:
                ln.pid = s.pid
            if ln.device is None and s.device is not None:
                ln.device = s.device
            if ln.pid is not None and ln.rank is not None:
                pid_rank.setdefault(ln.pid, ln.rank)
                rank_pid.setdefault(ln.rank, ln.pid)
            if ln.pid is not None and ln.device is not None:
                pid_device.setdefault(ln.pid, ln.device)
            if ln.rank is not None and ln.device is not None:
                rank_device.setdefault(ln.rank, ln.device)
            if ln.rank is not None:
                seen.add(ln.rank)
    for s in sources:
        for ln in s.lines:
            if ln.rank is None and ln.pid is not None:
                ln.rank = pid_rank.get(ln.pid)
            elif ln.pid is None and ln.rank is not None:
                ln.pid = rank_pid.get(ln.rank)
            if ln.device is None:
                ln.device = pid_device.get(ln.pid) if ln.pid is not None else None
                if ln.device is None and ln.rank is not None:
                    ln.device = rank_device.get(ln.rank)
    return seen


def _carry_times(src: Source) -> None:
    """A line without a time takes the time of the line before it of the same rank in its file (the first time
    of that rank, above its first timed line): an interleaved stream's other ranks do not lend theirs."""
    by_rank: dict[int | None, list[Line]] = {}
    for ln in src.lines:
        by_rank.setdefault(ln.rank, []).append(ln)
    for lines in by_rank.values():
        last = next((ln.time for ln in lines if ln.time is not None), None)
        for ln in lines:
            if ln.time is None:
                ln.time = last
            else:
                last = ln.time


def _events(sources: list[Source], rules: Rules) -> list[dict]:
    events = []
    for order, s in enumerate(sources):
        _carry_times(s)
        for ln in s.lines:
            if s.kind == "plog" and ln.level not in (None, "ERROR"):
                continue
            hit = rules.classify(ln.text)
            if hit is None:
                continue
            rule, code = hit
            events.append(_event(ln, s, order, rule, code))
    events.sort(key=lambda e: (e["_t"] is None, e["_t"] or 0.0, e["_order"], e["_line"]))
    return events


def _event(ln: Line, s: Source, order: int, rule: Rule, code: str | None) -> dict:
    return {"time": _fmt(ln.time), "rank": ln.rank, "device": ln.device, "chip": ln.chip, "pid": ln.pid,
            "peer": ln.peer, "role": rule.role, "id": rule.id, "kind": rule.kind, "code": code,
            "source": s.path, "line": ln.lineno, "text": clean(ln.text),
            "_t": ln.time, "_order": order, "_line": ln.lineno, "_rule": rule}


def _fmt(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.datetime.fromtimestamp(t).isoformat(sep=" ", timespec="microseconds")


def _per_rank(events: list[dict], role: str, skip: int | None) -> list[dict]:
    """One entry per rank (its first event of `role`), in time order, leaving out rank `skip`."""
    out: dict[int, dict] = {}
    for e in events:
        if e["role"] == role and e["rank"] is not None and e["rank"] != skip and e["rank"] not in out:
            out[e["rank"]] = {"rank": e["rank"], "id": e["id"], "says": e["_rule"].says, "time": e["time"],
                              "device": e["device"]}
    return list(out.values())


def explain(sources: list[Source], rules: Rules) -> dict:
    """The `provision.explain/1` document for these logs."""
    seen = _attribute(sources)
    events = _events(sources, rules)
    causes = [e for e in events if e["role"] == "cause"]
    symptoms = [e for e in events if e["role"] == "symptom"]
    waits = [e for e in events if e["role"] == "consequence"]
    first: dict | None = None
    status = "clean"
    if causes:
        status, first = "explained", _first_with_rank(causes)
    elif symptoms or waits:
        status = "unexplained"
        named = [e for e in symptoms if e["rank"] is not None]
        first = named[0] if named else None
    rank = first["rank"] if first else None
    waited_for = sorted({e["peer"] for e in waits if e["peer"] is not None} - {e["rank"] for e in waits})
    timed_out = {e["rank"] for e in waits if e["rank"] is not None}
    suspects: list[int] = []
    if first is None and waits:
        suspects = waited_for or sorted(seen - timed_out)
        if len(suspects) == 1:
            rank = suspects[0]
    rule: Rule | None = first["_rule"] if first else None
    if first is None and waits:
        rule = waits[0]["_rule"]
    device = first["device"] if first else None
    chip = first["chip"] if first else None
    if first is not None and chip is None:  # the rank's own chip line (EZ9999 ... device(chipId:N)) near it
        chip = next((e["chip"] for e in events if e["rank"] == rank and e["chip"] is not None
                     and (e["pid"] == first["pid"] or first["pid"] is None)), None)
    warnings: dict[str, dict] = {}
    for e in events:
        if e["role"] == "warning":
            w = warnings.setdefault(e["id"], {"id": e["id"], "says": e["_rule"].says, "fix": e["_rule"].fix,
                                              "count": 0, "ranks": []})
            w["count"] += 1
            if e["rank"] is not None and e["rank"] not in w["ranks"]:
                w["ranks"].append(e["rank"])
    return {
        "schema": SCHEMA,
        "status": status,
        "first_failing_rank": rank,
        "suspected": first is None and rank is not None,
        "device": device,
        "chip": chip,
        "pid": first["pid"] if first else None,
        "time": first["time"] if first else None,
        "cause": rule.says if rule else None,
        "cause_id": rule.id if rule else None,
        "kind": rule.kind if rule else None,
        "code": first["code"] if first else (rule.code if rule else None),
        "fix": rule.fix if rule else None,
        "cause_sources": list(rule.source) if rule else [],
        "line": {"source": first["source"], "line": first["line"], "text": first["text"]} if first else None,
        "consequences": _per_rank(events, "consequence", rank),
        "also_failed": _per_rank(events, "cause", rank),
        "suspects": suspects,
        "warnings": list(warnings.values()),
        "ranks_seen": sorted(seen),
        "sources": [{"path": s.path, "kind": s.kind, "lines": len(s.lines), "rank": s.rank, "pid": s.pid,
                     "device": s.device, "truncated": s.truncated} for s in sources],
        "events_total": len(events),
        "events": [{k: v for k, v in e.items() if not k.startswith("_")} for e in events[:MAX_EVENTS]],
    }


def _first_with_rank(causes: list[dict]) -> dict:
    """The earliest cause; one without a rank (a plog whose PID no stream line names) yields to a ranked cause of
    the same second."""
    first = causes[0]
    if first["rank"] is None:
        for e in causes[1:]:
            if e["rank"] is not None and (first["_t"] is None or e["_t"] is None or e["_t"] - first["_t"] < 1.0):
                return e
    return first


def exit_code(doc: dict) -> int:
    """0: explained, or no failure in the logs (status clean); 1: a failure no row explains; (2: bad input)."""
    return 1 if doc["status"] == "unexplained" else 0


def _where(rank, device, chip, pid) -> str:
    bits = [f"device {device}" if device is not None else None, f"chip {chip}" if chip is not None else None,
            f"pid {pid}" if pid is not None else None]
    shown = ", ".join(b for b in bits if b)
    return f"rank {rank if rank is not None else '?'}" + (f" ({shown})" if shown else "")


def render(doc: dict, events: int = 12) -> list[str]:
    """The explanation for a person."""
    out = []
    n = doc["events_total"]
    if doc["status"] == "clean":
        out.append(f"no failure found in {len(doc['sources'])} log(s)"
                   + (f" ({n} warning line(s))" if n else "") + ": nothing the error table knows failed")
    elif doc["status"] == "explained":
        out.append(f"first failure: {_where(doc['first_failing_rank'], doc['device'], doc['chip'], doc['pid'])}"
                   + (f" at {doc['time']}" if doc["time"] else ""))
        out.append(f"cause: {doc['cause']} [{doc['cause_id']}" + (f", {doc['code']}" if doc["code"] else "") + "]")
    else:
        if doc["first_failing_rank"] is not None and not doc["suspected"]:
            out.append(f"first error: {_where(doc['first_failing_rank'], doc['device'], doc['chip'], doc['pid'])}"
                       + (f" at {doc['time']}" if doc["time"] else "") + " (no row of the error table says why)")
        elif doc["suspects"]:
            out.append("no rank printed a cause; the ranks that timed out waited for rank(s) "
                       + ", ".join(map(str, doc["suspects"])) + ": read their own logs and plogs")
        else:
            out.append("a failure, but no rank printed its cause (only time-outs or generic errors)")
        if doc["cause"]:
            out.append(f"what the lines say: {doc['cause']} [{doc['cause_id']}]")
    if doc["line"]:
        ln = doc["line"]
        out.append(f"  {ln['source']}:{ln['line']}: {ln['text']}")
    if doc["fix"]:
        out.append(f"fix: {doc['fix']}")
    if doc["cause_sources"] and doc["status"] == "explained":
        out.append("from: " + ", ".join(doc["cause_sources"][:3]))
    if doc["consequences"]:
        ranks = ", ".join(str(c["rank"]) for c in doc["consequences"])
        kinds = ", ".join(dict.fromkeys(c["id"] for c in doc["consequences"]))
        who = f"rank {doc['first_failing_rank']}" if doc["first_failing_rank"] is not None else "the failing rank"
        out.append(f"consequences: rank(s) {ranks} then timed out waiting for {who} ({kinds})")
    if doc["also_failed"]:
        out.append("also failed later: " + "; ".join(f"rank {c['rank']} ({c['id']})" for c in doc["also_failed"]))
    for w in doc["warnings"]:
        out.append(f"warning: {w['says']} [{w['id']}, {w['count']} line(s)]")
    if n and doc["status"] != "clean":
        shown = doc["events"][:events]
        out.append(f"events in time order ({len(shown)} of {n}):")
        for e in shown:
            when = (e["time"] or "")[11:23] or "--"
            out.append(f"  {when:12} rank {e['rank'] if e['rank'] is not None else '?':>3} {e['role']:<11} "
                       f"{e['id']}: {e['text'][:140]}")
    return out
