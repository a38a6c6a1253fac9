"""Find and read the logs of a job, and what each line says about where it comes from: rank, PID, device, chip,
the peer it waited for, and its time.

What `provision explain` reads (a LOG argument is a file or a directory, walked without following links):
  - the rank-prefixed stream: `[rankN]:` (provision launch and torchrun --tee with the launcher's prefix
    template), `[defaultN]:` (torchrun's own tee prefix), `(Name rank=N pid=P)` / `(Name pid=P)` (vLLM and Ray
    worker prefixes); any other text file is read the same way (lines without a prefix have no rank);
  - torchrun --log-dir files: .../attempt_<n>/<local rank>/stdout.log|stderr.log (the directory names the rank
    of lines that carry none; on more than one node that is the local rank);
  - CANN plogs: plog-<PID>_<time>.log (host side, under ~/ascend/log/debug/plog/ or $ASCEND_PROCESS_LOG_PATH)
    and device-<PID>_<time>.log under device-<id>/; a line is `[LEVEL] MODULE(PID,PNAME):yyyy-mm-dd-hh:mm:ss.fff.uuu
    [file:line]text` (CANN log reference); only ERROR lines are classified. A plog names its PID; the rank comes
    from a stream line of torch_npu that pairs the same PID with a RankID or rank prefix.

Times: CANN's yyyy-mm-dd-hh:mm:ss.fff.uuu, ISO-like yyyy-mm-dd hh:mm:ss[,.]fff, glog's [IWEF]MMDD hh:mm:ss.uuu and
vLLM's `ERROR MM-DD hh:mm:ss` (no year: the year of the first full time in the same file, else of any file).
Logs are untrusted: files are read up to MAX_FILE_BYTES (the end of a longer file), lines cut at MAX_LINE,
directories walked up to MAX_FILES, and text meant for a terminal goes through `clean`.
"""

from __future__ import annotations

import datetime
import os
import re
from dataclasses import dataclass, field

from provisioner.errors import ProvisionError

MAX_FILES = 4000
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_TOTAL_BYTES = 512 * 1024 * 1024
MAX_LINE = 4096
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")

_PREFIXES = (
    re.compile(r"^\[rank(?P<rank>\d{1,6})\]:"),
    re.compile(r"^\[default(?P<rank>\d{1,6})\]:"),
    re.compile(r"^\((?:[A-Za-z_][\w-]{0,60}) (?:rank=(?P<rank>\d{1,6}) )?pid=(?P<pid>\d{1,9})\) ?"),
    re.compile(r"^\[\d{1,9}\] (?=\[rank\d)"),  # a line number some users paste in front ("[80746] [rank0]:")
)
_PLOG = re.compile(r"^\[(?P<level>ERROR|WARNING|INFO|DEBUG|EVENT|TRACE)\] (?P<module>[A-Z][A-Z0-9_]{0,31})"
                   r"\((?P<pid>\d{1,9}),[^)]{0,80}\):")
_NPU_IDS = re.compile(r"\(PID:(?P<pid>\d{1,9}), Device:(?P<device>-?\d{1,4}), RankID:(?P<rank>-?\d{1,6})\)")
_CANN_PID = re.compile(r"\[PID: ?(?P<pid>\d{1,9})\]")
_RANK_WORD = re.compile(r"\[(?:PG [^\]]{0,60} )?Rank (?P<rank>\d{1,6})\]")
_CHIP = re.compile(r"device\(chipId:(?P<chip>\d{1,4})|phy_id\((?P<phy>\d{1,4})\)")
_DEVICE = re.compile(r"\(NPU (?P<npu>\d{1,4});|devid\[(?P<devid>\d{1,4})\]|device_id=(?P<did>\d{1,4})")
_PEER = re.compile(r"remote rank: ?\[(?P<remote>\d{1,6})\]|dst_rank\[(?P<dst>\d{1,6})\]")
_FULL_TIME = re.compile(r"(?<!\d)(?P<y>20\d\d)-(?P<mo>\d\d)-(?P<d>\d\d)[- T](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
                        r"(?:[.,](?P<f>\d{1,9}))?(?:\.(?P<u>\d{3}))?")
