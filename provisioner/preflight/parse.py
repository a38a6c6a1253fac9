"""Read the text of the vendor tools preflight uses: pure functions, no I/O, nothing raises on odd text.

Formats (each seen in published output, cited in tests/fixtures/preflight/README.md):
  npu-smi info -t health|ecc|temp|power|usages -i N [-c C]: `Key : value` lines, one block per chip
      separated by blank lines, an MCU block (`Chip Name : MCU`) on some cards;
  hccn_tool -i N -ip -g (`ipaddr:` / `netmask:`), -link -g (`link status: UP`), -net_health -g
      (`net health status: Success`), -tls -g (`tls switch[0](0:disable, 1:enable)`);
  /etc/hccn.conf: `address_N=`, `netmask_N=`, `netdetect_N=`, `gateway_N=`, `tls_enable_N=` lines;
  chronyc tracking: `System time : S seconds fast|slow of NTP time`;
  a collection file (MindCluster FaultDiag's npu_info_before.txt layout): each command line, then its output.
"""

from __future__ import annotations

import math
import re

_KV = re.compile(r"^\s*([A-Za-z][^:]*?)\s*:\s*(.*?)\s*$")
_CMD = re.compile(r"^\s*(?:\S*/)?(npu-smi|hccn_tool|chronyc)\s+(.*?)\s*$")
# Another command's line in a collection file (its output is not ours): ends the block before it.
_OTHER = re.compile(r"^\s*(?:/(?:usr|bin|sbin|opt)/\S+|cat|pip3?|echo|date|datetime=\S*|ls|grep|python3?)(?:\s|$)")
_IP = re.compile(r"ipaddr\s*:\s*([0-9.]+)", re.I)
_MASK = re.compile(r"netmask\s*:\s*([0-9.]+)", re.I)
_LINK = re.compile(r"link status\s*:\s*(\w+)", re.I)
_HEALTH_NET = re.compile(r"net health status\s*:\s*([A-Za-z ]+?)\s*$", re.I | re.M)
_TLS = re.compile(r"tls switch\s*\[(\d)\]", re.I)
_CONF = re.compile(r"^\s*([a-z_]+?)_(\d+)\s*=\s*(\S*)\s*$")
_CHRONY = re.compile(r"System time\s*:\s*([0-9.]+)\s+seconds\s+(fast|slow)", re.I)


def blocks(text: str) -> list[dict[str, str]]:
    """`Key : value` lines grouped into blocks at blank lines (keys as printed)."""
    out: list[dict[str, str]] = []
    cur: dict[str, str] = {}
    for line in (text or "").splitlines():
        if not line.strip():
            if cur:
                out.append(cur)
                cur = {}
            continue
        m = _KV.match(line)
        if m:
            cur[m.group(1)] = m.group(2)
    if cur:
        out.append(cur)
    return out


def _number(text: str | None) -> float | None:
    """A finite number, or None (NA, empty, nan and inf are not measurements)."""
    try:
        value = float(str(text).strip())
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def _chip_blocks(text: str) -> list[dict[str, str]]:
    """The per-chip blocks of an `npu-smi info -t ...` output: the header block (NPU ID, Chip Count) and
    MCU blocks dropped; a block without Chip ID is chip 0 (single-chip outputs with `-c`)."""
    out = []
    for b in blocks(text):
        if (b.get("Chip Name") or "").upper() == "MCU":
            continue
        if set(b) <= {"NPU ID", "Chip Count"}:
            continue
        out.append(b)
    return out


def _chip_id(block: dict[str, str]) -> int:
    value = _number(block.get("Chip ID"))
    return int(value) if value is not None else 0


def parse_health(text: str) -> dict:
    """npu-smi info -t health: {status, error_code, error_info} (None where absent)."""
    found: dict[str, str] = {}
    for b in blocks(text):
        found.update(b)
    code = found.get("Error Code")
    return {"status": found.get("Health Status") or found.get("Healthy"),
            "error_code": None if code in (None, "", "NA") else code,
            "error_info": None if found.get("Error Information") in (None, "", "NA") else found["Error Information"]}


