"""Load the compatibility matrix: shipped YAML + user overlays, validated.

Layers, later ones winning: ``matrices/*.yaml`` shipped with the package, then
each path in ``PROVISION_MATRIX`` (os.pathsep-separated), then ``--matrix``
paths. A path is a YAML file or a directory of them. Within one layer a key may
appear once (an ``images`` row's key is its CANN plus whether it is ``listed``: a
CANN's listed tags and its tags published earlier are two rows); a later layer replaces the fields it names in a row with the same
key, adds new rows, or drops a row (``remove: true``).

The validated result is cached as JSON (keyed by the files' sizes and mtimes),
so a warm ``provision resolve`` never imports PyYAML.
"""

from __future__ import annotations

import os
import re
from functools import cached_property

from provisioner.errors import MatrixError
from provisioner.matrix import cache
from provisioner.paths import data_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from provisioner.shapes import Image

VERSION_KEYED = {"cann", "hdk", "firmware", "torch_npu_releases", "torch_npu", "torch", "mindspore"}
IMAGE_TAG = re.compile(r"^(?P<chip>[0-9a-z]+)-(?P<os>[a-z]+\d+\.\d+)-py(?P<py>\d+\.\d+)(?P<devel>-devel)?$")
ENV_VAR = "PROVISION_MATRIX"


def _key(text: str) -> tuple:
    """A version's ordering key (versions.py is imported when first needed: a warm
    `provision resolve` never needs it)."""
    from provisioner.versions import parse

    return parse(text).key


def _row_key(section: str, value) -> tuple | str:
    if section in VERSION_KEYED:
        try:
            return _key(str(value))
        except ValueError:  # VersionError
            return str(value)
    return str(value).lower()


def _key_of(section: str, row) -> tuple | str:
    """The key a row of `section` is merged and looked up by (see the module docstring for images)."""
    from provisioner.matrix import schema

    key = _row_key(section, row.get(schema.SECTIONS[section].key))
    if section == "images" and row.get("listed") is False:
        return (key, "unlisted")
    return key


def _files(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(p for p in (os.path.join(path, n) for n in os.listdir(path))
                      if p.endswith((".yaml", ".yml")) and os.path.isfile(p))
    if os.path.isfile(path):
        return [path]
    raise MatrixError(f"{path}: matrix overlay not found (expected a YAML file or a directory of them)")


def layer_paths(overlays: list | None = None) -> list[tuple[str, list[str]]]:
    """The layers to load, each as (name, files)."""
    layers = [("shipped", _files(data_path("matrices")))]
    env = os.environ.get(ENV_VAR, "")
    for item in [p for p in env.split(os.pathsep) if p] + [str(p) for p in overlays or []]:
        layers.append((item, _files(item)))
    return layers


def _label(path: str) -> str:
    """How an error names a file: relative to the working directory when inside it."""
    real = os.path.realpath(path)
    rel = os.path.relpath(real, os.path.realpath(os.getcwd()))
    if not rel.startswith(".."):
        return rel
    shipped = os.path.realpath(data_path("matrices"))
    return f"matrices/{os.path.basename(path)}" if os.path.dirname(real) == shipped else str(path)


# Code whose behaviour a cached matrix or a cached resolution depends on: every
# module of the matrix and resolve packages and the package's top-level modules
# (errors, paths, arch, ...: the base any package may import). The layering rule
# (tests/unit/test_architecture.py) keeps matrix/ and resolve/ from importing any
# other package, so these files are all the code a resolution runs.
CODE_PACKAGES = ("matrix", "resolve")


def code_files() -> list[str]:
    """The .py files the cache fingerprint covers (see CODE_PACKAGES)."""
    top = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    files = sorted(os.path.join(top, n) for n in os.listdir(top) if n.endswith(".py"))
    for pkg in CODE_PACKAGES:
        d = os.path.join(top, pkg)
        files += sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".py"))
    return files


