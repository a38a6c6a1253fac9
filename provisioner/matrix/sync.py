"""`provision matrix sync`: what the index has that the matrix lacks, as a draft overlay.

Owns the comparison and the draft. New torch_npu releases become rows derived
from their wheel metadata (torch from the ``torch`` requirement, Python from
the wheel tags per architecture, a ``torch_pin`` where the pin differs from
the line's rule); new MindSpore releases become rows with the Python of their
wheels. Neither names its CANN, so each row takes the CANN of its closest
relative in the matrix (the newest table-paired wheel of the same torch line,
the previous MindSpore release) and is marked ``pairing: unconfirmed`` until a
source pairs it: the resolver accepts such rows with a warning, so a user is
not blocked waiting for a release of this tool. Rows the matrix has for wheels
on the index but with no CANN (no stack can use them) get a pairing row drafted
the same way, or from the newest CANN in their TorchNPU release's range where
the row names a release that has one. Existing rows whose release
gained wheels for new Python versions get an override row. New torch releases
are listed for information.

The draft is checked by loading it as an overlay of the matrix before it is
written (atomically): what sync writes always loads.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from provisioner.arch import ARCHES
from provisioner.errors import ProvisionError
from provisioner.matrix.snapshot import Facts, write_atomic
from provisioner.matrix.verify import minors, range_text, version_key
from provisioner.versions import V, VersionError, any_match, sort_versions

SCHEMA = "provision.matrix-sync/1"


@dataclass
class Finding:
    kind: str  # torch_npu | pairing | mindspore | torch | python
    version: str
    detail: str
    row: dict | None = None


@dataclass
class SyncReport:
    facts: dict
    findings: list[Finding] = field(default_factory=list)
    written: str | None = None

    def as_json(self) -> dict:
        return {"schema": SCHEMA, "facts": self.facts, "written": self.written,
                "new": [{"kind": f.kind, "version": f.version, "detail": f.detail, "row": f.row}
                        for f in self.findings]}


def _pythons(wheels) -> dict[str, set]:
    anywhere = {p for w in wheels if w.arch == "any" for p in w.pythons}
    return {a: {p for w in wheels if w.arch == a for p in w.pythons} | anywhere for a in ARCHES}


def _known(rows, field_name) -> set:
    return {version_key(r[field_name]) for r in rows}


def _pin_version(pins: set[str]) -> str | None:
    import re

    for pin in sorted(pins):
        m = re.search(r"==\s*([0-9][0-9a-zA-Z.]*?)(?:\.\*|\+[0-9a-zA-Z.]+)?(?:$|[,;\s|])", pin)
        if m:
            return m.group(1)
    return None


class Syncer:
    def __init__(self, matrix, facts: Facts):
        self.m = matrix
        self.f = facts
        self.source = f"{facts.index} (wheel tags and metadata, {facts.taken}; drafted by provision matrix sync)"
        self.report = SyncReport(facts={"origin": facts.origin, "index": facts.index, "taken": facts.taken})

    def _ranged(self, version: str, pythons: dict[str, set]) -> dict:
        row: dict = {}
        union = pythons["x86_64"] | pythons["aarch64"]
        row["python"] = range_text(union)
        for arch in ARCHES:
            if pythons[arch] != union and pythons[arch]:
                row.setdefault("wheels", {})[arch] = range_text(pythons[arch])
        if "," in row["python"]:  # a gap: keep the contiguous ends, say so
            row["python"] = f"{sort_versions(union)[0]}-{sort_versions(union)[-1]}"
        return row

    def torch_npu(self):
        from provisioner.matrix.fields import with_torch
        from provisioner.matrix.snapshot import normalize_pin

        known = _known(self.m.rows("torch_npu"), "wheel")
        for version, wheels in sorted(self.f.releases("torch-npu").items(), key=lambda i: version_key(i[0])):
            if version_key(version) in known:
                continue
            try:
                v = V(version)
            except VersionError:
                continue
            pins = {w.pin for w in wheels if w.pin}
            torch = _pin_version(pins) or ".".join(str(n) for n in v.release[:3])
            row = {"wheel": version, "torch": torch, **self._ranged(version, _pythons(wheels)),
                   "on_pypi": True, "in_table": False}
            for arch in ARCHES:
                mine = {w.pin or "" for w in wheels if w.arch == arch}
                if not mine:
                    continue
                try:
                    rule = with_torch(self.m.torch_wheel_rule(arch, torch)["pin"], torch)
                    expected = normalize_pin([rule], "torch")
                except Exception:
                    expected = None
                if mine != {expected}:
                    found = sorted(mine)[0]
                    row.setdefault("torch_pin", {})[arch] = found.replace(torch, "{torch}") if found else "none"
            detail = f"{len(wheels)} wheels, torch {torch}, Python {row['python']}"
            derived = self._cann_for(version, torch, None)
            if derived:
                row.update({"cann": derived[0], "pairing": "unconfirmed", "notes": derived[1]})
                detail += f"; CANN {derived[0]} unconfirmed"
            row["source"] = self.source
            self.report.findings.append(Finding("torch_npu", version, detail, row))

    def _table(self) -> list[dict]:
        return [r for r in self.m.rows("torch_npu") if r.get("cann") and (r.get("pairing") or (
            "derived" if r.get("cann_inferred") else "table")) == "table"]

    def _cann_for(self, wheel: str, torch: str, product: str | None) -> tuple[str, str] | None:
        """The CANN a wheel no source pairs is drafted with, and the note saying how: the newest final CANN of
        the matrix in its TorchNPU release's range where the row names a release that has one, else that of
        its closest relative (the newest table-paired wheel of its torch line, else of any line)."""
        release = self.m.release(product) if product else None
        compat = (release or {}).get("cann_compatible") or []
        in_range = [c["version"] for c in self.m.rows("cann") if V(c["version"]).is_final
                    and any_match(compat, c["version"])]
        if in_range:
            cann = sort_versions(in_range)[-1]
            return cann, (f"drafted from the index: CANN {cann} is the newest CANN of the matrix in TorchNPU"
                          f" {product}'s compatible range ({', '.join(compat)}); no source pairs {wheel} yet")
        table = self._table()
        same_line = [r for r in table if V(r["torch"]).minor() == V(torch).minor()]
        relative = max(same_line or table, key=lambda r: V(r["wheel"]).key, default=None)
        if relative is None:
            return None
        how = "the same torch line" if same_line else "the newest release (a new torch line)"
        return relative["cann"], (f"drafted from the index: CANN {relative['cann']} is that of torch_npu"
                                  f" {relative['wheel']}, the newest table-paired wheel of {how}; no source pairs"
                                  f" {wheel} yet")

    def pairings(self):
        """Rows of wheels on the index with no CANN: a stack can use them only with a pairing, drafted here."""
        releases = {version_key(v): w for v, w in self.f.releases("torch-npu").items()}
        finals = {V(r["wheel"]).release for r in self.m.rows("torch_npu") if V(r["wheel"]).is_final}
        for row in self.m.rows("torch_npu"):
            wheels = releases.get(version_key(row["wheel"]))
            if row.get("cann") or not row.get("on_pypi") or not wheels:
                continue  # paired already, or not installable from the index: nothing a pairing would unlock
            if not V(row["wheel"]).is_final and V(row["wheel"]).release in finals:
                continue  # a release candidate the matrix has the release of: no one needs it in a stack
            derived = self._cann_for(row["wheel"], row["torch"], row.get("product"))
            if derived is None:
                continue
            cann, how = derived
            patch = {"wheel": row["wheel"], "cann": cann, "pairing": "unconfirmed",
                     "notes": f"{how}; {row.get('notes', '')}".rstrip("; "),
                     "source": [*row.get("source", []), self.source]}
            self.report.findings.append(Finding(
                "pairing", row["wheel"], f"in the matrix with {len(wheels)} wheels on the index but no CANN"
                f" pairing, so no stack uses it; CANN {cann} unconfirmed", patch))

    def mindspore(self):
        rows = self.m.rows("mindspore")
        known = _known(rows, "version")
        oldest = min((V(r["version"]) for r in rows), key=lambda v: v.key, default=None)
        for version, wheels in sorted(self.f.releases("mindspore").items(), key=lambda i: version_key(i[0])):
            if version_key(version) in known:
                continue
            try:
                v = V(version)
            except VersionError:
                continue
            if oldest is not None and v < oldest:
                continue  # older than the matrix covers
            final = next((r for r in rows if not v.is_final and V(r["version"]).release == v.release), None)
            older = [r for r in rows if V(r["version"]) < v]
            relative = final or max(older, key=lambda r: V(r["version"]).key, default=None)
            if relative is None:
                continue
            what = "the release it is a candidate for" if final else "the previous release"
            row = {"version": version, "cann": relative["cann"], **self._ranged(version, _pythons(wheels)),
                   "on_pypi": True, "pairing": "unconfirmed"}
            row.pop("wheels", None)  # the mindspore section has no per-arch field
            row["notes"] = (f"drafted from the index: CANN {relative['cann']} is that of MindSpore"
                            f" {relative['version']}, {what}; no source pairs {version} yet")
            row["source"] = self.source
            self.report.findings.append(Finding(
                "mindspore", version, f"{len(wheels)} wheels, Python {row['python']}; CANN {relative['cann']}"
                " unconfirmed", row))

    def python_tags(self):
        for section, project, key in (("torch_npu", "torch-npu", "wheel"), ("mindspore", "mindspore", "version")):
            releases = {version_key(v): w for v, w in self.f.releases(project).items()}
            for row in self.m.rows(section):
                wheels = releases.get(version_key(row[key]))
                if not wheels or not row.get("python"):
                    continue
                union = _pythons(wheels)["x86_64"] | _pythons(wheels)["aarch64"]
                new = union - minors(row["python"])
                if not new or not all(V(n) > V(max(minors(row["python"]), key=lambda s: V(s).key)) for n in new):
                    continue  # only wheels for newer Pythons are "new tags"; anything else is verify's business
                patch = {key: row[key], "python": range_text(union | minors(row["python"])),
                         "notes": f"wheels for Python {', '.join(sort_versions(new))} appeared on the index"
                                  f" ({self.f.taken}); {row.get('notes', '')}".rstrip("; "),
                         "source": [*row.get("source", []), self.source]}
                self.report.findings.append(Finding("python", row[key],
                                                    f"{section}: new wheels for Python {', '.join(sort_versions(new))}",
                                                    patch))

    def torch(self):
        lines = [V(r["version"]) for r in self.m.rows("torch")]
        top = max(lines, key=lambda v: v.key, default=None)
        new: dict[tuple, list] = {}
        for version, wheels in self.f.releases("torch").items():
            try:
                v = V(version)
            except VersionError:
                continue
            if top is not None and v.is_final and v.minor() > top.minor():
                new.setdefault(v.minor(), []).append((v, wheels))
        for minor, releases in sorted(new.items()):
            releases.sort(key=lambda item: item[0].key)
            latest, wheels = releases[-1]
            builds = sort_versions(r["wheel"] for r in self.m.rows("torch_npu") if V(r["torch"]).minor() == minor)
            pys = _pythons(wheels)["aarch64"]
            self.report.findings.append(Finding(
                "torch", ", ".join(str(v) for v, _ in releases),
                f"torch {minor[0]}.{minor[1]} is newer than every torch line in the matrix (Python {range_text(pys)}"
                f" on aarch64); torch_npu builds for it: {', '.join(builds) or 'none yet'}"))

    def run(self) -> SyncReport:
        self.torch_npu()
        self.pairings()
        self.mindspore()
        self.python_tags()
        self.torch()
        return self.report


def _yaml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a YAML double-quoted scalar


def _combined(old: dict | None, new: dict) -> dict:
    """Two patches of one row (a pairing and new Python tags): one row, both notes, each source once."""
    if old is None:
        return dict(new)
    out = {**old, **new}
    if old.get("notes") and new.get("notes") and old["notes"] != new["notes"]:
        out["notes"] = f"{old['notes']}; {new['notes']}"
    if "source" in old and "source" in new:
        listed = [src for part in (old["source"], new["source"]) for src in (part if isinstance(part, list) else [part])]
        out["source"] = list(dict.fromkeys(listed))
    return out


def render(report: SyncReport) -> str:
    lines = [f"# Draft matrix overlay written by `provision matrix sync` from {report.facts['index']}",
             f"# ({'live index' if report.facts['origin'] == 'online' else 'recorded snapshot'} of {report.facts['taken']}).",
             "# Rows marked `pairing: unconfirmed` take the CANN of their closest relative in the matrix (or",
             "# of their TorchNPU release's range); their notes say which;",
             "# no source pairs them yet, so stacks built on them carry a warning. Review the rows, then",
             "# use the file with --matrix FILE (or PROVISION_MATRIX=FILE).", ""]
    sections: dict[str, dict] = {"torch_npu": {}, "mindspore": {}}
    for f in report.findings:
        if f.row is None:
            continue
        section = "mindspore" if (f.kind == "mindspore" or "version" in f.row) else "torch_npu"
        key = version_key(f.row["version" if section == "mindspore" else "wheel"])
        sections[section][key] = _combined(sections[section].get(key), f.row)  # one row per wheel in a file
    for section, rows in sections.items():
        if not rows:
            continue
        lines.append(f"{section}:")
        for row in rows.values():
            first = True
            for key, value in row.items():
                lines.append(f"{'  - ' if first else '    '}{key}: {_yaml_value(value)}")
                first = False
        lines.append("")
    return "\n".join(lines)


def sync(matrix, facts: Facts, output: str | None, overlays: list | None = None) -> SyncReport:
    """Compare, and write the draft overlay to `output` (None: list only)."""
    report = Syncer(matrix, facts).run()
    if output and any(f.row for f in report.findings):
        text = render(report)
        directory = os.path.dirname(os.path.abspath(output))
        if not os.path.isdir(directory):
            raise ProvisionError(f"{output}: directory {directory} does not exist")
        _check_loads(text, directory, overlays)
        write_atomic(output, text)
        report.written = output
    return report


def _check_loads(text: str, directory: str, overlays: list | None) -> None:
    """The draft must load as an overlay of this matrix; never write one that does not."""
    import tempfile

    from provisioner.errors import MatrixError
    from provisioner.matrix import loader

    fd, path = tempfile.mkstemp(suffix=".yaml", dir=directory, prefix=".matrix-sync-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        loader.load([*(overlays or []), path], use_cache=False)
    except MatrixError as exc:
        raise ProvisionError(f"the drafted overlay does not load ({exc}); nothing written") from None
    finally:
        os.unlink(path)