_ECC_KEYS = {
    "HBM Single Bit Error Count": "hbm_single",
    "HBM Double Bit Error Count": "hbm_double",
    "HBM Single Bit Aggregate Total Err Cnt": "hbm_single_total",
    "HBM Double Bit Aggregate Total Err Cnt": "hbm_double_total",
    "HBM Single Bit Isolated Pages Count": "hbm_single_pages",
    "HBM Double Bit Isolated Pages Count": "hbm_double_pages",
    "DDR Single Bit Error Count": "ddr_single",
    "DDR Double Bit Error Count": "ddr_double",
    "DDR Single Bit Aggregate Total Err Cnt": "ddr_single_total",
    "DDR Double Bit Aggregate Total Err Cnt": "ddr_double_total",
    "DDR Single Bit Isolated Pages Count": "ddr_single_pages",
    "DDR Double Bit Isolated Pages Count": "ddr_double_pages",
}


def parse_ecc(text: str) -> dict[int, dict[str, int]]:
    """npu-smi info -t ecc: chip id -> {hbm_single, hbm_double, ..._total, ..._pages, ddr_...} (counters
    npu-smi printed as NA are left out)."""
    out: dict[int, dict[str, int]] = {}
    for b in _chip_blocks(text):
        counters = {}
        for key, name in _ECC_KEYS.items():
            value = _number(b.get(key))
            if value is not None:
                counters[name] = int(value)
        if counters:
            out[_chip_id(b)] = counters
    return out


def parse_temp(text: str) -> dict[int, float]:
    """npu-smi info -t temp: chip id -> degrees C (servers print `NPU Temperature (C)`, others
    `Temperature (C)`)."""
    out: dict[int, float] = {}
    for b in _chip_blocks(text):
        for key in ("NPU Temperature (C)", "Temperature (C)", "Temperature(C)"):
            value = _number(b.get(key))
            if value is not None:
                out[_chip_id(b)] = value
                break
    return out


def parse_power(text: str) -> dict[int, float]:
    """npu-smi info -t power: chip id -> the chip's real-time power in W."""
    out: dict[int, float] = {}
    for b in _chip_blocks(text):
        value = _number(b.get("NPU Real-time Power(W)"))
        if value is not None:
            out[_chip_id(b)] = value
    return out


def parse_usages(text: str) -> dict[int, dict[str, float | None]]:
    """npu-smi info -t usages: chip id -> {hbm_mb, hbm_pct} (HBM capacity and usage rate; None where absent)."""
    out: dict[int, dict[str, float | None]] = {}
    for b in _chip_blocks(text):
        cap, pct = _number(b.get("HBM Capacity(MB)")), _number(b.get("HBM Usage Rate(%)"))
        if cap is not None or pct is not None:
            out[_chip_id(b)] = {"hbm_mb": cap, "hbm_pct": pct}
    return out


def parse_ip(text: str) -> dict:
    """hccn_tool -i N -ip -g: {address, netmask} (None where absent)."""
    ip, mask = _IP.search(text or ""), _MASK.search(text or "")
    return {"address": ip.group(1) if ip else None, "netmask": mask.group(1) if mask else None}


def parse_link(text: str) -> str | None:
    """hccn_tool -i N -link -g: 'UP', 'DOWN' or None."""
    m = _LINK.search(text or "")
    return m.group(1).upper() if m else None


def parse_net_health(text: str) -> str | None:
    """hccn_tool -i N -net_health -g: 'Success', 'Init', 'Socket fail', ... or None."""
    m = _HEALTH_NET.search(text or "")
    return m.group(1) if m else None


def parse_tls(text: str) -> int | None:
    """hccn_tool -i N -tls -g: the TLS switch, 0 (disabled) or 1 (enabled), or None."""
    m = _TLS.search(text or "")
    return int(m.group(1)) if m else None