def fingerprint(layers) -> str:
    parts = []
    for path in code_files():
        st = os.stat(path)
        parts.append(f"{path}:{st.st_mtime_ns}:{st.st_size}")
    for _, files in layers:
        for f in files:
            st = os.stat(f)
            parts.append(f"{os.path.realpath(f)}:{st.st_mtime_ns}:{st.st_size}")
    return cache.fingerprint(*parts)


def load(overlays: list | None = None, use_cache: bool = True, lenient: bool = False) -> Matrix:
    """Load and validate the matrix with its overlays (see the module docstring).

    `lenient` (for `matrix verify`): a row citing an undefined source id is
    recorded in ``Matrix.problems`` instead of failing the load; nothing is cached."""
    layers = layer_paths(overlays)
    names = [name for name, _ in layers]
    key = fingerprint(layers)
    if lenient:
        data = _build(layers, lenient=True)
        return Matrix(data, names, "", problems=data.pop("_problems"))
    if use_cache:
        data = cache.read(f"matrix-{key}.json")
        # The entry's digest is checked by cache.read; its shape here (anything else is a miss, rewritten).
        if (isinstance(data, dict) and isinstance(data.get("policy"), dict)
                and all(isinstance(v, list) for k, v in data.items() if k != "policy")):
            return Matrix(data, names, key)
    data = _build(layers)
    if use_cache:
        cache.write(f"matrix-{key}.json", data)
    return Matrix(data, names, key)


def _build(layers, lenient: bool = False) -> dict:
    from pathlib import Path

    from provisioner.matrix import schema
    from provisioner.matrix.yamlio import Node
    from provisioner.matrix.yamlio import load as load_yaml

    merged: dict[str, dict] = {name: {} for name in schema.SECTIONS}
    policy: dict = {}
    for layer_name, files in layers:
        seen: dict[tuple[str, object], str] = {}
        for path in files:
            label = _label(path)
            doc = load_yaml(Path(path), label)
            if doc is None:
                continue
            if not isinstance(doc, Node):
                raise MatrixError(f"{label}:1: a matrix file is a mapping of sections (e.g. 'cann:', 'torch_npu:')")
            for section, rows in doc.items():
                if section == "policy":
                    policy.update(schema.check_policy(rows))
                    continue
                if section not in schema.SECTIONS:
                    raise MatrixError(
                        f"{doc.where(section)}: unknown section {section!r}"
                        f" (expected one of: {', '.join(sorted([*schema.SECTIONS, 'policy']))})"
                    )
                if not isinstance(rows, list):
                    raise MatrixError(f"{doc.where(section)}: section {section!r} must be a list of rows")
                spec = schema.SECTIONS[section]
                for row in rows:
                    schema.check_row(section, row)
                    key = _key_of(section, row)
                    if (section == "images" and layer_name != "shipped" and "listed" not in row
                            and key not in merged[section]):
                        key = (key, "unlisted")  # an overlay naming only the CANN changes its unlisted row
                        if key not in merged[section]:
                            key = key[0]
                    if (section, key) in seen:
                        raise MatrixError(
                            f"{row.where(spec.key)}: duplicate {section} {spec.key} {row.get(spec.key)!r}"
                            f" (first at {seen[(section, key)]})"
                        )
                    seen[(section, key)] = row.where(spec.key)
                    if layer_name != "shipped" and row.get("remove") is True and section in KEPT_SECTIONS:
                        raise MatrixError(
                            f"{row.where()}: an overlay cannot remove {section} rows: provision reads every one of"
                            f" them by name (override the row's fields instead)"
                        )
                    _merge(merged[section], key, row, layer_name != "shipped")
    data: dict[str, Any] = {}
    for section, rows in merged.items():
        for row in rows.values():
            schema.check_complete(section, row)
        data[section] = [_plain(row) for row in rows.values()]
    data["policy"] = dict(policy)
    problems = _cross_check(data, merged, lenient)
    if lenient:
        data["_problems"] = problems
    return data


