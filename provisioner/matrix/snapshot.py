"""The facts `matrix verify` and `matrix sync` check the matrix against.

Owns the three recorded snapshots under ``matrices/snapshots/`` and their
live equivalents:

* ``pypi.json`` - per project (torch-npu, torch, mindspore) and release, the
  Linux wheels on the index: their tags and, for torch-npu, the ``torch``
  requirement of each wheel's metadata. Only the fields the checks need.
* ``cann-images.json`` - the official CANN base-image tags: today's
  directory list of Ascend/cann-container-image and the tags its security-scan
  reports name (published earlier, dropped from the list since).
* ``source-extracts.json`` - the tables of the cited documents that a machine
  can read (torch_npu <-> torch <-> CANN pairings, torch <-> Python; the CANN
  <-> Ascend HDK tables of the CANN release notes, ``hdk``), so a citation can
  be checked to contain the value it supports.
* ``framework-names.json`` - per upstream repository and pinned commit, the
  names a job relies on there: the classes of its data-handler files and the
  paths of the scripts a job runs (read from the repository at that commit).
* ``env-reference.json`` - per launch variable the matrix knows (``audit_env``),
  the CANN environment-variable reference page read and what it says: the
  quoted range and default (per chip family where they differ) or the values;
  a variable whose page was not read says so (``unchecked`` and why).
* ``release-pins.json`` - per framework repository and commit, the version
  table of its release notes (MindSpeed-LLM ``docs/zh/release_notes_llm.md``):
  per release the CANN, torch, torch_npu, Python and package versions (e.g.
  triton-ascend) it is paired with, and ``notes`` (release -> key -> text, kept
  by hand) where another file of the repository said otherwise and which won.

``Facts`` holds them in one shape, whether read from the snapshots (offline,
the default) or from the index through the user's pip settings (``--online``).
``scripts/refresh_snapshots.py`` rewrites the files.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from provisioner.errors import ProvisionError
from provisioner.paths import data_path

SCHEMA = "provision.index-snapshot/1"
# project -> the requirement whose pin each wheel's metadata is read for (None: tags only)
PROJECTS = {"torch-npu": "torch", "torch": None, "mindspore": None}


def snapshot_path(name: str) -> str:
    return os.path.join(data_path("matrices"), "snapshots", name)


@dataclass(frozen=True)
class Wheel:
    tag: str  # python-abi-platform
    pythons: tuple[str, ...]
    arch: str  # x86_64, aarch64, or "any" (a pure or none-any wheel)
    pin: str | None = None  # normalised requirement text, "" when the wheel names no such requirement
    yanked: bool = False


@dataclass
class Facts:
    index: str
    taken: str
    origin: str  # "snapshot" or "online"
    projects: dict[str, dict[str, list[Wheel]]] = field(default_factory=dict)
    listed_tags: set = field(default_factory=set)
    scanned_tags: set = field(default_factory=set)
    image_sources: dict = field(default_factory=dict)
    extracts: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)
    registry_tags: set | None = None  # a registry's own tag list (verify --image-tags)
    names: dict = field(default_factory=dict)  # "owner/repo@commit" -> {"read", "classes", "files"}
    env_ref: dict = field(default_factory=dict)  # variable -> {"page", "read", "quote", "kind", ...} or {"unchecked"}
    release_pins: dict = field(default_factory=dict)  # "owner/repo@commit" -> {"read", "kind", "rows", "notes"}
    dates: dict = field(default_factory=dict)  # snapshot file -> the day its facts were read (YYYY-MM-DD)

    def releases(self, project: str) -> dict[str, list[Wheel]]:
        return self.projects.get(project, {})


def _wheel(tag: str, pin=None, yanked=False) -> Wheel | None:
    from provisioner.matrix.pypi import wheel_tags

    parsed = wheel_tags(f"x-0-{tag}.whl")
    if parsed is None or parsed.arch is None:
        return None
    return Wheel(tag, parsed.pythons, parsed.arch, pin, yanked)


def normalize_pin(requires_dist: list[str], name: str) -> str:
    """The requirement on `name` among Requires-Dist lines, normalised ("" if none)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    found = []
    for line in requires_dist:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(req.name) == canonicalize_name(name):
            spec = ",".join(sorted(str(s) for s in req.specifier))
            found.append(f"{canonicalize_name(req.name)}{spec}" + (f"; {req.marker}" if req.marker else ""))
    return " | ".join(sorted(set(found)))


# ------------------------------------------------------------------ snapshot I/O


def _read_json(name: str, what: str) -> dict:
    path = snapshot_path(name)
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except FileNotFoundError:
        raise ProvisionError(f"the recorded {what} is missing ({path}); run scripts/refresh_snapshots.py") from None
    except ValueError as exc:
        raise ProvisionError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ProvisionError(f"{path}: not a snapshot")
    return data


