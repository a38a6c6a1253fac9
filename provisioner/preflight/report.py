"""One preflight run: gather the facts, run every check, build the `provision.preflight/1` document and print
it one line per check with its fix.

Exit code as `provision audit`: 2 when a check failed, 1 with warnings (or when nothing at all could be
measured), 0 otherwise. A check that could not be measured is n/a with why; it never counts as a pass.
"""

from __future__ import annotations

import os

from provisioner.preflight import bandwidth, checks, facts, network, stress
from provisioner.text import one_line

SCHEMA = "provision.preflight/1"
ORDER = ("fail", "warn", "n/a", "pass")


def limits(matrix) -> dict:
    """What the checks judge against, from matrices/preflight.yaml (and overlays)."""
    values = {r["id"]: r["value"] for r in matrix.rows("preflight_limits")}
    chip = matrix.rows("preflight_chip_limits")
    return {"hbm_idle_max_pct": values.get("hbm_idle_max_pct"),
            "connect_timeout_default": values.get("hccl_connect_timeout_default_s"),
            "temp_max_c": {r["family"]: r["temp_max_c"] for r in chip if r.get("temp_max_c") is not None},
            "power_max_w": {r["family"]: r["power_max_w"] for r in chip if r.get("power_max_w") is not None},
            "bandwidth": matrix.rows("preflight_bandwidth")}


def connect_timeout(env: dict, default: int | None) -> tuple[int | None, str]:
    """HCCL_CONNECT_TIMEOUT of the job (-e, else this shell) or the documented default; where it came from."""
    for where, source in (("-e", env), ("environment", os.environ)):
        value = source.get("HCCL_CONNECT_TIMEOUT")
        if value is not None:
            if str(value).strip().isdigit():
                return int(value), f"HCCL_CONNECT_TIMEOUT from {where}"
            return default, f"HCCL_CONNECT_TIMEOUT {value!r} is not a number; the default"
    return default, "the default when unset"


def run(matrix, root: str = "/", *, npu_smi_outputs=(), saved=(), peers=(), env: dict | None = None,
        bandwidth_doc: dict | None = None, selftest_doc: dict | None = None, nodes: int = 1, timeout: float = 10.0,
        run_tree_programs: bool = False) -> dict:
    lim = limits(matrix)
    f = facts.gather(root, npu_smi_outputs=list(npu_smi_outputs), saved=list(saved), peers=list(peers),
                     timeout=timeout, chip_rows=matrix.rows("chips"), run_tree_programs=run_tree_programs)
    chip_limits = {"temp_max_c": lim["temp_max_c"], "power_max_w": lim["power_max_w"]}
    results = checks.run(f, {**chip_limits, "hbm_idle_max_pct": lim["hbm_idle_max_pct"]})
    timeout_s, timeout_from = connect_timeout(env or {}, lim["connect_timeout_default"])
    results += network.run(f, list(peers), timeout_s, timeout_from)
    results.append(bandwidth.judge(bandwidth_doc, lim["bandwidth"], bandwidth.topology(f, nodes)))
    results += [stress.judge_matmul(selftest_doc), stress.judge_stress(selftest_doc)]
    summary = {s: sum(r["status"] == s for r in results) for s in ORDER}
    if summary["fail"]:
        code = 2
    elif summary["warn"] or not summary["pass"]:
        code = 1
    else:
        code = 0
    return {
        "schema": SCHEMA,
        "root": f["root"],
        "live": f["live"],
        "tools_run": f["ran_tools"],
        "chips": [{"label": c["label"], "npu": c["npu"], "chip": c["chip"], "device": c["device"],
                   "name": c["name"], "family": c["family"]} for c in f["chips"]],
        "checks": results,
        "summary": summary,
        "notes": f["notes"],
        "exit_code": code,
    }


def render(doc: dict) -> str:
    """The report as text: a header, one line per check (its fix after `-> fix:`), the verdict; every line is
    folded onto one line, whatever the host's files held."""
    width = max(len(r["id"]) for r in doc["checks"])
    lines = [one_line(f"preflight of {'this host' if doc['live'] else doc['root']}: {len(doc['chips'])} chip(s)")]
    for r in doc["checks"]:
        line = f"{r['status'].upper():<4}  {r['id']:<{width}}  {one_line(r['message'])}"
        if r["fix"] and r["status"] != "pass":
            line += f"  -> fix: {one_line(r['fix'])}"
        lines.append(line)
    for note in doc["notes"]:
        lines.append(one_line(f"note: {note}"))
    s = doc["summary"]
    verdict = {0: "ready", 1: "check the warnings (or measure what is n/a)", 2: "not ready"}[doc["exit_code"]]
    lines.append(f"{s['pass']} passed, {s['warn']} warning(s), {s['fail']} failed, {s['n/a']} not measured:"
                 f" {verdict}")
    return "\n".join(lines)
