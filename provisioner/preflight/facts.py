"""Gather what preflight judges, from the live host's tools or from saved output of another host.

On the live root `/` the tools are run (npu-smi, hccn_tool, chronyc; per chip in parallel, each with a
time-out). Another root is another system's disk: nothing on it is run (as provisioner.host.probe), its
facts come from saved output (`npu-smi info` files and collection files in the layout of MindCluster
FaultDiag's npu_info_before.txt) and from its files (/etc/hccn.conf). `run_tree_programs` lets tests run
a fixture tree's stand-in tools.

Nothing here judges; every fact that could not be read says why (`missing`), so the checks report n/a.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from provisioner import npusmi
from provisioner.host import hostfs
from provisioner.host.probe import run_command
from provisioner.preflight import parse

CHIP_KINDS = ("health", "ecc", "temp", "power", "usages")
NET_KINDS = ("ip", "link", "net_health", "tls")
HCCN_TOOL = ("/usr/local/Ascend/driver/tools/hccn_tool", "/usr/bin/hccn_tool", "/usr/local/bin/hccn_tool")
CHRONYC = ("/usr/bin/chronyc", "/usr/sbin/chronyc")
HCCN_CONF = "/etc/hccn.conf"
_PARSERS = {"health": parse.parse_health, "ecc": parse.parse_ecc, "temp": parse.parse_temp,
            "power": parse.parse_power, "usages": parse.parse_usages}
_NET_PARSERS = {"ip": parse.parse_ip, "link": parse.parse_link, "net_health": parse.parse_net_health,
                "tls": parse.parse_tls}


def _find(root: Path, candidates: tuple[str, ...]) -> Path | None:
    for rel in candidates:
        p = hostfs.under(root, rel)
        if p.is_file():
            return p
    return None


def _host_path(root: Path, p: Path) -> str:
    return "/" + str(p.relative_to(root)) if root != Path("/") else str(p)


def chip_value(kind: str, text: str | None, chip: int, per_chip_query: bool):
    """One chip's parsed value of an `npu-smi info -t KIND` output (run with -c CHIP, or for the whole NPU)."""
    if text is None:
        return None
    parsed = _PARSERS[kind](text)
    if kind == "health":
        return parsed if (parsed.get("status") or parsed.get("error_code")) else None
    if per_chip_query:
        return parsed.get(chip, parsed.get(0)) if len(parsed) <= 1 else parsed.get(chip)
    return parsed.get(chip)


def _saved(paths: list[str]) -> tuple[dict, list[str]]:
    """(tool, npu, chip, what) -> output text, from collection files; notes for unreadable files."""
    found: dict = {}
    notes = []
    for path in paths:
        text = hostfs.read_text(path, limit=8 << 20)
        if text is None:
            notes.append(f"cannot read {path}")
            continue
        for cmd, out in parse.split_collected(text):
            found[(cmd["tool"], cmd["npu"], cmd["chip"], cmd["what"])] = out
    return found, notes


def _chips(info: dict, mapping: dict | None, chip_rows: list) -> list[dict]:
    """The chips of the table with their processes, their label and the device id hccn_tool and hccn.conf use
    (the Phy-ID column, else the chip's logic id from `npu-smi info -m`, else its place in the table)."""
    logic = {(r["npu"], r["chip"]): r["logic_id"] for r in (mapping or {}).get("rows", []) if not r["mcu"]}
    npus = [c["npu"] for c in info["chips"]]
    out = []
    for index, c in enumerate(info["chips"]):
        chip = c["chip"] if c["chip"] is not None else 0
        device = c["phy_id"] if c["phy_id"] is not None else logic.get((c["npu"], chip), index)
        procs = [p for p in info["processes"] if p["npu"] == c["npu"] and p["chip"] in (None, chip)]
        cls = npusmi.classify(c["name"], npusmi.chip_memory_mb(c), chip_rows)
        label = f"NPU {c['npu']}" + (f" chip {chip}" if npus.count(c["npu"]) > 1 else "")
        out.append({"npu": c["npu"], "chip": chip, "device": device, "label": label, "name": c["name"],
                    "model": cls["model"], "family": cls["family"], "table_health": c["health"],
                    "table_temp_c": c["temp_c"], "table_power_w": c["power_w"],
                    "hbm_used_mb": c["hbm_used_mb"], "hbm_total_mb": c["hbm_total_mb"],
                    "processes": procs})
    return out