def load(online_index=None, progress=None) -> Facts:
    """Facts from the recorded snapshots; with `online_index` (a pypi.Index) the
    index part is read live instead."""
    images = _read_json("cann-images.json", "CANN image tag list")
    extracts = _read_json("source-extracts.json", "source extracts")
    if online_index is None:
        data = _read_json("pypi.json", "index snapshot")
        if data.get("schema") != SCHEMA:
            raise ProvisionError(f"{snapshot_path('pypi.json')}: unknown schema {data.get('schema')!r}")
        facts = Facts(index=data["index"], taken=data["taken"], origin="snapshot")
        for project, releases in data["projects"].items():
            facts.projects[project] = {
                version: [w for w in (_wheel(f["tag"], f.get("pin"), f.get("yanked", False)) for f in files) if w]
                for version, files in releases.items()
            }
    else:
        facts = read_index(online_index, progress=progress)
    names = _read_json("framework-names.json", "framework names")
    env_ref = _read_json("env-reference.json", "environment-variable reference")
    pins = _read_json("release-pins.json", "release-note version tables")
    facts.listed_tags = set(images["listed"]["tags"])
    facts.scanned_tags = set(images["scanned"]["tags"])
    facts.image_sources = {k: images[k]["source"] for k in ("listed", "scanned")}
    facts.extracts = extracts.get("sources", {})
    facts.names = names.get("sources", {})
    facts.env_ref = env_ref.get("variables", {})
    facts.release_pins = pins.get("sources", {})
    facts.dates = {"pypi.json": facts.taken if facts.origin == "snapshot" else None,
                   "cann-images.json": _day(images["listed"]["source"]),
                   "source-extracts.json": extracts.get("updated"), "framework-names.json": names.get("updated"),
                   "env-reference.json": env_ref.get("updated"), "release-pins.json": pins.get("updated")}
    return facts


def _day(text: str) -> str | None:
    """The first YYYY-MM-DD in a source line ("... @ c5a67b3a747b (2026-07-07): ...")."""
    import re

    m = re.search(r"\b(\d{4}-\d{2}-\d{2})\b", text or "")
    return m.group(1) if m else None


def read_index(index, keep=None, progress=None) -> Facts:
    """Facts from a live index (pypi.Index): file lists, and each torch-npu
    wheel's metadata (cached by sha256, so a second run reads only new wheels).
    `keep(project, version)` may drop releases (the snapshot script keeps torch
    lines the matrix knows)."""
    import datetime
    from concurrent.futures import ThreadPoolExecutor

    from provisioner.matrix.pypi import wheel_tags

    facts = Facts(index=index.url, taken=datetime.date.today().isoformat(), origin="online")
    for project, pin_of in PROJECTS.items():
        files = []
        for f in index.files(project):
            tags = wheel_tags(f.filename)
            if tags is None or tags.arch is None:
                continue  # sdists and wheels for other systems
            if keep is not None and not keep(project, tags.version):
                continue
            files.append((f, tags))
        pins: dict = {}
        if pin_of:
            todo = [f for f, _ in files]

            def meta(f, pin_of=pin_of):
                return f.filename, normalize_pin(index.metadata(f)["requires_dist"], pin_of)

            with ThreadPoolExecutor(max_workers=8) as pool:
                for n, (name, pin) in enumerate(pool.map(meta, todo), 1):
                    pins[name] = pin
                    if progress and (n % 50 == 0 or n == len(todo)):
                        progress(f"{project}: metadata of {n}/{len(todo)} wheels")
        releases: dict[str, list[Wheel]] = {}
        for f, tags in files:
            tag = f.filename[:-4].split("-", 2)[2]
            if tag.count("-") > 2:  # a build tag precedes the python tag
                tag = tag.split("-", 1)[1]
            releases.setdefault(tags.version, []).append(
                Wheel(tag, tags.pythons, tags.arch or "any", pins.get(f.filename), f.yanked))
        facts.projects[project] = releases
    facts.stats = dict(index.fetched)
    return facts


