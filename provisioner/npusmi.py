"""Parse `npu-smi info` and `npu-smi info -m` text: pure functions, no I/O.

The tables differ across generations (all seen in real output):
  A2 (910Bx)        header "Chip", Memory-Usage and HBM-Usage columns
  A3 (Ascend910)    header "Chip  Phy-ID", two chips per NPU, both memory columns
  310P              header "Chip  Device", no HBM column (memory under Memory-Usage)
  first-gen 910     header "Chip", HBM plus ~15 GB DDR under Memory-Usage
  Ascend 310        header "Chip  Device", DDR only, version string like 21.0.4.B030
Each chip takes two table lines: `NPU Name | Health | Power Temp Hugepages` and
`Chip [Phy-ID|Device] | Bus-Id | AICore Memory [HBM]`. A process table may
follow. Nothing here raises on odd text: lines that cannot be read become
entries in `warnings`, and text with no table at all is reported as such.
"""

from __future__ import annotations

import re

_VERSION = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*(\S+)", re.IGNORECASE)
_ROW1_ID = re.compile(r"^\s*(\d+)\s+(\S.*?)\s*$")
_ROW2_ID = re.compile(r"^\s*(\d+)(?:\s+(\d+))?\s*$")
_BUS = re.compile(r"^\s*[0-9A-Fa-fx]{4,8}:[0-9A-Fa-fx]{2}:[0-9A-Fa-fx]{2}\.[0-9A-Fa-fx]\s*$")
_PAIR = re.compile(r"(\d+|-|NA)\s*/\s*(\d+|-|NA)")
_HEALTH = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?)\s*$")
_IDLE = re.compile(r"No running processes found in NPU\s+(\d+)", re.IGNORECASE)
_MAP_ROW = re.compile(r"^\s*(-?\d+)\s+(\d+)\s+(\d+|-)\s+(\S.*?)\s*$")
# Messages npu-smi prints instead of a table (device held by another
# container: dcmi -8005/-8020; driver not loaded; ...).
_FAILURES = ("dcmi module initialize failed", "ret is -", "error", "failed", "not found", "no such file",
             "permission denied", "can not", "cannot")

HEALTHY = "OK"


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        return None


def _int(text: str | None) -> int | None:
    value = _num(text)
    return None if value is None else int(value)


def _cells(line: str) -> list[str] | None:
    """`| a | b | c |` -> ['a', 'b', 'c']; None for border and non-table lines."""
    s = line.strip()
    if not s.startswith("|") or set(s) <= set("+-=| "):
        return None
    parts = s.strip("|").split("|")
    return [p.strip() for p in parts]


def _pairs(text: str) -> list[tuple[int | None, int | None]]:
    return [(_int(a), _int(b)) for a, b in _PAIR.findall(text)]


def is_mapping(text: str) -> bool:
    """True for `npu-smi info -m` output (the chip mapping table)."""
    return "chip logic id" in text.lower()