_PING = re.compile(r"(\d+)\s+packets transmitted,\s*(\d+)\s+received", re.I)


def parse_ping(text: str) -> dict | None:
    """hccn_tool -i N -ping -g address A (or ping): {sent, received}, or None."""
    m = _PING.search(text or "")
    return {"sent": int(m.group(1)), "received": int(m.group(2))} if m else None


def parse_hccn_conf(text: str) -> dict[int, dict[str, str]]:
    """/etc/hccn.conf: device id -> {address, netmask, netdetect, gateway, tls_enable, ...}."""
    out: dict[int, dict[str, str]] = {}
    for line in (text or "").splitlines():
        m = _CONF.match(line)
        if m:
            out.setdefault(int(m.group(2)), {})[m.group(1)] = m.group(3)
    return out


def parse_chrony(text: str) -> float | None:
    """chronyc tracking: this clock's offset from NTP time in seconds (positive: fast), or None."""
    m = _CHRONY.search(text or "")
    if not m:
        return None
    value = float(m.group(1))
    return value if m.group(2).lower() == "fast" else -value


_LEAP = re.compile(r"Leap status\s*:\s*(.+?)\s*$", re.I | re.M)


def parse_chrony_leap(text: str) -> str | None:
    """chronyc tracking: the Leap status (`Normal`, `Not synchronised`, ...), or None."""
    m = _LEAP.search(text or "")
    return m.group(1) if m else None


def _command(tool: str, args: str) -> dict | None:
    """`npu-smi info -i 0 -c 0 -t health` / `hccn_tool -i 0 -ip -g | grep x` -> {tool, npu, chip, what}."""
    words = args.split("|", 1)[0].split()
    if tool == "chronyc":
        return {"tool": tool, "npu": None, "chip": None, "what": words[0]} if words == ["tracking"] else None
    if tool == "npu-smi" and words in (["info"], ["info", "-m"]):
        return {"tool": tool, "npu": None, "chip": None, "what": "table" if words == ["info"] else "mapping"}

    def after(flag: str) -> str | None:
        return words[words.index(flag) + 1] if flag in words and words.index(flag) + 1 < len(words) else None
    npu = after("-i")
    if npu is None or not npu.isdigit():
        return None
    if tool == "npu-smi":
        what = after("-t")
        chip = after("-c")
        if not words or words[0] != "info" or what is None:
            return None
        return {"tool": tool, "npu": int(npu), "chip": int(chip) if chip and chip.isdigit() else None, "what": what}
    for w in words:
        if w.startswith("-") and w not in ("-i", "-g", "-s") and not w[1:].isdigit():
            what = w[1:] if w != "-ping" else f"ping:{after('address')}"
            return {"tool": tool, "npu": int(npu), "chip": None, "what": what}
    return None


def split_collected(text: str) -> list[tuple[dict, str]]:
    """A collection file (each command line followed by its output, as MindCluster FaultDiag's
    npu_info_before.txt): [(command, output)] for the npu-smi (`info`, `info -m`, `info -t ...`),
    hccn_tool and `chronyc tracking` commands in it; the output of other commands is skipped."""
    out: list[tuple[dict, str]] = []
    cur: dict | None = None
    lines: list[str] = []
    for line in (text or "").splitlines():
        m = _CMD.match(line)
        if m and (m.group(1) != "npu-smi" or m.group(2).startswith("info")):
            if cur is not None:
                out.append((cur, "\n".join(lines)))
            cur, lines = _command(m.group(1), m.group(2)), []
            continue
        if _OTHER.match(line) and not _KV.match(line):
            if cur is not None:
                out.append((cur, "\n".join(lines)))
            cur, lines = None, []
            continue
        if cur is not None:
            lines.append(line)
    if cur is not None:
        out.append((cur, "\n".join(lines)))
    return [(c, t) for c, t in out if c is not None]