def index_json(facts: Facts) -> str:
    """The pypi.json text: stable order, one release per line, for readable diffs."""
    from provisioner.versions import V, VersionError

    def order(v):
        try:
            return (0, V(v).key)
        except VersionError:
            return (1, v)

    lines = ["{", f'  "schema": {json.dumps(SCHEMA)},', f'  "index": {json.dumps(facts.index)},',
             f'  "taken": {json.dumps(facts.taken)},', '  "projects": {']
    projects = sorted(facts.projects)
    for pn, project in enumerate(projects):
        lines.append(f"    {json.dumps(project)}: {{")
        releases = facts.projects[project]
        versions = sorted(releases, key=order)
        for vn, version in enumerate(versions):
            files = []
            for w in sorted(releases[version], key=lambda w: w.tag):
                item: dict[str, object] = {"tag": w.tag}
                if w.pin is not None:
                    item["pin"] = w.pin
                if w.yanked:
                    item["yanked"] = True
                files.append(item)
            comma = "," if vn < len(versions) - 1 else ""
            lines.append(f"      {json.dumps(version)}: {json.dumps(files, separators=(',', ':'))}{comma}")
        lines.append("    }" + ("," if pn < len(projects) - 1 else ""))
    lines += ["  }", "}", ""]
    return "\n".join(lines)