def gather(root: str | Path = "/", *, npu_smi_outputs: list | tuple = (), saved: list | tuple = (),
           run_tree_programs: bool = False, timeout: float = 10.0, chip_rows: list | tuple = (),
           peers: list | tuple = (), jobs: int = 16) -> dict:
    """Everything preflight judges, read under `root` (see the module docstring). Never raises on odd input."""
    root = Path(root)
    live = root.resolve() == Path("/")
    may_run = live or run_tree_programs
    stored, notes = _saved([str(p) for p in saved])
    facts: dict = {"root": str(root), "live": live, "ran_tools": may_run, "notes": notes, "missing": {},
                   "npu_smi": None, "npu_smi_error": None, "chips": [], "hccn_tool": None, "hccn_conf": None,
                   "net": {}, "pings": {}, "clock": None}
    missing = facts["missing"]

    # --- the chip table (npu-smi info) and the chip mapping
    table = mapping_text = None
    for path in npu_smi_outputs:
        text = hostfs.read_text(path)
        if text is None:
            notes.append(f"cannot read {path}")
        elif npusmi.is_mapping(text):
            mapping_text = text
        else:
            table = text
    table = table if table is not None else stored.get(("npu-smi", None, None, "table"))
    mapping_text = mapping_text if mapping_text is not None else stored.get(("npu-smi", None, None, "mapping"))
    smi = hostfs.find_npu_smi(root)
    facts["npu_smi"] = _host_path(root, smi) if smi else None
    if table is None and may_run and smi is not None:
        res = run_command([str(smi), "info"], timeout)
        if res["error"] or res["rc"] != 0:
            detail = (res["stderr"] or res["stdout"]).strip().splitlines()
            facts["npu_smi_error"] = (f"npu-smi info failed: {res['error'] or 'exit code ' + str(res['rc'])}"
                                      + (f": {detail[-1][:160]}" if detail else ""))
        table = res["stdout"] if res["stdout"].strip() else None
        if table is not None and mapping_text is None:
            res = run_command([str(smi), "info", "-m"], timeout)
            mapping_text = res["stdout"] if res["rc"] == 0 and not res["error"] else None
    if table is None:
        if not may_run:
            missing["chips"] = ("another host's tree: nothing on it is run; pass its saved `npu-smi info` with"
                                " --npu-smi-output FILE or a collection file with --saved FILE")
        elif smi is None:
            missing["chips"] = "npu-smi not found on this host (it comes with the Ascend driver)"
        else:
            missing["chips"] = facts["npu_smi_error"] or "npu-smi printed no table"
    else:
        info = npusmi.parse_info(table)
        if info["error"]:
            facts["npu_smi_error"] = f"npu-smi printed an error instead of a table: {info['error']}"
        mapping = npusmi.parse_mapping(mapping_text) if mapping_text else None
        facts["chips"] = _chips(info, mapping, list(chip_rows))
        if not facts["chips"]:
            missing["chips"] = facts["npu_smi_error"] or "the npu-smi table lists no chips"

    # --- per chip: npu-smi info -t KIND
    chips = facts["chips"]
    tasks = []
    for c in chips:
        for kind in CHIP_KINDS:
            text = stored.get(("npu-smi", c["npu"], c["chip"], kind))
            whole = stored.get(("npu-smi", c["npu"], None, kind))
            if text is not None:
                c[kind] = chip_value(kind, text, c["chip"], True)
            elif whole is not None:
                c[kind] = chip_value(kind, whole, c["chip"], False)
            elif may_run and smi is not None:
                tasks.append((c, kind, [str(smi), "info", "-t", kind, "-i", str(c["npu"]), "-c", str(c["chip"])]))
                c[kind] = None
            else:
                c[kind] = None
    # --- NPU network: hccn.conf, hccn_tool per device
    conf_text = hostfs.read_text(hostfs.under(root, HCCN_CONF))
    facts["hccn_conf"] = parse.parse_hccn_conf(conf_text) if conf_text is not None else None
    tool = _find(root, HCCN_TOOL)
    facts["hccn_tool"] = _host_path(root, tool) if tool else None
    net_tasks = []
    for c in chips:
        dev = c["device"]
        entry = facts["net"].setdefault(dev, {k: None for k in NET_KINDS})
        for kind in NET_KINDS:
            text = stored.get(("hccn_tool", dev, None, kind))
            if text is not None:
                entry[kind] = _NET_PARSERS[kind](text)
            elif may_run and tool is not None:
                argv = [str(tool), "-i", str(dev), f"-{kind}", "-g"]
                net_tasks.append((entry, kind, argv))
    ping_tasks = []
    for c in chips:
        for peer in peers:
            text = stored.get(("hccn_tool", c["device"], None, f"ping:{peer}"))
            if text is not None:
                facts["pings"][(c["label"], peer)] = parse.parse_ping(text)
            elif may_run and tool is not None:
                ping_tasks.append(((c["label"], peer), [str(tool), "-i", str(c["device"]), "-ping", "-g", "address",
                                                        peer]))
    # --- the clock
    chrony_text = stored.get(("chronyc", None, None, "tracking"))
    chronyc = _find(root, CHRONYC)
    if chrony_text is None and may_run and chronyc is not None:
        res = run_command([str(chronyc), "tracking"], timeout)
        chrony_text = res["stdout"] if res["rc"] == 0 and not res["error"] else None
    offset = parse.parse_chrony(chrony_text) if chrony_text else None
    facts["clock"] = {"offset_s": offset, "source": "chronyc tracking" if offset is not None else None,
                      "leap": parse.parse_chrony_leap(chrony_text) if chrony_text else None}

    def run_one(task):
        holder, kind, argv = task
        res = run_command(argv, timeout)
        return holder, kind, (res["stdout"] if res["rc"] == 0 and not res["error"] else None)

    if ping_tasks:
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(ping_tasks)))) as pool:
            for key, res in zip([k for k, _ in ping_tasks],
                                pool.map(lambda t: run_command(t[1], max(timeout, 15.0)), ping_tasks), strict=True):
                facts["pings"][key] = parse.parse_ping(res["stdout"])
    if tasks or net_tasks:
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(tasks) + len(net_tasks)))) as pool:
            for holder, kind, text in pool.map(run_one, tasks + net_tasks):
                if kind in _PARSERS:
                    holder[kind] = chip_value(kind, text, holder["chip"], True)
                elif text is not None:
                    holder[kind] = _NET_PARSERS[kind](text)
    return facts
