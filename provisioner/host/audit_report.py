"""Plain-text rendering of audit and doctor results (the JSON needs none)."""

from __future__ import annotations

from provisioner import chipids
from provisioner.host.findings import ERROR, INFO, WARNING
from provisioner.text import table

_HEADINGS = ((ERROR, "Errors"), (WARNING, "Warnings"), (INFO, "Info"))


def findings_text(findings: list[dict], summary: dict, exit_code: int) -> list[str]:
    lines: list[str] = []
    for sev, title in _HEADINGS:
        group = [f for f in findings if f["severity"] == sev]
        if not group:
            continue
        lines.append(f"{title} ({len(group)})")
        for f in group:
            lines.append(f"  {f['id']}: {f['message']}")
            if f.get("remedy"):
                lines.append(f"      fix: {f['remedy']}")
        lines.append("")
    if not findings:
        lines += ["No findings.", ""]
    lines.append(f"Result: {summary['errors']} error(s), {summary['warnings']} warning(s), {summary['infos']} info"
                 f" (exit {exit_code})")
    return lines


def host_summary(host: dict) -> list[str]:
    rows: list[tuple[str, str]] = []
    sysf = host.get("system") or {}
    osr = sysf.get("os") or {}
    rows.append(("arch", sysf.get("arch") or "unknown"))
    rows.append(("os", osr.get("pretty_name") or " ".join(x for x in (osr.get("name"), osr.get("version_id")) if x)
                 or "unknown"))
    rows.append(("kernel", sysf.get("kernel") or "unknown"))
    drv = host.get("driver")
    fw = host.get("firmware")
    if drv:
        text = f"{drv.get('version') or 'version unknown'} at {drv['dir']}"
        if fw:
            text += f"; firmware {fw.get('version') or 'version unknown'}"
        rows.append(("driver", text))
    else:
        rows.append(("driver", "not installed"))
    canns = host.get("cann") or []
    rows.append(("CANN", "; ".join(f"{c['version']} {c['kind']} ({c['layout']}, {c.get('arch') or 'arch ?'})"
                                   for c in canns) or "not installed"))
    smi = host.get("npu_smi") or {}
    src = smi.get("source")
    smi_text = {"run": f"ran {smi.get('path')}", "file": "read from --npu-smi-output", "absent": "not found",
                "skipped": "not run"}.get(str(src), "not read")
    if smi.get("version"):
        smi_text = f"{smi['version']}, {smi_text}"
    rows.append(("npu-smi", smi_text))
    chips = smi.get("chips") or []
    if chips:
        kinds: dict[str, int] = {}
        for c in chips:
            key = f"{c['name']} ({c.get('family') or 'unknown family'})"
            kinds[key] = kinds.get(key, 0) + 1
        rows.append(("chips", ", ".join(f"{n} x {k}" for k, n in kinds.items())))
    devs = host.get("devices") or {}
    ids = devs.get("davinci_ids") or []
    others = [n["name"] for n in devs.get("nodes", []) if not n["name"].startswith("davinci") or
              not n["name"][7:].isdigit()]
    dev_text = ", ".join(([f"davinci{chipids.format_ids(ids)}"] if ids else []) + others) or "none"
    rows.append(("devices", dev_text))
    acct = host.get("account") or {}
    rows.append((acct.get("user") or "HwHiAiUser",
                 f"uid {acct.get('uid') if acct.get('uid') is not None else 'missing'},"
                 f" group {acct.get('group')} gid {acct.get('gid') if acct.get('gid') is not None else 'missing'}"))
    dk = host.get("docker") or {}
    eng = dk.get("engine") or {}
    if not eng.get("probed"):
        eng_text = "engine not asked (--root is another host)"
    elif eng.get("reachable"):
        eng_text = f"engine {eng.get('version')}"
    else:
        eng_text = "engine not reachable"
    rt = dk.get("ascend_runtime") or {}
    if rt.get("installed") or rt.get("configured"):
        rt_text = "Ascend Docker Runtime " + ("is the default runtime" if rt.get("default") else
                                              "registered" if rt.get("configured") else "installed, not registered")
    else:
        rt_text = "no Ascend Docker Runtime"
    rows.append(("docker", f"{eng_text}; {rt_text}"))
    cdi = [d for d in dk.get("cdi") or [] if d.get("exists")]
    rows.append(("CDI", "; ".join(f"{d['dir']} ({len(d['specs'])} spec(s){', ascend' if d['ascend_specs'] else ''})"
                                  for d in cdi) or "no spec dirs"))
    shm = host.get("shm")
    rows.append(("/dev/shm", f"{shm['total_mb']} MB" if shm else "not measured"))
    width = max(len(k) for k, _ in rows)
    return [f"  {k.ljust(width)}  {v}" for k, v in rows]


def chips_table(chips: list[dict]) -> str:
    rows = []
    for c in chips:
        mem = c.get("hbm_used_mb"), c.get("hbm_total_mb")
        if not mem[1]:
            mem = c.get("memory_used_mb"), c.get("memory_total_mb")
        rows.append([
            c["npu"], c.get("chip"), c.get("phy_id"), c["name"], c.get("family") or "?", c.get("health"),
            "-" if c.get("power_w") is None else f"{c['power_w']:g}",
            "-" if c.get("temp_c") is None else f"{c['temp_c']:g}",
            f"{mem[0]} / {mem[1]}" if mem[1] else "-",
            ", ".join(str(p["pid"]) for p in c.get("processes") or []) or "-",
        ])
    return table(rows, ["NPU", "Chip", "Phy", "Name", "Family", "Health", "Power W", "Temp C", "Memory MB", "PIDs"])


def render_audit(result: dict) -> str:
    host = result["host"]
    lines = [f"Host {host['root']}" + ("" if host.get("live") else " (a host tree, not this machine)")]
    lines += host_summary(host)
    chips = (host.get("npu_smi") or {}).get("chips") or []
    lines.append("")
    if chips:
        lines.append(f"Chips ({len(chips)})")
        lines += ["  " + ln for ln in chips_table(chips).splitlines()]
        lines.append("")
    if result.get("image"):
        lines.append(f"Image {result['image']['ref']} (stack {result['image'].get('stack_id') or '?'})")
        lines.append("")
    lines += findings_text(result["findings"], result["summary"], result["exit_code"])
    return "\n".join(lines)


def render_doctor(result: dict) -> str:
    facts = result["facts"]
    rows = [(k, v) for k, v in facts.get("summary", {}).items()]
    width = max((len(k) for k, _ in rows), default=0)
    lines = ["Container check (provision doctor)"]
    lines += [f"  {k.ljust(width)}  {v}" for k, v in rows]
    lines.append("")
    lines += findings_text(result["findings"], result["summary"], result["exit_code"])
    return "\n".join(lines)