def write_atomic(path: str, text: str) -> None:
    """Write text to path via a temporary file in the same directory (never half-written)."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ProvisionError(f"cannot write {path}: {exc.strerror or exc}") from None


# ------------------------------------------------------------ source extracts


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _tables(markdown: str):
    """Every pipe table in a markdown text as (header cells, rows of cells)."""
    lines = markdown.splitlines()
    i = 0
    while i < len(lines) - 1:
        head, rule = lines[i].strip(), lines[i + 1].strip()
        if head.startswith("|") and rule.startswith("|") and set(rule.replace("|", "").strip()) <= set("-: "):
            rows = []
            i += 2
            while i < len(lines) and lines[i].strip().startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            yield _cells(head), rows
        else:
            i += 1


def extract_tables(markdown: str) -> dict:
    """The torch_npu pairing table(s) and the torch -> Python table of an
    Ascend/pytorch README or COMPATIBILITY file, as plain data.

    pairs: [wheel, branch, torch, cann] (a blank CANN cell repeats the one above);
    python: {torch version: "lo-hi"}."""
    import re

    pairs, python = [], {}
    for head, rows in _tables(markdown):
        low = [h.lower() for h in head]

        def col(*words, low=low):
            return next((n for n, h in enumerate(low) if all(w in h for w in words)), None)

        wheel = col("package version") if col("package version") is not None else col("extension version")
        branch, torch, cann = col("branch"), col("pytorch version"), col("cann")
        py = col("python version")
        if wheel is not None and branch is not None and torch is not None and cann is not None:
            last_cann = ""
            for r in rows:
                if len(r) <= max(wheel, branch, torch, cann):
                    continue
                cann_cell = r[cann].replace("CANN", "").strip() or last_cann
                last_cann = cann_cell
                version = re.sub(r"[（(].*$", "", r[wheel]).strip()
                if version:
                    pairs.append([version, r[branch], r[torch], cann_cell])
        elif torch is not None and py is not None:
            for r in rows:
                if len(r) <= max(torch, py):
                    continue
                m = re.search(r"\d+\.\d+(?:\.\d+)?", r[torch])
                minors = sorted({tuple(int(x) for x in v.split(".")) for v in re.findall(r"3\.\d+", r[py])})
                if m and minors:
                    python[m.group(0)] = f"{'.'.join(map(str, minors[0]))}-{'.'.join(map(str, minors[-1]))}"
    return {"pairs": pairs, "python": python}


def _html_rows(table: str) -> list[list[str]]:
    """The rows of one HTML table as lists of cell texts (th and td alike, tags stripped)."""
    import re

    rows = []
    for tr in re.findall(r"<tr[^>]*>(.*?)</tr>", table, flags=re.S | re.I):
        cells = re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", tr, flags=re.S | re.I)
        rows.append([" ".join(re.sub(r"<[^>]+>", " ", c).split()) for c in cells])
    return rows


def extract_hdk(markdown: str) -> dict:
    """The CANN <-> Ascend HDK tables of a CANN release note (hicann/release-management), as plain data.

    paired: {CANN: [HDK, ...]} from the version-mapping table (CANN | driver version);
    compatible: {CANN or "9.0.X": {HDK column ("25.0.X", "26.0.RC1/25.7.RC1"): true for Y, false for N}}."""
    import re

    paired: dict = {}
    compatible: dict = {}
    for table in re.findall(r"<table.*?</table>", markdown, flags=re.S | re.I):
        rows = [r for r in _html_rows(table) if r]
        if not rows or rows[0][0].upper() != "CANN":
            continue
        marks = [n for n, r in enumerate(rows) if len(r) > 1 and all(c in ("Y", "N") for c in r[1:])]
        if marks:
            width = len(rows[marks[0]]) - 1
            head = next((r for r in reversed(rows[:marks[0]]) if len(r) == width), None)
            if head is None:
                continue
            for n in marks:
                compatible[rows[n][0]] = {col: mark == "Y" for col, mark in zip(head, rows[n][1:], strict=True)}
            continue
        for r in rows[1:]:
            if len(r) == 2 and r[0] and r[1]:
                paired[r[0]] = [v.strip() for v in re.split(r"[,、/]", r[1]) if v.strip()]
    for head, rows in _tables(markdown):  # the pipe-table form of the 9.0.x notes: [CANN 9.0.0](...) | [Ascend HDK ...]<br>...
        if len(head) < 2 or "CANN" not in head[0] or "HDK" not in head[1]:
            continue
        for r in rows:
            if len(r) < 2:
                continue
            cann = _plain(r[0]).replace("CANN", "").strip()
            hdks = [_plain(v).replace("Ascend HDK", "").strip() for v in re.split(r"<br\s*/?>", r[1], flags=re.I)]
            if cann and any(hdks):
                paired[cann] = [h for h in hdks if h]
    return {"paired": paired, "compatible": compatible}


def _plain(cell: str) -> str:
    """Markdown link text and HTML stripped: "[CANN 9.0.0](https://...)" -> "CANN 9.0.0"."""
    import re

    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", cell)
    return " ".join(re.sub(r"<[^>]+>", " ", text).split())


# ------------------------------------------------------- release pins, env reference

# release-notes column header (lower case, spaces removed) -> the key a pin is recorded under
_PIN_COLUMNS = {"cann版本": "cann", "pytorch版本": "torch", "torchnpu版本": "torch_npu",
                "ascendextensionforpytorch版本": "torch_npu", "python版本": "python", "triton-ascend版本": "triton-ascend"}


def extract_release_pins(markdown: str, first: str = "mindspeed llm版本") -> dict:
    """The version table of a framework's release notes as {release: {key: version}}: the table whose first
    header cell is `first` (MindSpeed-LLM docs/zh/release_notes_llm.md "MindSpeed LLM软件版本配套表"); columns
    named in _PIN_COLUMNS; a release cell loses its note ("26.0.0（商用）" -> "26.0.0"); rows that name no
    version (master, 在研版本) are left out. Only the first such table is read."""
    import re

    out: dict = {}
    for head, rows in _tables(markdown):
        if not head or head[0].strip().lower() != first:
            continue
        cols = {n: _PIN_COLUMNS[h.lower().replace(" ", "")] for n, h in enumerate(head)
                if h.lower().replace(" ", "") in _PIN_COLUMNS}
        for r in rows:
            m = re.match(r"\s*(\d+(?:\.\d+)+)", r[0] if r else "")
            if not m:
                continue
            pins = {}
            for n, key in cols.items():
                v = re.search(r"\d+(?:\.[0-9A-Za-z]+)+", r[n]) if n < len(r) else None
                if v:
                    pins[key] = v.group(0)
            out[m.group(1)] = pins
        break  # the first such table pairs; a later one (版本兼容性) lists what each release also runs on
    return out


def extract_env(text: str) -> dict:
    """What a CANN environment-variable page says of its value, as far as a pattern can read it: the first
    range ("取值范围[120,7200]", "取值范围为:(0, 17340]", "ranges from [0, 255]", "ranging from 5 to 20"), the
    default ("默认值为120", "默认值：4", "The default value is 132"), and the sentence holding them (`quote`).
    An open lower bound "(0, N]" is read as 1. Empty when the page states neither."""
    import re

    flat = " ".join(text.split())
    out: dict = {}
    m = (re.search(r"取值范围[为是]?[：:]?\s*([\[(])\s*(-?\d+)\s*[,，]\s*(-?\d+)\s*\]", flat)
         or re.search(r"rang\w* from ([\[(])\s*(-?\d+)\s*,\s*(-?\d+)\s*\]", flat))
    if m:
        lo = int(m.group(2)) + (1 if m.group(1) == "(" else 0)
        out.update(min=lo, max=int(m.group(3)))
    else:
        m = re.search(r"rang\w* from (-?\d+) to (-?\d+)", flat)
        if m:
            out.update(min=int(m.group(1)), max=int(m.group(2)))
    d = (re.search(r"(?:默认值|缺省值)[为是]?[：:]?\s*[“\"]?([0-9A-Za-z_.]+)", flat)
         or re.search(r"[Tt]he default value is [“\"]?([0-9A-Za-z_.]+?)[”\"]?[.,;]?(?:\s|$)", flat))
    if d:
        out["default"] = d.group(1)
    hits = [x for x in (m, d) if x]
    if hits:
        start = max(flat.rfind("。", 0, hits[0].start()) + 1, flat.rfind(". ", 0, hits[0].start()) + 1, 0)
        end = max(x.end() for x in hits)
        stop = [i for i in (flat.find("。", end), flat.find(". ", end)) if i >= 0]
        out["quote"] = flat[start:(min(stop) + 1 if stop else len(flat))].strip()
    return out