_GLOG_TIME = re.compile(r"(?:^|\[)[IWEF](?P<md>\d{3,4}) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)\.(?P<f>\d{1,9})")
_VLLM_TIME = re.compile(r"^(?:ERROR|WARNING|INFO|DEBUG) (?P<mo>\d\d)-(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)")
_PLOG_NAME = re.compile(r"^(?:plog|device)-(?P<pid>\d{1,9})_\d{6,20}\.log$")
_DEVICE_DIR = re.compile(r"^device-(?P<device>\d{1,4})$")
_ATTEMPT_DIR = re.compile(r"^attempt_\d{1,4}$")
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(slots=True)
class Line:
    """One line of a log, what it says about its origin (None where it says nothing), and its place."""

    source: int
    lineno: int
    text: str  # without the prefixes
    rank: int | None = None
    pid: int | None = None
    device: int | None = None
    chip: int | None = None
    peer: int | None = None
    level: str | None = None  # a plog line's level
    stamp: tuple | None = None  # (year or None, month, day, hour, minute, second, microsecond)
    time: float | None = None  # seconds since the epoch, once the year is known


@dataclass
class Source:
    path: str
    kind: str  # stream | rank-file | plog
    rank: int | None = None
    pid: int | None = None
    device: int | None = None
    lines: list[Line] = field(default_factory=list)
    truncated: bool = False


def clean(text: str, limit: int = 300) -> str:
    """Log text made safe for a terminal and a JSON reader: no escape sequences or control characters, bounded."""
    text = _CONTROL.sub("", text).replace("\t", " ").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_line(raw: str, source: int, lineno: int, plog: bool = False) -> Line:
    text = raw[:MAX_LINE].rstrip("\r\n")
    rank = pid = None
    for _ in range(4):
        for rx in _PREFIXES:
            m = rx.match(text)
            if m:
                d = m.groupdict()
                if d.get("rank") is not None and rank is None:
                    rank = int(d["rank"])
                if d.get("pid") is not None and pid is None:
                    pid = int(d["pid"])
                text = text[m.end():].lstrip(" ")
                break
        else:
            break
    line = Line(source, lineno, text, rank=rank, pid=pid)
    if plog and (m := _PLOG.match(text)):
        line.level, line.pid = m["level"], int(m["pid"])
    # Each search only where a plain substring test says it can match (most lines of a long log carry nothing).
    if "PID:" in text and (m := _NPU_IDS.search(text)):
        line.pid = line.pid or int(m["pid"])
        if int(m["device"]) >= 0:
            line.device = int(m["device"])
        if int(m["rank"]) >= 0 and line.rank is None:
            line.rank = int(m["rank"])
    elif line.pid is None and "[PID:" in text and (m := _CANN_PID.search(text)):
        line.pid = int(m["pid"])
    if line.rank is None and "Rank " in text and (m := _RANK_WORD.search(text)):
        line.rank = int(m["rank"])
    if ("chipId" in text or "phy_id" in text) and (m := _CHIP.search(text)):
        line.chip = int(m["chip"] or m["phy"])
    if line.device is None and ("NPU " in text or "dev" in text) and (m := _DEVICE.search(text)):
        line.device = int(m["npu"] or m["devid"] or m["did"])
    if ("remote rank" in text or "dst_rank" in text) and (m := _PEER.search(text)):
        line.peer = int(m["remote"] or m["dst"])
    if ":" in text:
        line.stamp = _stamp(text)
    return line


def _stamp(text: str) -> tuple | None:
    if "20" in text and (m := _FULL_TIME.search(text)):
        micro = int((m["f"] or "0")[:6].ljust(6, "0"))
        if m["u"] and m["f"] and len(m["f"]) == 3:  # CANN: .fff.uuu (milliseconds, then microseconds)
            micro = int(m["f"]) * 1000 + int(m["u"])
        return (int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), micro)
    if (text[:1] in "IWEF[" or "[" in text) and (m := _GLOG_TIME.search(text)):
        md = m["md"]
        return (None, int(md[:-2]), int(md[-2:]), int(m["h"]), int(m["mi"]), int(m["s"]),
                int(m["f"][:6].ljust(6, "0")))
    if m := _VLLM_TIME.match(text):
        return (None, int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), 0)
    return None


