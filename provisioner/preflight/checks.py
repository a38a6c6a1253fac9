"""The chip checks of preflight: health, ECC counters, temperature and power against the chip's limits, HBM
already in use, processes holding chips.

Each check is one result: {id, status (pass | warn | fail | n/a), message, fix, chips: the labels it names}.
A chip whose value was not read is never counted as passing: with none read the check is n/a (with why),
with some read and some not it warns and names the unread ones.
"""

from __future__ import annotations


def result(check: str, status: str, message: str, fix: str = "", chips: list[str] | None = None) -> dict:
    return {"id": check, "status": status, "message": message, "fix": fix if status != "pass" else "",
            "chips": chips or []}


def _labels(chips: list[dict]) -> str:
    return ", ".join(c["label"] for c in chips)


def _unread(check: str, chips: list[dict], unread: list[dict], what: str, why: str, fix: str) -> dict | None:
    """n/a when nothing was read, a warning naming the unread chips when only some were, else None."""
    if len(unread) == len(chips):
        return result(check, "n/a", f"{what} not read: {why}", fix)
    if unread:
        return result(check, "warn", f"{what} not read for {_labels(unread)} (the other chips: fine)", fix,
                      [c["label"] for c in unread])
    return None


def _why(facts: dict, kind: str) -> str:
    if not facts["ran_tools"]:
        return (f"another host's tree; no saved `npu-smi info -t {kind}` output for it (pass a collection file"
                " with --saved FILE)")
    if not facts["npu_smi"]:
        return "npu-smi not found"
    return f"`npu-smi info -t {kind} -i N -c C` printed nothing readable"


SAVE = "on the host: `npu-smi info -t {kind} -i N -c C` for each chip, saved with --saved FILE"


def check_health(facts: dict) -> dict:
    chips = facts["chips"]
    bad: list[dict] = []
    warn: list[dict] = []
    for c in chips:
        h = c.get("health") or {}
        status = (h.get("status") or c.get("table_health") or "").strip()
        c["health_status"] = status or None
        if status.upper() == "OK":
            continue
        (warn if status.upper() == "WARNING" else bad).append(c)
    detail = "; ".join(f"{c['label']}: {c['health_status'] or 'unknown'}"
                       + (f" (error code {c['health']['error_code']})" if (c.get("health") or {}).get("error_code")
                          else "") for c in bad + warn)
    fix = ("exclude these chips from jobs (ASCEND_RT_VISIBLE_DEVICES / --devices); read `npu-smi info -t health -i N"
           " -c C` and the device log (msnpureport), and have the card serviced if it stays unhealthy")
    if bad:
        return result("chip-health", "fail", f"unhealthy: {detail}", fix, [c["label"] for c in bad + warn])
    if warn:
        return result("chip-health", "warn", f"health Warning: {detail}", fix, [c["label"] for c in warn])
    return result("chip-health", "pass", f"{len(chips)} chip(s) OK")


def check_ecc(facts: dict) -> dict:
    chips = facts["chips"]
    unread = [c for c in chips if not c.get("ecc")]
    double, single = [], []
    for c in chips:
        e = c.get("ecc") or {}
        d = {k: v for k, v in e.items() if "double" in k and v}
        s = {k: v for k, v in e.items() if "single" in k and v}
        if d:
            double.append((c, d))
        elif s:
            single.append((c, s))
    def say(items):
        return "; ".join(f"{c['label']}: " + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in sorted(d.items()))
                         for c, d in items)
    if double:
        return result("chip-ecc", "fail", f"uncorrectable (double-bit) memory errors: {say(double)}",
                      "take the chip out of jobs now (its memory returns wrong data); send the `npu-smi info -t ecc"
                      " -i N` output and the device log to the hardware vendor", [c["label"] for c, _ in double])
    if single:
        return result("chip-ecc", "warn", f"corrected (single-bit) memory errors: {say(single)}",
                      "watch the count: a growing count or isolated pages precede uncorrectable errors; keep"
                      " `npu-smi info -t ecc -i N` output with each run", [c["label"] for c, _ in single])
    gap = _unread("chip-ecc", chips, unread, "ECC counters", _why(facts, "ecc"), SAVE.format(kind="ecc"))
    return gap or result("chip-ecc", "pass", f"no ECC errors on {len(chips)} chip(s) (HBM/DDR single and double bit)")