# Sections whose rows the code looks up by name (settings, device nodes and mounts, the base-image
# registries, Apex, extras, the doctor's libraries, rank-table formats): overlays override them, never remove.
KEPT_SECTIONS = frozenset({"device_settings", "device_mounts", "device_families", "registries", "apex", "extras",
                           "audit_libraries", "rank_tables", "torch_npu_features"})


def _merge(table: dict, key, row, overlay: bool) -> None:
    if row.get("remove") is True:
        if key not in table:
            raise MatrixError(f"{row.where()}: cannot remove {row.get(next(iter(row)))!r}: no such row")
        del table[key]
        return
    if overlay and key in table:
        old = table[key]
        updated = type(old)(old)
        updated.file, updated.line = row.file, row.line
        updated.key_lines = {**old.key_lines, **row.key_lines}
        updated.update(row)
        table[key] = updated
    else:
        table[key] = row


def _plain(row) -> dict:
    out = {k: v for k, v in row.items() if k != "remove"}
    out["_at"] = row.where()
    return out


def _cross_check(data: dict, merged: dict, lenient: bool = False) -> list[dict]:
    """Relations between sections: every reference must name something that exists.
    Returns the dangling source ids when `lenient` (else the first one fails)."""
    from provisioner.matrix import schema

    def fail(section: str, row: dict, key: str, msg: str) -> NoReturn:
        node = merged[section].get(_key_of(section, row))
        where = node.where(key) if node is not None else row["_at"]
        raise MatrixError(f"{where}: {msg}")

    source_ids = {r["id"] for r in data["sources"]}
    problems: list[dict] = []
    for section, rows in data.items():
        if section == "policy":
            continue
        for row in rows:
            for src in row.get("source", []):
                if re.fullmatch(r"[A-Z][A-Z0-9-]*", src) and src not in source_ids:
                    if not lenient:
                        fail(section, row, "source", f"unknown source id {src!r} (define it under 'sources:')")
                    node = merged[section].get(_key_of(section, row))
                    problems.append({"section": section, "key": row[schema.SECTIONS[section].key], "source": src,
                                     "at": node.where("source") if node is not None else row["_at"]})

    families = {r["id"].lower(): r for r in data["families"]}
    chips = {r["model"].lower() for r in data["chips"]}
    cards = {r["id"].lower(): r for r in data["cards"]}
    names: dict[str, str] = {}
    for card in data["cards"]:
        if card["family"].lower() not in families:
            fail("cards", card, "family", f"card {card['id']!r} names unknown family {card['family']!r}")
        for model in card.get("chip_models", []):
            if model.lower() not in chips:
                fail("cards", card, "chip_models", f"card {card['id']!r} names unknown chip model {model!r}")
        for name in [card["id"], *card.get("aliases", [])]:
            if name.lower() in names:
                fail("cards", card, "aliases", f"card name {name!r} is already used by {names[name.lower()]!r}")
            names[name.lower()] = card["id"]
    for fam in data["families"]:
        if fam["reference_card"].lower() not in cards:
            fail("families", fam, "reference_card", f"family {fam['id']!r}: unknown reference card {fam['reference_card']!r}")
        for alias in fam.get("aliases", []):
            if alias.lower() in names and names[alias.lower()] != f"family:{fam['id']}":
                fail("families", fam, "aliases", f"alias {alias!r} is already used by {names[alias.lower()]!r}")
            names[alias.lower()] = f"family:{fam['id']}"
    for chip in data["chips"]:
        if chip["family"].lower() not in families:
            fail("chips", chip, "family", f"chip {chip['model']!r} names unknown family {chip['family']!r}")

    cann_keys = set()
    for row in data["cann"]:
        cann_keys.add(_key(row["version"]))
        for alias in row.get("aliases", []):
            cann_keys.add(_key(alias))

    def need_cann(section, row, key, value):
        if value is not None and _key(value) not in cann_keys:
            fail(section, row, key, f"{section} row {row[schema.SECTIONS[section].key]!r} names CANN {value!r}, which is not in the matrix")

    products = {_key(r["product"]) for r in data["torch_npu_releases"]}
    for row in data["torch_npu"]:
        need_cann("torch_npu", row, "cann", row.get("cann"))
        if row.get("product") and _key(row["product"]) not in products:
            fail("torch_npu", row, "product", f"torch_npu row {row['wheel']!r} names unknown TorchNPU release {row['product']!r}")
    for row in data["mindspore"]:
        need_cann("mindspore", row, "cann", row["cann"])
    for row in data["mindspeed"]:
        need_cann("mindspeed", row, "cann", row.get("cann"))
    for row in data["llm_bundles"]:
        for c in row.get("cann", []):
            need_cann("llm_bundles", row, "cann", c)
        for fam in row.get("families", []):
            if fam.lower() not in families:
                fail("llm_bundles", row, "families", f"bundle {row['id']!r} names unknown family {fam!r}")
    chip_tags = {f["image_chip"] for f in data["families"] if f.get("image_chip")}
    for row in data["images"]:
        need_cann("images", row, "cann", row["cann"])
        for tag in row["tags"]:
            m = IMAGE_TAG.match(tag)
            if not m:
                fail("images", row, "tags", f"image tag {row['cann']}-{tag!r} is not <chip>-<os>-py<ver>[-devel]")
            if m["chip"] not in chip_tags:
                fail("images", row, "tags", f"image tag {row['cann']}-{tag} names unknown chip {m['chip']!r}")
    for row in data["profiles"]:
        schema.check_profile_constraints(merged["profiles"][_row_key("profiles", row["name"])])
        card = row["constraints"].get("card")
        if card and card.lower() not in names:
            fail("profiles", row, "constraints", f"profile {row['name']!r} names unknown card {card!r}")
        if row.get("fixed_by") and not any(p["name"] == row["fixed_by"] for p in data["profiles"]):
            fail("profiles", row, "fixed_by", f"profile {row['name']!r}: fixed_by names unknown profile {row['fixed_by']!r}")
    frameworks = {r["id"] for r in data["job_frameworks"]}
    for row in data["job_kinds"]:
        if row["framework"] not in frameworks:
            fail("job_kinds", row, "framework", f"job kind {row['id']!r} names unknown job framework {row['framework']!r}")
    for key in ("training_fallback_cards",):
        for card in data["policy"].get(key, []):
            if card.lower() not in names:
                raise MatrixError(f"policy: {key} names unknown card {card!r}")
    return problems