def parse_info(text: str) -> dict:
    """Parse `npu-smi info`. Returns a dict:

    version, npu_smi_version: strings or None (header `npu-smi X  Version: Y`)
    second_id: "Phy-ID", "Device" or None (what the number after Chip means)
    has_hbm: whether the table has an HBM-Usage column
    chips: list of {npu, chip, phy_id, name, health, power_w, temp_c,
           hugepages_used, hugepages_total, bus_id, aicore_pct,
           memory_used_mb, memory_total_mb, hbm_used_mb, hbm_total_mb}
    processes: list of {npu, chip, pid, name, memory_mb}
    idle_npus: NPU ids the process table says run nothing
    warnings: lines that could not be read; error: the failure text npu-smi
    printed instead of a table (or None)
    """
    out: dict = {
        "version": None,
        "npu_smi_version": None,
        "second_id": None,
        "has_hbm": False,
        "chips": [],
        "processes": [],
        "idle_npus": [],
        "warnings": [],
        "error": None,
    }
    if not isinstance(text, str):
        out["warnings"].append("npu-smi output is not text")
        return out
    pending: dict | None = None
    in_processes = False
    saw_table = False
    for lineno, raw in enumerate(text.splitlines(), 1):
        if out["version"] is None:
            m = _VERSION.search(raw)
            if m:
                out["npu_smi_version"], out["version"] = m.group(1), m.group(2)
                saw_table = True
                continue
        cells = _cells(raw)
        if cells is None:
            continue
        saw_table = True
        joined = " ".join(cells)
        low = joined.lower()
        if "process id" in low:
            in_processes = True
            if pending:
                out["warnings"].append(f"line {lineno}: chip row for NPU {pending['npu']} has no second line")
                out["chips"].append(pending)
                pending = None
            continue
        if "bus-id" in low and "chip" in low:
            if "phy-id" in low:
                out["second_id"] = "Phy-ID"
            elif "device" in low:
                out["second_id"] = "Device"
            out["has_hbm"] = "hbm" in low
            continue
        if "name" in low and "health" in low:
            continue
        idle = _IDLE.search(joined)
        if idle:
            out["idle_npus"].append(int(idle.group(1)))
            continue
        try:
            if in_processes:
                proc = _process_row(cells)
                if proc is None:
                    out["warnings"].append(f"line {lineno}: unreadable process row: {joined[:80]}")
                else:
                    out["processes"].append(proc)
                continue
            if len(cells) < 3:
                out["warnings"].append(f"line {lineno}: unreadable row: {joined[:80]}")
                continue
            if _BUS.match(cells[1]) or cells[1].upper() == "NA" or "xx:" in cells[1].lower():
                if pending is None:
                    out["warnings"].append(f"line {lineno}: second chip line without a first: {joined[:80]}")
                    continue
                _row2(pending, cells, out, lineno)
                out["chips"].append(pending)
                pending = None
            else:
                row = _row1(cells)
                if row is None:
                    out["warnings"].append(f"line {lineno}: unreadable chip row: {joined[:80]}")
                    continue
                if pending is not None:
                    out["warnings"].append(f"line {lineno}: chip row for NPU {pending['npu']} has no second line")
                    out["chips"].append(pending)
                pending = row
        except (ValueError, IndexError) as exc:  # pragma: no cover - the regexes keep these out
            out["warnings"].append(f"line {lineno}: {exc}")
    if pending is not None:
        out["warnings"].append(f"chip row for NPU {pending['npu']} has no second line (output truncated?)")
        out["chips"].append(pending)
    if not out["chips"]:
        failure = _failure(text)
        if failure:
            out["error"] = failure
        elif not saw_table:
            first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
            out["warnings"].append(f"no npu-smi table found (first line: {first[:80]!r})" if first else "npu-smi printed nothing")
        elif not out["idle_npus"]:
            out["warnings"].append("npu-smi table has no chip rows (unknown layout)")
    return out


def _row1(cells: list[str]) -> dict | None:
    m = _ROW1_ID.match(cells[0])
    h = _HEALTH.match(cells[1])
    if not m or not h:
        return None
    nums = cells[2].split()
    pairs = _pairs(cells[2])
    return {
        "npu": int(m.group(1)),
        "chip": None,
        "phy_id": None,
        "name": m.group(2),
        "health": h.group(1),
        "power_w": _num(nums[0]) if nums else None,
        "temp_c": _num(nums[1]) if len(nums) > 1 else None,
        "hugepages_used": pairs[0][0] if pairs else None,
        "hugepages_total": pairs[0][1] if pairs else None,
        "bus_id": None,
        "aicore_pct": None,
        "memory_used_mb": None,
        "memory_total_mb": None,
        "hbm_used_mb": None,
        "hbm_total_mb": None,
    }


def _row2(row: dict, cells: list[str], out: dict, lineno: int) -> None:
    m = _ROW2_ID.match(cells[0])
    if m:
        row["chip"] = int(m.group(1))
        if m.group(2) is not None:
            row["phy_id"] = int(m.group(2))
    else:
        out["warnings"].append(f"line {lineno}: chip id {cells[0]!r} unreadable for NPU {row['npu']}")
    row["bus_id"] = cells[1]
    nums = cells[2].split()
    row["aicore_pct"] = _num(nums[0]) if nums else None
    pairs = _pairs(cells[2])
    if len(pairs) >= 2:
        (row["memory_used_mb"], row["memory_total_mb"]), (row["hbm_used_mb"], row["hbm_total_mb"]) = pairs[0], pairs[1]
    elif len(pairs) == 1:
        row["memory_used_mb"], row["memory_total_mb"] = pairs[0]
    else:
        out["warnings"].append(f"line {lineno}: no memory figures for NPU {row['npu']}")


