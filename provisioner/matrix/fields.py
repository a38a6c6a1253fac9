"""The field checkers matrix sections (schema.py) are written with: each takes a value and the field's name
and returns the normalised value or raises ValueError with one line saying what is wrong.

    STR, TEXT, VER (a version), SPECS (version specs), PY (a Python range), BOOL, INT, SOURCE (a source
    id or reference), MAP, STR_MAP, ARCH_PY / ARCH_PIN (per CPU architecture), and the combinators
    opt(check), list_of(check), enum(*choices), records(required, optional); PAIRINGS and SOURCE_KINDS
    are the values of a row's `pairing` and a source's `kind`.
"""

from __future__ import annotations

from provisioner.arch import ARCHES
from provisioner.matrix.versions import PyRange, Spec, V, VersionError

# table: a cited compatibility table or release note states the pairing; derived: a rule gave it (a patch
# tag or a release-branch tip names its TorchNPU release); unconfirmed: drafted from index metadata only.
PAIRINGS = ("table", "derived", "unconfirmed")
SOURCE_KINDS = ("table", "release-notes", "docs", "index", "tags", "images", "usage", "spec", "field-report", "code")


def _str(value, name):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"{name} must be text: YAML read it as the number {value!r}; put it in quotes")
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be non-empty text")
    return value


def _text(value, name):
    if not isinstance(value, str):
        raise ValueError(f"{name} must be text")
    return value


def _float_hint(value, name):
    if isinstance(value, (float, int)) and not isinstance(value, bool):
        return (
            f"{name} must be a quoted version string: YAML reads {value!r} as a number (put it in quotes)"
        )
    return f"{name} must be a version string, got {value!r}"


def _ver(value, name):
    if not isinstance(value, str):
        raise ValueError(_float_hint(value, name))
    try:
        V(value)
    except VersionError as exc:
        raise ValueError(f"{name}: bad version string {value!r}") from exc
    return value


def _specs(value, name):
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise ValueError(_float_hint(value, name))
    out = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(_float_hint(item, name))
        try:
            Spec(item)
        except VersionError as exc:
            raise ValueError(f"{name}: bad version spec {item!r} ({exc})") from exc
        out.append(item)
    return out


def _pyrange(value, name):
    if not isinstance(value, str):
        raise ValueError(_float_hint(value, name))
    try:
        PyRange(value)
    except VersionError as exc:
        raise ValueError(f"{name}: bad Python range {value!r} (write '3.9-3.11')") from exc
    return value


def _bool(value, name):
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false")
    return value


def _int(value, name):
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be a whole number")
    return value


def _list(item_check):
    def check(value, name):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list):
            raise ValueError(f"{name} must be a list")
        return [item_check(v, name) for v in value]

    return check


def _enum(*choices):
    def check(value, name):
        if value not in choices:
            raise ValueError(f"{name} must be one of {', '.join(map(str, choices))}; got {value!r}")
        return value

    return check


def _optional(check):
    def inner(value, name):
        return None if value is None else check(value, name)

    return inner


def _source(value, name):
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(i, str) and i.strip() for i in items):
        raise ValueError(f"{name} must name where the row comes from (a source id, repo + path, or URL)")
    return items


def _mapping(value, name):
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a mapping")
    return value


def _records(required: dict, optional: dict | None = None):
    """A list of small mappings, each checked field by field (device nodes, node dirs)."""
    fields = {**required, **(optional or {})}

    def check(value, name):
        if not isinstance(value, list):
            raise ValueError(f"{name} must be a list of mappings")
        for n, item in enumerate(value):
            if not isinstance(item, dict):
                raise ValueError(f"{name}[{n}] must be a mapping")
            unknown = sorted(set(item) - set(fields))
            if unknown:
                raise ValueError(f"{name}[{n}]: unknown key {unknown[0]!r} (expected one of: {', '.join(sorted(fields))})")
            missing = [k for k in required if k not in item]
            if missing:
                raise ValueError(f"{name}[{n}] lacks {', '.join(missing)}")
            for key, val in item.items():
                item[key] = fields[key](val, f"{name}[{n}].{key}")
        return value

    return check


def _str_map(value, name):
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"{name} must map names to quoted text values")
    return value


def _arch_map(value_check):
    def check(value, name):
        if not isinstance(value, dict) or not value:
            raise ValueError(f"{name} must map a CPU architecture ({', '.join(ARCHES)}) to a value")
        for arch, item in value.items():
            if arch not in ARCHES:
                raise ValueError(f"{name}: unknown architecture {arch!r} (expected {', '.join(ARCHES)})")
            value[arch] = value_check(item, f"{name}.{arch}")
        return value

    return check


def _pin(value, name):
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a requirement such as 'torch=={{torch}}+cpu', or 'none'")
    return value


ARCH_PY = _arch_map(_pyrange)
ARCH_PIN = _arch_map(_pin)

STR, TEXT, VER, SPECS, PY, BOOL, INT = _str, _text, _ver, _specs, _pyrange, _bool, _int
SOURCE, MAP, STR_MAP = _source, _mapping, _str_map
records = _records
opt = _optional
list_of = _list
enum = _enum