def _limit_check(facts: dict, limits: dict, check: str, kind: str, field: str, unit: str, name: str) -> dict:
    chips = facts["chips"]
    values = {c["label"]: (c.get(kind) if c.get(kind) is not None else c.get(field)) for c in chips}
    unread = [c for c in chips if values[c["label"]] is None]
    gap = _unread(check, chips, unread, name, _why(facts, kind), SAVE.format(kind=kind))
    if gap and gap["status"] == "n/a":
        return gap
    read = [c for c in chips if values[c["label"]] is not None]
    span = f"{min(values[c['label']] for c in read):g}-{max(values[c['label']] for c in read):g} {unit}"
    over, no_limit = [], []
    for c in read:
        limit = limits.get(c.get("family"))
        if limit is None:
            no_limit.append(c)
        elif values[c["label"]] >= limit:
            over.append((c, limit))
    if over:
        detail = "; ".join(f"{c['label']}: {values[c['label']]:g} {unit} (limit {lim:g})" for c, lim in over)
        return result(check, "fail", f"{name} at or over the chip's limit: {detail}",
                      "check the server's cooling and power (fans, inlet air, PSU) before training; a hot chip"
                      " throttles and then faults", [c["label"] for c, _ in over])
    if no_limit:
        families = sorted({str(c.get("family") or c["name"]) for c in no_limit})
        return result(check, "n/a", f"{name} {span}; no sourced limit for {', '.join(families)} in matrices/"
                      "preflight.yaml (preflight_chip_limits), so it is not judged",
                      "add the chip's limit from its datasheet to a matrix overlay (preflight_chip_limits, with"
                      " source:)")
    return gap or result(check, "pass", f"{name} {span}, under the limit")


def check_temperature(facts: dict, limits: dict) -> dict:
    return _limit_check(facts, limits, "chip-temperature", "temp", "table_temp_c", "C", "temperature")


def check_power(facts: dict, limits: dict) -> dict:
    return _limit_check(facts, limits, "chip-power", "power", "table_power_w", "W", "power")


def _hbm_pct(c: dict) -> float | None:
    u = c.get("usages") or {}
    if u.get("hbm_pct") is not None:
        return u["hbm_pct"]
    if c.get("hbm_used_mb") is not None and c.get("hbm_total_mb"):
        return 100.0 * c["hbm_used_mb"] / c["hbm_total_mb"]
    return None


def check_hbm(facts: dict, idle_max_pct: int | None) -> dict:
    chips = facts["chips"]
    if idle_max_pct is None:
        return result("chip-hbm-in-use", "n/a", "no hbm_idle_max_pct row in matrices/preflight.yaml to judge HBM use"
                      " against", "restore the preflight_limits row hbm_idle_max_pct")
    read = {c["label"]: v for c in chips if (v := _hbm_pct(c)) is not None}
    unread = [c for c in chips if c["label"] not in read]
    used = [c for c in chips if c["label"] in read and read[c["label"]] > idle_max_pct]
    if used:
        detail = "; ".join(f"{c['label']}: {read[c['label']]:.0f}%" for c in used)
        return result("chip-hbm-in-use", "warn", f"HBM already in use beyond an idle chip's {idle_max_pct}%: {detail}",
                      "another job (maybe in another container, which npu-smi may not list) holds this memory: stop"
                      " it or pick other chips, or the job runs out of memory", [c["label"] for c in used])
    gap = _unread("chip-hbm-in-use", chips, unread, "HBM use", _why(facts, "usages"), SAVE.format(kind="usages"))
    if gap:
        return gap
    top = max(read.values()) if read else 0.0
    return result("chip-hbm-in-use", "pass", f"HBM free: at most {top:.0f}% in use (an idle chip: up to"
                  f" {idle_max_pct}%)")


def check_processes(facts: dict) -> dict:
    chips = facts["chips"]
    busy = [c for c in chips if c["processes"]]
    if busy:
        detail = "; ".join(f"{c['label']}: " + ", ".join(f"pid {p['pid']} {p['name']}" for p in c["processes"])
                           for c in busy)
        return result("chip-processes", "fail", f"chip(s) held by a process: {detail}",
                      "a chip serves one process at a time (the job fails with -8005 / device busy): stop those"
                      " processes (`npu-smi info` shows them) or give the job other chips", [c["label"] for c in busy])
    return result("chip-processes", "pass", f"no process holds any of the {len(chips)} chip(s)")


def run(facts: dict, limits: dict) -> list[dict]:
    """The chip checks, in order; all n/a (with why) when no chip table was read."""
    names = ["chip-health", "chip-ecc", "chip-temperature", "chip-power", "chip-hbm-in-use", "chip-processes"]
    if not facts["chips"]:
        why = facts["missing"].get("chips") or "no chips read"
        return [result(n, "n/a", f"no chips read: {why}",
                       "run preflight on the host itself, or pass its saved `npu-smi info` (--npu-smi-output)")
                for n in names]
    return [check_health(facts), check_ecc(facts),
            check_temperature(facts, limits.get("temp_max_c", {})), check_power(facts, limits.get("power_max_w", {})),
            check_hbm(facts, limits.get("hbm_idle_max_pct")), check_processes(facts)]