def resolve_times(sources: list[Source]) -> None:
    """Give every stamped line its time: a stamp without a year takes the year of its file's first full stamp,
    else of any file's; an impossible date (glog's month 13) leaves the line without a time."""
    years = [next((ln.stamp[0] for ln in s.lines if ln.stamp and ln.stamp[0]), None) for s in sources]
    any_year = next((y for y in years if y), 2000)
    for s, year in zip(sources, years, strict=True):
        for ln in s.lines:
            if ln.stamp is None:
                continue
            y = ln.stamp[0] or year or any_year
            try:
                ln.time = datetime.datetime(y, *ln.stamp[1:]).timestamp()
            except (ValueError, OverflowError):
                ln.time = None


def _read_text(path: str, budget: list[int]) -> tuple[list[str], bool]:
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as fh:
            truncated = size > MAX_FILE_BYTES
            if truncated:
                fh.seek(size - MAX_FILE_BYTES)
            want = min(MAX_FILE_BYTES, budget[0])
            data = fh.read(want)
    except OSError as exc:
        raise ProvisionError(f"{path}: cannot read ({exc.strerror or exc})") from None
    budget[0] -= len(data)
    if truncated:
        data = data.split(b"\n", 1)[-1]  # the first line was cut
    return data.decode("utf-8", errors="replace").splitlines(), truncated


def _kind(path: str) -> tuple[str, int | None, int | None, int | None]:
    """(kind, rank, pid, device) a file's name and directories say."""
    base = os.path.basename(path)
    parent = os.path.basename(os.path.dirname(path))
    grand = os.path.basename(os.path.dirname(os.path.dirname(path)))
    if m := _PLOG_NAME.match(base):
        dev = _DEVICE_DIR.match(parent) if base.startswith("device-") else None
        return "plog", None, int(m["pid"]), int(dev["device"]) if dev else None
    if base in ("stdout.log", "stderr.log") and parent.isdigit() and _ATTEMPT_DIR.match(grand):
        return "rank-file", int(parent), None, None
    return "stream", None, None, None


def _walk(root: str) -> list[str]:
    found: list[str] = []
    for top, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(top, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            if name.endswith(LOG_SUFFIXES):
                found.append(path)
                if len(found) > MAX_FILES:
                    raise ProvisionError(f"{root}: more than {MAX_FILES} log files; name the run's own directory")
    return found


def read_paths(paths: list[str]) -> list[Source]:
    """Every log under `paths` (files as given, directories walked), in the order given; bad input is refused."""
    if not paths:
        raise ProvisionError("name at least one LOG: a file (the launch output, a rank's log) or a directory (plogs)")
    files: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = _walk(p)
            if not found:
                raise ProvisionError(f"{p}: no log files in it (*.log, *.txt, *.out, *.err)")
            files += found
        elif os.path.isfile(p):
            files.append(p)
        elif os.path.exists(p):
            raise ProvisionError(f"{p}: not a regular file or a directory")
        else:
            raise ProvisionError(f"{p}: no such file or directory")
    budget = [MAX_TOTAL_BYTES]
    sources: list[Source] = []
    for path in dict.fromkeys(files):
        kind, rank, pid, device = _kind(path)
        raw, truncated = _read_text(path, budget)
        src = Source(path, kind, rank, pid, device, truncated=truncated)
        if kind == "plog":  # only ERROR lines are classified; the PID is the file's
            src.lines = [parse_line(t, len(sources), i + 1, plog=True) for i, t in enumerate(raw)
                         if t.startswith("[ERROR]")]
        else:
            src.lines = [parse_line(t, len(sources), i + 1) for i, t in enumerate(raw)]
        sources.append(src)
        if budget[0] <= 0:
            break
    resolve_times(sources)
    return sources


def from_lines(lines: list[str], name: str) -> Source:
    """A stream already in memory (a launch's container output)."""
    src = Source(name, "stream")
    src.lines = [parse_line(t, 0, i + 1) for i, t in enumerate(lines)]
    resolve_times([src])
    return src