class Matrix:
    """The loaded data with lookups the resolver and the other modules share."""

    def __init__(self, data: dict, layers: list[str], fingerprint: str = "", problems: list | None = None):
        self.data = data
        self.layers = layers
        self.fingerprint = fingerprint
        self.problems = problems or []

    def rows(self, section: str) -> list[dict]:
        return self.data[section]

    def rule_for_family(self, rule: dict, family: str | None) -> dict:
        """An `audit_env` rule as it applies on chips of `family`: a `by_family` entry naming the family replaces
        the bounds (and default, notes) and says where it applies (`applies_to`, the family's name). Unknown
        family: the row's own bounds. The one reading of by_family for audit, doctor, the device plan and verify."""
        for entry in rule.get("by_family") or []:
            if family is not None and family in entry["families"]:
                name = next((r["name"] for r in self.data.get("families", []) if r["id"] == family), family)
                merged = {**rule, "min": entry["min"], "max": entry["max"], "applies_to": name}
                for key in ("default", "notes"):
                    if entry.get(key):
                        merged[key] = entry[key]
                return merged
        return rule

    @property
    def policy(self) -> dict:
        return self.data["policy"]

    @cached_property
    def _names(self) -> dict[str, tuple[str, str]]:
        out = {}
        for card in self.data["cards"]:
            for name in [card["id"], *card.get("aliases", [])]:
                out[name.lower()] = ("card", card["id"])
        for fam in self.data["families"]:
            for alias in fam.get("aliases", []):
                out.setdefault(alias.lower(), ("family", fam["id"]))
        return out

    def card_names(self) -> list[str]:
        return sorted(c["id"] for c in self.data["cards"])

    def lookup_card(self, name: str) -> tuple[dict, dict, str | None]:
        """(card, family, family alias used) for a card id, alias or chip alias."""
        hit = self._names.get(name.strip().lower())
        if hit is None:
            import difflib

            close = difflib.get_close_matches(name.lower(), list(self._names), n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise MatrixError(f"unknown card {name!r}{hint} (known cards: {', '.join(self.card_names())})")
        kind, ident = hit
        if kind == "family":
            fam = self.family(ident)
            card = self.card(fam["reference_card"])
            return card, fam, name
        card = self.card(ident)
        return card, self.family(card["family"]), None

    def card(self, ident: str) -> dict:
        return next(c for c in self.data["cards"] if c["id"].lower() == ident.lower())

    def family(self, ident: str) -> dict:
        return next(f for f in self.data["families"] if f["id"].lower() == ident.lower())

    @cached_property
    def _cann_index(self) -> dict:
        out = {}
        for row in self.data["cann"]:
            out[_key(row["version"])] = row
            for alias in row.get("aliases", []):
                out.setdefault(_key(alias), row)
        return out

    def cann(self, version: str | None) -> dict | None:
        if not version:
            return None
        try:
            return self._cann_index.get(_key(version))
        except ValueError:  # VersionError
            return None

    @cached_property
    def _images(self) -> dict:
        """CANN version key -> list of image records."""
        out: dict = {}
        for row in self.data["images"]:
            cann = self.cann(row["cann"])
            for tag in row["tags"]:
                m = IMAGE_TAG.match(tag)
                assert cann is not None and m is not None  # checked when the matrix was loaded
                out.setdefault(_key(cann["version"]), []).append(
                    {
                        "tag": f"{row['cann']}-{tag}",
                        "chip": m["chip"],
                        "os": m["os"],
                        "python": m["py"],
                        "devel": bool(m["devel"]),
                        "source": row["source"],
                        "listed": row.get("listed", True),
                        "evidence": None if row.get("listed", True) else "seen in " + "; ".join(
                            re.split(r" @ | \(", self.source_ref(s))[0] for s in row["source"]),
                    }
                )
        return out

    def images(self, cann_version: str, chip: str | None = None) -> list[Image]:
        imgs = self._images.get(_key(cann_version), [])
        return [i for i in imgs if chip is None or i["chip"] == chip]

    def registries(self) -> list[dict]:
        regs = self.data["registries"]
        return sorted(regs, key=lambda r: not r.get("default"))

    def torch_npu(self, wheel: str | None) -> dict | None:
        if not wheel:
            return None
        try:
            key = _key(wheel)
        except ValueError:  # VersionError
            return None
        return next((r for r in self.data["torch_npu"] if _key(r["wheel"]) == key), None)

    def release(self, product: str | None) -> dict | None:
        if not product:
            return None
        key = _key(product)
        return next((r for r in self.data["torch_npu_releases"] if _key(r["product"]) == key), None)

    def torch_python(self, torch: str) -> str | None:
        key = _key(torch)
        row = next((r for r in self.data["torch"] if _key(r["version"]) == key), None)
        return row["python"] if row else None

    def torch_wheel_rule(self, arch: str, torch: str) -> dict:
        """How torch is pinned by torch_npu and installed, for this CPU architecture and torch line."""
        from provisioner.versions import Spec, parse

        want = parse(torch).public()
        for row in self.data["torch_wheels"]:
            if row["arch"] == arch and any(Spec(s).matches(want) for s in row["torch"]):
                return row
        raise MatrixError(f"torch_wheels: no rule for torch {torch} on {arch}")

    def source_ref(self, src: str) -> str:
        hit = next((s["ref"] for s in self.data["sources"] if s["id"] == src), None)
        return hit or src

    def profile(self, name: str) -> dict:
        hit = next((p for p in self.data["profiles"] if p["name"].lower() == name.lower()), None)
        if hit is None:
            known = ", ".join(p["name"] for p in self.data["profiles"])
            raise MatrixError(f"unknown profile {name!r} (known: {known})")
        return hit
