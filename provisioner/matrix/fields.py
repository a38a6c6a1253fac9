"""The field checkers matrix sections (schema.py) are written with: each takes a value and the field's name
and returns the normalised value or raises ValueError with one line saying what is wrong.

    STR, TEXT, VER (a version), SPECS (version specs), PY (a Python range), BOOL, INT, SOURCE (a source
    id or reference), MAP, STR_MAP, ARCH_PY / ARCH_PIN (per CPU architecture), and the combinators
    opt(check), list_of(check), enum(*choices), records(required, optional); REQ (a pip requirement: name and
    specifiers only), TORCH_REQ / PIN (one '==' pin, `{torch}` the only placeholder; PIN also 'none'),
    GIT_REF (a branch, tag or commit: never an option); PAIRINGS and SOURCE_KINDS
    are the values of a row's `pairing` and a source's `kind`. For framework sets: COMMIT (a 40-hex
    git commit), COMMITS (checkout name -> commit, the names in CHECKOUTS), STEPS (an environment's
    upstream install order) and SDISTS (source archives by version, sha256 and https URL).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provisioner import validate
from provisioner.arch import ARCHES
from provisioner.versions import PyRange, Spec, V, VersionError

# table: a cited compatibility table or release note states the pairing; derived: a rule gave it (a patch
# tag or a release-branch tip names its TorchNPU release); unconfirmed: drafted from index metadata only.
PAIRINGS = ("table", "derived", "unconfirmed")
SOURCE_KINDS = ("table", "release-notes", "docs", "index", "tags", "images", "usage", "spec", "field-report", "code")


def _str(value, name):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(f"{name} must be text: YAML read it as the number {value!r}; put it in quotes")
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be non-empty text")
    if validate.has_control(value):
        raise ValueError(f"{name} must be one line (no newline or control characters): {value[:60]!r}")
    return value


def _image(value, name):
    try:
        return validate.image_ref(value, name)
    except validate.Invalid as exc:
        raise ValueError(str(exc)) from None


def _url(value, name):
    try:
        return validate.url(value, name)
    except validate.Invalid as exc:
        raise ValueError(str(exc)) from None


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
        validate.version_text(value, name)
        V(value)
    except (VersionError, validate.Invalid) as exc:
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


# The one placeholder a torch_wheels requirement / pin (and a row's torch_pin) may hold: the torch version.
TORCH = "{torch}"
# What a requirement may be written with: a name, extras, version specifiers; no URL, marker, option or quote.
_REQ_CHARS = re.compile(r"[A-Za-z0-9._\-\[\],<>=!~*+ ]+", re.ASCII)


def with_torch(template: str, torch: str) -> str:
    """A torch_wheels requirement or pin with its placeholder filled: ``{torch}`` and nothing else (never
    str.format, which also reads other names, attributes and indexes)."""
    return template.replace(TORCH, torch)


def requirement(value, name, *, placeholder: bool = False, pinned: bool = False):
    """A pip requirement that goes as written into requirements files and printed pip lines: it parses
    (packaging), names no URL, marker or option, and uses no '==='; `pinned`: exactly one '==' specifier;
    `placeholder`: ``{torch}`` may stand for the torch version (the only placeholder)."""
    text = _str(value, name)
    probe = text.replace(TORCH, "0") if placeholder else text
    if "{" in probe or "}" in probe:
        allowed = f"only the placeholder {TORCH} is allowed" if placeholder else "no placeholder is allowed"
        raise ValueError(f"{name}: {allowed}: {text[:80]!r}")
    if not _REQ_CHARS.fullmatch(probe):
        raise ValueError(f"{name}: a requirement is a name and version specifiers only (no URL, marker, option,"
                         f" quote or shell character): {text[:80]!r}")
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(probe)
    except InvalidRequirement as exc:
        raise ValueError(f"{name}: not a requirement ({' '.join(str(exc).split())[:120]}): {text[:80]!r}") from None
    specs = list(req.specifier)
    if any(s.operator == "===" for s in specs):
        raise ValueError(f"{name}: '===' (arbitrary equality) is not allowed: {text[:80]!r}")
    if pinned and (len(specs) != 1 or specs[0].operator != "=="):
        raise ValueError(f"{name}: must pin one version with '==' (such as 'torch=={TORCH}+cpu'): {text[:80]!r}")
    return value


def _requirement(value, name):
    return requirement(value, name)


def _torch_requirement(value, name):
    return requirement(value, name, placeholder=True, pinned=True)


def _pin(value, name):
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a requirement such as 'torch=={{torch}}+cpu', or 'none'")
    if value == "none":
        return value
    return requirement(value, name, placeholder=True, pinned=True)


def _git_ref(value, name):
    text = _str(value, name)
    try:
        return validate.git_ref(text, name)
    except validate.Invalid as exc:
        raise ValueError(str(exc)) from None


# ------------------------------------------------------- framework sets (matrices/frameworks.yaml)


_HEX40 = frozenset("0123456789abcdef")


def _commit(value, name):
    if not isinstance(value, str) or len(value) != 40 or not set(value) <= _HEX40:
        raise ValueError(f"{name} must be a full 40-hex git commit (lower case), got {value!r}:"
                         " branches and tags move, a commit does not")
    return value


# The checkouts a framework set names: each *_ref label has a commit under `commits`.
CHECKOUTS = ("mindspeed", "megatron", "mindspeed_llm", "mindspeed_rl", "vllm_ascend")


def _commits(value, name):
    if not isinstance(value, dict) or not value:
        raise ValueError(f"{name} must map checkout names to 40-hex commits")
    for key, commit in value.items():
        if key not in CHECKOUTS:
            raise ValueError(f"{name}: unknown checkout {key!r} (expected one of: {', '.join(CHECKOUTS)})")
        _commit(commit, f"{name}.{key}")
    return value


def _env_steps(value, name):
    """The upstream install order of a framework environment (see matrices/frameworks.yaml)."""
    if not isinstance(value, list) or not value:
        raise ValueError(f"{name} must be a non-empty list of steps")
    seen = set()
    for n, step in enumerate(value):
        where = f"{name}[{n}]"
        if not isinstance(step, dict):
            raise ValueError(f"{where} must be a mapping")
        unknown = sorted(set(step) - _STEP_KEYS)
        if unknown:
            raise ValueError(f"{where}: unknown key {unknown[0]!r} (expected one of: {', '.join(sorted(_STEP_KEYS))})")
        for key in ("name", "title", "source"):
            if not isinstance(step.get(key), str) or not step[key].strip():
                raise ValueError(f"{where} needs {key!r} (text)")
        if not _PKG_NAME.match(step["name"]) or "\n" in step["title"]:
            raise ValueError(f"{where}: name must be a plain name and title one line (both reach the Dockerfile)")
        if step["name"] in seen or step["name"] in ("framework", "base"):
            raise ValueError(f"{where}: step name {step['name']!r} is taken")
        seen.add(step["name"])
        inline, from_file = step.get("requirements"), step.get("file")
        if (inline is None) == (from_file is None):
            raise ValueError(f"{where} needs either requirements (a list) or file (checkout/sdist + path)")
        if inline is not None and not (isinstance(inline, list) and all(isinstance(x, str) for x in inline)):
            raise ValueError(f"{where}.requirements must be a list of requirement strings")
        if from_file is not None:
            if not isinstance(from_file, dict) or not isinstance(from_file.get("path"), str) \
                    or len([k for k in ("checkout", "sdist") if k in from_file]) != 1:
                raise ValueError(f"{where}.file needs path and one of checkout / sdist")
        if "no_deps" in step and not isinstance(step["no_deps"], bool):
            raise ValueError(f"{where}.no_deps must be true or false")
        subs = step.get("substitute")
        if subs is not None:
            # name -> the requirement that replaces the file's line for it (a pin upstream's index cannot serve)
            from packaging.requirements import InvalidRequirement, Requirement

            if not isinstance(subs, dict) or not subs or "notes" not in step:
                raise ValueError(f"{where}.substitute must map package names to requirements, with the step's notes"
                                 " saying why")
            for key, text in subs.items():
                try:
                    req = Requirement(str(text))
                except InvalidRequirement:
                    raise ValueError(f"{where}.substitute.{key}: not a requirement: {text!r}") from None
                if not _PKG_NAME.match(str(key)) or req.name.lower().replace("_", "-") != str(key).lower().replace("_", "-"):
                    raise ValueError(f"{where}.substitute.{key}: the requirement must name {key}")
        pkg = step.get("package")
        if pkg is not None:
            if not isinstance(pkg, dict) or not isinstance(pkg.get("name"), str) \
                    or len([k for k in ("checkout", "sdist") if k in pkg]) != 1:
                raise ValueError(f"{where}.package needs name and one of checkout / sdist")
            # These reach a Dockerfile RUN line: names and values are held to plain characters.
            if not _PKG_NAME.match(pkg["name"]) or not _PKG_NAME.match(str(pkg.get("checkout") or pkg.get("sdist"))):
                raise ValueError(f"{where}.package: name and checkout/sdist must be plain names")
            env = pkg.get("env", {})
            if not isinstance(env, dict) or not all(_ENV_NAME.match(str(k)) and _ENV_VALUE.match(str(v))
                                                    for k, v in env.items()):
                raise ValueError(f"{where}.package.env must map variable names (A-Z, 0-9, _) to plain values")
            if "declares" in pkg and not isinstance(pkg["declares"], bool):
                raise ValueError(f"{where}.package.declares must be true or false")
    return value


_PKG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_ENV_VALUE = re.compile(r"^[A-Za-z0-9._+:/=-]*$")


def _sdists(value, name):
    if not isinstance(value, dict):
        raise ValueError(f"{name} must map sdist names to {{version, sha256, url}}")
    for key, spec in value.items():
        if not _PKG_NAME.match(str(key)) or not isinstance(spec, dict):
            raise ValueError(f"{name}.{key}: a plain package name mapping to version, sha256 and url")
        _ver(spec.get("version"), f"{name}.{key}.version")
        if not re.fullmatch(r"[0-9a-f]{64}", str(spec.get("sha256"))):
            raise ValueError(f"{name}.{key}.sha256 must be 64 hex digits")
        if not str(spec.get("url", "")).startswith("https://"):
            raise ValueError(f"{name}.{key}.url must be an https URL")
    return value


_STEP_KEYS = frozenset({"name", "title", "source", "requirements", "file", "no_deps", "package", "notes",
                        "substitute"})


ARCH_PY = _arch_map(_pyrange)
ARCH_PIN = _arch_map(_pin)
PIN, REQ, TORCH_REQ, GIT_REF = _pin, _requirement, _torch_requirement, _git_ref

STR, TEXT, VER, SPECS, PY, BOOL, INT = _str, _text, _ver, _specs, _pyrange, _bool, _int
SOURCE, MAP, STR_MAP = _source, _mapping, _str_map
IMAGE, URL = _image, _url
COMMIT, COMMITS, STEPS, SDISTS = _commit, _commits, _env_steps, _sdists
records = _records
opt = _optional
list_of = _list
enum = _enum


@dataclass(frozen=True)
class Section:
    """One matrix section: its key field, required and optional fields, and what it holds."""

    key: str
    required: dict
    optional: dict = field(default_factory=dict)
    doc: str = ""

    def allowed(self) -> list[str]:
        return sorted({*self.required, *self.optional, "source", "notes", "remove"})


NOTES = {"notes": opt(TEXT), "note": opt(TEXT)}