def _process_row(cells: list[str]) -> dict | None:
    if len(cells) < 4:
        return None
    m = _ROW2_ID.match(cells[0])
    pid = _int(cells[1])
    if not m or pid is None:
        return None
    return {
        "npu": int(m.group(1)),
        "chip": int(m.group(2)) if m.group(2) is not None else None,
        "pid": pid,
        "name": cells[2],
        "memory_mb": _int(cells[3]),
    }


def _failure(text: str) -> str | None:
    for line in text.splitlines():
        s = line.strip()
        if s and any(word in s.lower() for word in _FAILURES):
            return s[:200]
    return None


def parse_mapping(text: str) -> dict:
    """Parse `npu-smi info -m`: rows of {npu, chip, logic_id, name, mcu}; warnings.

    MCU rows have logic id "-" (kept with mcu=True); an NPU id of -1 means the
    NPU is unavailable (npu-smi documentation).
    """
    out: dict = {"rows": [], "warnings": []}
    if not isinstance(text, str):
        out["warnings"].append("npu-smi -m output is not text")
        return out
    seen_header = False
    for lineno, line in enumerate(text.splitlines(), 1):
        if "chip logic id" in line.lower():
            seen_header = True
            continue
        if not seen_header or not line.strip():
            continue
        m = _MAP_ROW.match(line)
        if not m:
            if line.strip()[:1].isdigit() or line.strip().startswith("-"):
                out["warnings"].append(f"line {lineno}: unreadable mapping row: {line.strip()[:80]}")
            continue
        logic = None if m.group(3) == "-" else int(m.group(3))
        name = m.group(4)
        out["rows"].append({
            "npu": int(m.group(1)),
            "chip": int(m.group(2)),
            "logic_id": logic,
            "name": name,
            "mcu": logic is None or name.lower() == "mcu",
        })
    if not seen_header:
        out["warnings"].append("no `npu-smi info -m` table found")
    return out


def chip_memory_mb(chip: dict) -> int | None:
    """The chip's own memory: HBM where the table has it, else Memory-Usage (310, 310P)."""
    hbm = chip.get("hbm_total_mb")
    if hbm:
        return hbm
    return chip.get("memory_total_mb") or None


def _name_keys(name: str) -> list[str]:
    low = name.strip().lower()
    bare = re.sub(r"^ascend\s*", "", low).replace(" ", "")
    return [low] if bare == low else [low, bare]


def classify(name: str | None, memory_mb: int | None, chip_rows: list[dict]) -> dict:
    """Chip model and family for an npu-smi name and its memory, from matrix `chips` rows.

    Returns {model, family, note}; model/family are None for an unknown name.
    The name picks the rows (exact, then without an "Ascend" prefix and
    spaces); when several rows carry the name, the memory decides (the row
    whose hbm_mb is nearest). Plain "910B" is listed under the first-generation
    910 in the matrix: an A2 chip always has a digit after the B.
    """
    if not name:
        return {"model": None, "family": None, "note": "no chip name"}
    index: dict[str, list[dict]] = {}
    for row in chip_rows:
        for n in [*row.get("npu_smi_names", []), *row.get("soc_names", [])]:
            bucket = index.setdefault(n.strip().lower(), [])
            if row not in bucket:
                bucket.append(row)
    keys = _name_keys(name)
    hits: list[dict] = []
    for key in keys:
        hits = index.get(key, [])
        if hits:
            break
    if not hits:
        for key in keys[1:]:
            hits = [r for n, rows in index.items() if n.replace(" ", "") == key for r in rows]
            if hits:
                break
    if not hits:
        return {"model": None, "family": None, "note": f"chip name {name!r} is not in the matrix"}
    hit = hits[0]
    if len(hits) > 1 and memory_mb:
        sized = [r for r in hits if r.get("hbm_mb")]
        if sized:
            hit = min(sized, key=lambda r: abs(r["hbm_mb"] - memory_mb))
    note = None
    expected = hit.get("hbm_mb")
    if expected and memory_mb and abs(memory_mb - expected) > expected * 0.1:
        note = f"{name} shows {memory_mb} MB; the matrix lists {expected} MB for {hit['model']}"
    return {"model": hit["model"], "family": hit["family"], "note": note}
