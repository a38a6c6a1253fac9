"""`provision matrix verify`: every checkable claim of the matrix against the facts.

Owns the checks and their report. A claim is one statement a row makes that a
recorded or live fact can confirm or refute:

* torch_npu / MindSpore rows: ``on_pypi`` against the index, the Python range
  (``python``, or ``wheels`` per architecture) against the published wheel tags
  of each Linux architecture, and for torch_npu the ``torch`` requirement in
  every wheel's metadata against the row's torch and the ``torch_wheels`` rule
  of its torch line (or the row's ``torch_pin``);
* pairings: a CANN pairing marked ``table`` must cite a table or release note,
  and every cited source whose tables were extracted must contain the row's
  wheel, branch, torch and CANN (``torch`` rows: the Python range); a
  ``derived`` pairing must follow its rule (the CANN its TorchNPU release is
  paired with); ``unconfirmed`` rows are listed, not failed;
* images: listed tags must be in today's tag list; ``listed: false`` rows must
  not be, and those citing the scan reports must be named by them; every tag of
  today's list (of a CANN the matrix knows) and every tag the scan reports name
  must be a row's;
* sources: every ``source:`` item is a defined id, a URL, or a repository
  reference, and every id defined is used;
* driver ranges against the release notes' HDK tables, job handler and script
  names against the pinned framework files, launch-variable ranges against the
  CANN environment-variable reference, framework sets and their lock pins
  against the sets' release notes, snapshot ages
  (provisioner/matrix/verify_claims.py).

Each claim carries the evidence that decided it. Facts come from
provisioner/matrix/snapshot.py (recorded, or live with ``--online``).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from provisioner.versions import PyRange, V, VersionError, sort_versions

SCHEMA = "provision.matrix-verify/1"
PAIRING_KINDS = ("table", "release-notes", "docs")
ID = re.compile(r"[A-Z][A-Z0-9-]*")
URL = re.compile(r"https?://\S+")
PATH = re.compile(r"[\w.-]+/[\w./<>-]+|\b[\w-]+\.(?:md|toml|ya?ml|py|txt|go|json|html|js|sh|cpp|h)\b")
UNIDENTIFIED = re.compile(r"source not identified|unidentified", re.I)


@dataclass
class Claim:
    check: str
    subject: str
    field: str
    claimed: str
    found: str
    evidence: str
    at: str
    status: str = "ok"  # ok | mismatch | note | unchecked (no fact recorded to check it against)


@dataclass
class Report:
    facts: dict
    claims: list[Claim] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)  # snapshots older than verify_claims.STALE_DAYS

    @property
    def mismatches(self) -> list[Claim]:
        return [c for c in self.claims if c.status == "mismatch"]

    @property
    def checked(self) -> int:
        return sum(1 for c in self.claims if c.status in ("ok", "mismatch"))

    def counts(self) -> dict:
        out: dict = {}
        for c in self.claims:
            out.setdefault(c.check, {"ok": 0, "mismatch": 0, "note": 0, "unchecked": 0})[c.status] += 1
        return out

    def as_json(self) -> dict:
        return {"schema": SCHEMA, "facts": self.facts, "checked": self.checked,
                "mismatches": len(self.mismatches), "unchecked": sum(1 for c in self.claims if c.status == "unchecked"),
                "by_check": self.counts(), "stale_snapshots": self.stale,
                "claims": [asdict(c) for c in self.claims if c.status != "ok"]}


def version_key(text: str):
    try:
        return V(text).key
    except VersionError:
        return text


def minors(rng: str | None) -> set[str]:
    """The Python minor versions a range covers ("3.9-3.11" -> {"3.9", "3.10", "3.11"})."""
    if not rng:
        return set()
    r = PyRange(rng)
    if r.lo[0] != r.hi[0]:
        raise ValueError(f"Python range {rng!r} spans major versions")
    return {f"{r.lo[0]}.{n}" for n in range(r.lo[1], r.hi[1] + 1)}


def range_text(versions) -> str:
    """{"3.9", "3.10", "3.11"} -> "3.9-3.11"; a set with gaps is listed."""
    items = sort_versions(versions)
    if not items:
        return "none"
    text = f"{items[0]}-{items[-1]}" if len(items) > 1 else items[0]
    try:
        return text if minors(text) == set(items) else ", ".join(items)
    except (ValueError, VersionError):  # "py3" wheels, or a set across major versions
        return ", ".join(items)


def _tags_summary(wheels) -> str:
    by_arch: dict = {}
    for w in wheels:
        by_arch.setdefault(w.arch, set()).update(w.pythons)
    return "; ".join(f"{a} py {range_text(p)}" for a, p in sorted(by_arch.items()))


class Verifier:
    def __init__(self, matrix, facts):
        self.m = matrix
        self.f = facts
        self.report = Report(facts={"origin": facts.origin, "index": facts.index, "taken": facts.taken,
                                    "images": facts.image_sources, "layers": matrix.layers})
        self.kinds = {r["id"]: r.get("kind") for r in matrix.rows("sources")}
        self.index_note = f"{'live index' if facts.origin == 'online' else 'index snapshot ' + facts.taken} {facts.index}"

    def add(self, check, subject, fld, claimed, found, evidence, at, ok=True, note=False, unchecked=False):
        status = "unchecked" if unchecked else "note" if note else ("ok" if ok else "mismatch")
        self.report.claims.append(Claim(check, subject, fld, str(claimed), str(found), evidence, at, status))

    def release(self, project: str, version: str):
        want = version_key(version)
        for v, wheels in self.f.releases(project).items():
            if version_key(v) == want:
                return v, wheels
        return None, []

    # ---------------------------------------------------------------- index

    def presence(self, project: str, section: str, row: dict, version: str):
        found, wheels = self.release(project, version)
        subject = f"{section} {version}"
        on_index = found is not None
        if on_index:
            evidence = f"{len(wheels)} Linux wheels of {found}: {_tags_summary(wheels)} ({self.index_note})"
        else:
            near = [v for v in self.f.releases(project) if V(v).release[:3] == V(version).release[:3]]
            evidence = (f"no release {version} of {project} ({self.index_note}; same line there: "
                        f"{', '.join(sort_versions(near)) or 'none'})")
        self.add("presence", subject, "on_pypi", row["on_pypi"], on_index, evidence, row["_at"],
                 ok=row["on_pypi"] == on_index)
        return wheels if on_index else None

    def pythons(self, section: str, row: dict, version: str, wheels, fallback: str | None, fallback_from: str):
        per_arch: dict[str, set] = {}
        anywhere = {p for w in wheels if w.arch == "any" for p in w.pythons}
        for arch in ("x86_64", "aarch64"):
            per_arch[arch] = {p for w in wheels if w.arch == arch for p in w.pythons} | anywhere
        declared = row.get("wheels") or {}
        claimed_default = row.get("python") or fallback
        where = "python" if row.get("python") else fallback_from
        for arch, published in per_arch.items():
            claimed = declared.get(arch) or claimed_default
            fld = f"wheels.{arch}" if arch in declared else where
            have = minors(claimed)
            if not claimed:
                self.add("python", f"{section} {version}", fld, "none", range_text(published),
                         f"{arch}: wheels published for Python {range_text(published)}; the row states no range",
                         row["_at"], ok=False)
                continue
            self.add("python", f"{section} {version}", fld, claimed, range_text(published),
                     f"{arch}: wheels for Python {range_text(published)} ({self.index_note})", row["_at"],
                     ok=have == published)

    def torch_pins(self, row: dict, wheels):
        from provisioner.matrix.fields import with_torch
        from provisioner.matrix.snapshot import normalize_pin

        for arch in ("x86_64", "aarch64"):
            mine = [w for w in wheels if w.arch == arch]
            if not mine:
                continue
            override = (row.get("torch_pin") or {}).get(arch)
            try:
                rule = self.m.torch_wheel_rule(arch, row["torch"])
            except Exception as exc:  # no rule for this line
                self.add("torch-pin", f"torch_npu {row['wheel']}", f"torch_wheels ({arch})", "a rule", "none",
                         str(exc), row["_at"], ok=False)
                continue
            pattern = override or rule["pin"]
            expected = "" if pattern == "none" else normalize_pin([with_torch(pattern, row["torch"])], "torch")
            seen: dict[str, list[str]] = {}
            for w in mine:
                seen.setdefault(w.pin or "", []).extend(w.pythons)
            bad = {pin: py for pin, py in seen.items() if pin != expected}
            source = f"torch_pin.{arch} of the row" if override else f"torch_wheels rule {rule['id']}"
            found = "; ".join(f"{pin or 'no torch requirement'} (py {range_text(py)})" for pin, py in sorted(seen.items()))
            self.add("torch-pin", f"torch_npu {row['wheel']}", f"torch {row['torch']} ({arch})",
                     expected or "no torch requirement", found,
                     f"Requires-Dist of the {arch} wheels' METADATA; expected from {source}", row["_at"],
                     ok=not bad)

    # -------------------------------------------------------------- pairings

    def pairing(self, section: str, row: dict, subject: str):
        kind = row.get("pairing") or ("derived" if row.get("cann_inferred") else "table")
        sources = row.get("source", [])
        if kind == "unconfirmed":
            self.add("pairing", subject, "pairing", "unconfirmed", "-",
                     f"CANN {row.get('cann')} drafted without a source pairing it ({row.get('notes', '')})".strip(),
                     row["_at"], note=True)
            return
        if kind == "table":
            backing = [s for s in sources if self.kinds.get(s) in PAIRING_KINDS]
            self.add("pairing", subject, "cann", row.get("cann"), ", ".join(backing) or "no pairing source",
                     "a table pairing must cite a compatibility table, release note or install doc"
                     " (sources of kind " + "/".join(PAIRING_KINDS) + "); otherwise mark it pairing: derived",
                     row["_at"], ok=bool(backing))
            return
        if section != "torch_npu":
            self.add("pairing", subject, "pairing", kind, "-", row.get("notes") or "derived without notes",
                     row["_at"], ok=bool(row.get("notes")))
            return
        product = row.get("product")
        paired = {r["cann"] for r in self.m.rows("torch_npu") if r.get("product") and product
                  and version_key(r["product"]) == version_key(product) and r.get("cann")
                  and (r.get("pairing") or ("derived" if r.get("cann_inferred") else "table")) == "table"}
        ok = bool(product) and bool(row.get("notes")) and any(version_key(c) == version_key(row["cann"]) for c in paired)
        self.add("derived", subject, "cann", row["cann"], ", ".join(sort_versions(paired)) or "no table row",
                 f"derived from TorchNPU {product}: the CANN its table rows pair with; the notes must say how the"
                 f" wheel belongs to that release ({(row.get('notes') or 'no notes')[:120]})", row["_at"], ok=ok)

    def citations(self, row: dict):
        for src in row.get("source", []):
            ext = self.f.extracts.get(src)
            if not ext or not ext.get("pairs"):
                continue
            hit = next((p for p in ext["pairs"] if version_key(p[0]) == version_key(row["wheel"])), None)
            subject = f"torch_npu {row['wheel']}"
            if hit is None:
                self.add("citation", subject, "source", src, "no such row",
                         f"{src} ({ext['read']}) has no row for torch_npu {row['wheel']}", row["_at"], ok=False)
                continue
            wheel, branch, torch, cann = hit
            diffs = []
            if row.get("branch") and row["branch"].lower() != branch.lower():
                diffs.append(f"branch {branch}")
            if version_key(torch) != version_key(row["torch"]):
                diffs.append(f"torch {torch}")
            if row.get("cann") and version_key(cann) != version_key(row["cann"]):
                diffs.append(f"CANN {cann}")
            self.add("citation", subject, "source", src, f"{branch} / torch {torch} / CANN {cann}",
                     f"{src} ({ext['read']}) pairs {wheel} with " + (", ".join(diffs) if diffs else "the same values"),
                     row["_at"], ok=not diffs)

    # ------------------------------------------------------------- sections

    def torch_npu(self):
        for row in self.m.rows("torch_npu"):
            wheels = self.presence("torch-npu", "torch_npu", row, row["wheel"])
            if wheels:
                self.pythons("torch_npu", row, row["wheel"], wheels, self.m.torch_python(row["torch"]),
                             "python (of the torch line)")
                self.torch_pins(row, wheels)
            if row.get("cann"):
                self.pairing("torch_npu", row, f"torch_npu {row['wheel']}")
            self.citations(row)

    def mindspore(self):
        for row in self.m.rows("mindspore"):
            wheels = self.presence("mindspore", "mindspore", row, row["version"])
            if wheels:
                self.pythons("mindspore", row, row["version"], wheels, None, "python")
            self.pairing("mindspore", row, f"mindspore {row['version']}")

    def torch_lines(self):
        for row in self.m.rows("torch"):
            subject = f"torch {row['version']}"
            for src in row.get("source", []):
                ext = self.f.extracts.get(src)
                if not ext or "python" not in ext:
                    continue
                value = next((v for k, v in ext["python"].items() if version_key(k) == version_key(row["version"])), None)
                others = [ (self.f.extracts.get(s) or {}).get("python", {}) for s in row["source"] if s != src]
                agrees = value is not None and minors(value) == minors(row["python"])
                backed = agrees or any(minors(o.get(row["version"])) == minors(row["python"]) for o in others if o)
                if value is None:
                    self.add("citation", subject, "source", src, "no such row",
                             f"{src} ({ext['read']}) has no Python row for torch {row['version']}: the citation does"
                             " not contain the value it supports", row["_at"], ok=False)
                else:
                    self.add("citation", subject, "python", row["python"], value,
                             f"{src} ({ext['read']}) gives Python {value}", row["_at"], ok=agrees or backed)
            _, wheels = self.release("torch", row["version"])
            if wheels:
                published = {p for w in wheels if w.arch == "aarch64" for p in w.pythons}
                missing = minors(row["python"]) - published
                self.add("python", subject, "python", row["python"], range_text(published),
                         f"torch {row['version']} aarch64 wheels on the index: Python {range_text(published)}"
                         f" ({self.index_note})", row["_at"], ok=not missing)

    def images(self):
        for row in self.m.rows("images"):
            listed = row.get("listed", True)
            cites_scan = any(self.kinds.get(s) == "images" for s in row["source"])
            for tag in row["tags"]:
                full = f"{row['cann']}-{tag}"
                subject = f"image {full}"
                if self.f.registry_tags is not None:
                    there = full in self.f.registry_tags
                    self.add("image", subject, "in registry", True, there, "the registry tag list given with"
                             " --image-tags", row["_at"], ok=there)
                in_list = full in self.f.listed_tags
                if listed:
                    self.add("image", subject, "listed", True, in_list,
                             f"today's list: {self.f.image_sources.get('listed')}", row["_at"], ok=in_list)
                    continue
                self.add("image", subject, "listed", False, in_list,
                         f"today's list: {self.f.image_sources.get('listed')}", row["_at"], ok=not in_list)
                if cites_scan:
                    scanned = full in self.f.scanned_tags
                    self.add("image", subject, "scanned", True, scanned,
                             f"scan reports: {self.f.image_sources.get('scanned')}", row["_at"], ok=scanned)
        known = {f"{r['cann']}-{t}" for r in self.m.rows("images") for t in r["tags"]}
        cann_known = {r["cann"].lower() for r in self.m.rows("images")}
        for tag in sorted(self.f.listed_tags - known):
            cann = tag.split("-")[0]
            if cann.lower() in cann_known:
                self.add("image", f"image {tag}", "tags", "absent", "listed",
                         f"today's list has it: {self.f.image_sources.get('listed')}", "matrices/images.yaml", ok=False)
        for tag in sorted(self.f.scanned_tags - known):
            self.add("image", f"image {tag}", "tags", "absent", "scanned",
                     f"the scan reports name it: {self.f.image_sources.get('scanned')}; add it (listed: false, "
                     "source CCI-SCAN; a pre-release CANN as a status alpha/beta row)", "matrices/images.yaml",
                     ok=False)

    def sources(self):
        ids = {r["id"] for r in self.m.rows("sources")}
        used: set = set()
        for problem in self.m.problems:
            self.add("source", f"{problem['section']} {problem['key']}", "source", problem["source"], "undefined",
                     "dangling source id: not defined under 'sources:'" + _near(problem["source"], ids),
                     problem["at"], ok=False)
        for section, rows in self.m.data.items():
            if section == "policy" or not isinstance(rows, list):
                continue
            for row in rows:
                for src in row.get("source", []):
                    if ID.fullmatch(src):
                        used.add(src)
                        if src in ids:
                            self.add("source", f"{section} row", "source", src, "defined", "sources.yaml", row["_at"])
                        continue
                    if UNIDENTIFIED.search(src):
                        self.add("source", f"{section} row", "source", src, "declared unidentified",
                                 "the row says its source is not identified", row["_at"], note=True)
                        continue
                    ok = bool(URL.search(src) or PATH.search(src))
                    self.add("source", f"{section} row", "source", src, "reference" if ok else "unresolvable",
                             "a free-text source must name a URL, or a repository and a file in it" + _near(src, ids),
                             row["_at"], ok=ok)
        for ident in sorted(ids - used):
            self.add("source", f"source {ident}", "id", ident, "unused", "no row cites it", "matrices/sources.yaml",
                     note=True)

    def run(self, today=None) -> Report:
        from provisioner.matrix import verify_claims

        self.sources()
        self.torch_npu()
        self.mindspore()
        self.torch_lines()
        self.images()
        verify_claims.hdk(self)
        verify_claims.job_names(self)
        verify_claims.env_ranges(self)
        verify_claims.lock_pins(self)
        self.report.stale = verify_claims.ages(self, today)
        return self.report


def _near(text: str, ids) -> str:
    import difflib

    close = difflib.get_close_matches(text.upper(), sorted(ids), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def verify(matrix, facts, today=None) -> Report:
    return Verifier(matrix, facts).run(today)
