"""The shape of every matrix section, checked row by row with file:line errors.

A matrix file is a mapping of section name -> list of rows (``policy`` is a
single mapping). Each row is keyed by one field (``key``); overlays replace
the fields they name in a row with the same key, add new rows, or drop a row
with ``remove: true``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provisioner.errors import MatrixError
from provisioner.matrix.versions import PyRange, Spec, V, VersionError
from provisioner.matrix.yamlio import Node

# --- field checkers: each returns the normalised value or raises ValueError ---


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


ARCHES = ("x86_64", "aarch64")
# table: a cited compatibility table or release note states the pairing; derived: a rule gave it (a patch
# tag or a release-branch tip names its TorchNPU release); unconfirmed: drafted from index metadata only.
PAIRINGS = ("table", "derived", "unconfirmed")
SOURCE_KINDS = ("table", "release-notes", "docs", "index", "tags", "images", "usage", "spec", "field-report", "code")


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


@dataclass(frozen=True)
class Section:
    key: str
    required: dict
    optional: dict = field(default_factory=dict)
    doc: str = ""

    def allowed(self) -> list[str]:
        return sorted({*self.required, *self.optional, "source", "notes", "remove"})


NOTES = {"notes": opt(TEXT), "note": opt(TEXT)}

SECTIONS: dict[str, Section] = {
    "sources": Section(
        "id",
        {"id": STR, "ref": STR},
        {"kind": opt(enum(*SOURCE_KINDS))},
        doc="short names for cited sources; `kind` says what a source can vouch for (matrix verify)",
    ),
    "families": Section(
        "id",
        {"id": STR, "name": STR, "training": BOOL, "bf16": BOOL, "device_family": STR, "reference_card": STR},
        {
            "generation": opt(TEXT),
            "k8s_resource": opt(STR),
            "k8s_ring_label": opt(STR),
            "image_chip": opt(STR),
            "aliases": list_of(STR),
            "bf16_note": opt(TEXT),
            "training_note": opt(TEXT),
            **NOTES,
        },
        doc="chip families: what every chip of the family can do",
    ),
    "chips": Section(
        "model",
        {"model": STR, "family": STR},
        {
            "npu_smi_names": list_of(STR),
            "soc_names": list_of(STR),
            "hbm_mb": opt(INT),
            "hbm_note": opt(TEXT),
            **NOTES,
        },
        doc="chip models and the names npu-smi prints for them",
    ),
    "cards": Section(
        "id",
        {"id": STR, "name": STR, "family": STR, "form": enum("card", "server", "pod", "box")},
        {
            "aliases": list_of(STR),
            "chip_models": list_of(STR),
            "chips_per_card": opt(INT),
            "chips_per_server": opt(INT),
            "max_cards_per_server": opt(INT),
            "memory_mb": opt(INT),
            "training": opt(BOOL),
            "inference_product": opt(BOOL),
            "unconfirmed": list_of(STR),
            **NOTES,
        },
        doc="products users name with --card",
    ),
    "cann": Section(
        "version",
        {"version": VER, "status": enum("release", "alpha", "beta", "preview")},
        {
            "aliases": list_of(VER),
            "hdk_paired": list_of(VER),
            "hdk_compatible": SPECS,
            "python": opt(PY),
            "date": opt(TEXT),
            **NOTES,
        },
        doc="CANN releases and the HDK drivers they pair or work with",
    ),
    "hdk": Section(
        "version",
        {"version": VER},
        {
            "firmware": list_of(VER),
            "chips": list_of(STR),
            "compatible_firmware": opt(SPECS),
            **NOTES,
        },
        doc="HDK driver releases: firmware shipped with them and accepted firmware range",
    ),
    "firmware": Section(
        "version",
        {"version": VER, "compatible_drivers": SPECS},
        dict(NOTES),
        doc="firmware files and the driver ranges they accept",
    ),
    "registries": Section(
        "id",
        {"id": STR, "image": STR},
        {"default": opt(BOOL), **NOTES},
        doc="where the official CANN base images are published",
    ),
    "images": Section(
        "cann",
        {"cann": STR, "tags": list_of(STR)},
        {"listed": opt(BOOL), **NOTES},
        doc="official CANN base-image tags per CANN release (<cann>-<chip>-<os>-py<ver>[-devel])",
    ),
    "torch_npu_releases": Section(
        "product",
        {"product": VER},
        {"date": opt(TEXT), "cann_compatible": SPECS, **NOTES},
        doc="TorchNPU product releases and the CANN range each works with",
    ),
    "torch_npu": Section(
        "wheel",
        {"wheel": VER, "torch": VER, "on_pypi": BOOL},
        {
            "product": opt(VER),
            "branch": opt(STR),
            "cann": opt(VER),
            "cann_inferred": opt(BOOL),
            "pairing": opt(enum(*PAIRINGS)),
            "python": opt(PY),
            "wheels": opt(ARCH_PY),
            "torch_pin": opt(ARCH_PIN),
            "in_table": opt(BOOL),
            **NOTES,
        },
        doc="torch_npu wheels: torch they pin, paired CANN, Python range, PyPI presence (per arch in `wheels`)",
    ),
    "torch": Section(
        "version",
        {"version": VER, "python": PY},
        dict(NOTES),
        doc="generic Python range per torch line (used when a wheel row has none)",
    ),
    "torch_wheels": Section(
        "id",
        {"id": STR, "arch": enum(*ARCHES), "torch": SPECS, "pin": STR, "requirement": STR},
        {"index_url": opt(STR), **NOTES},
        doc="per CPU architecture and torch line: the torch pin in torch_npu's wheel metadata and how torch is installed",
    ),
    "apex": Section(
        "id",
        {"id": STR, "repo": STR, "ref": STR, "setuptools_max": VER, "setuptools_pin": VER, "python": PY},
        {
            "upstream_repo": opt(STR),
            "upstream_commit": opt(STR),
            "torch_confirmed": list_of(VER),
            "python_note": opt(TEXT),
            **NOTES,
        },
        doc="Apex for Ascend: build pins and limits",
    ),
    "mindspeed": Section(
        "branch",
        {"branch": STR, "megatron": STR, "torch": list_of(VER), "python": PY},
        {"torch_npu_product": opt(STR), "cann": opt(VER), **NOTES},
        doc="MindSpeed (core) branches",
    ),
    "llm_bundles": Section(
        "id",
        {
            "id": STR,
            "kind": enum("mindspeed-llm", "mindspeed-rl"),
            "mindspeed_ref": STR,
            "megatron_ref": STR,
            "mindspeed_llm_ref": STR,
            "torch": list_of(VER),
            "python": PY,
        },
        {
            "release": opt(STR),
            "mindspeed_rl_ref": opt(STR),
            "torch_npu_product": opt(STR),
            "cann": list_of(VER),
            "cann_compatible": SPECS,
            "hdk": list_of(VER),
            "families": list_of(STR),
            "apex": opt(BOOL),
            "status": opt(enum("release", "preview")),
            **NOTES,
        },
        doc="MindSpeed + Megatron + MindSpeed-LLM(/RL) sets released together",
    ),
    "mindspore": Section(
        "version",
        {"version": VER, "cann": VER, "on_pypi": BOOL},
        {"hdk": list_of(VER), "python": opt(PY), "cann_community": opt(STR), "pairing": opt(enum(*PAIRINGS)), **NOTES},
        doc="MindSpore releases and the CANN they pair with",
    ),
    "extras": Section(
        "name",
        {"name": STR, "requirement": STR},
        {"python": opt(PY), "torch": opt(SPECS), "families": list_of(STR), **NOTES},
        doc="optional packages --with adds (deepspeed, ...)",
    ),
    "packages": Section(
        "id",
        {"id": STR, "python": PY, "resolved_with": list_of(STR), "pins": MAP, "lock": list_of(STR)},
        {"torch": opt(SPECS), "mindspore": opt(SPECS), "cann": opt(SPECS), "extras": opt(MAP), **NOTES},
        doc="complete package locks an image installs beside torch/torch_npu or MindSpore (checked in packages.py)",
    ),
    "profiles": Section(
        "name",
        {"name": STR, "kind": enum("known-good", "field-report"), "description": STR, "constraints": MAP},
        {"workload": opt(TEXT), "fixed_by": opt(STR), "expect": opt(MAP), **NOTES},
        doc="named stacks: known-good ones and the users' own field reports",
    ),
    # matrices/devices.yaml: what the device planner maps into containers, per device family.
    "device_families": Section(
        "id",
        {
            "id": STR,
            "chip_node": STR,
            "nodes": records(
                {"name": STR, "need": enum("required", "expected", "optional")},
                {"host": list_of(STR), "why": opt(TEXT)},
            ),
            "driver_mount": enum("lib64", "whole"),
            "driver_mount_why": TEXT,
        },
        {
            "node_dirs": records({"dir": STR, "need": enum("required", "expected", "optional")}),
            "runtime_env": STR_MAP,
            **NOTES,
        },
        doc="device nodes per device family (910, 310P, 310, 310B, 950) and the driver mount choice",
    ),
    "device_mounts": Section(
        "id",
        {
            "id": STR,
            "set": enum("driver-lib64", "driver-whole", "always", "multi-node"),
            "host": list_of(STR),
            "need": enum("required", "expected", "optional"),
            "why": TEXT,
        },
        {"container": opt(STR), "pick": enum("first", "all"), "families": list_of(STR), "by_runtime": list_of(STR), **NOTES},
        doc="read-only host paths mapped into containers",
    ),
    "launch_env": Section(
        "name",
        {"name": STR, "when": enum("distributed", "multi-node"), "why": TEXT},
        {"value": opt(STR), "option": opt(STR), "k8s_field": opt(STR), "range": opt(TEXT), **NOTES},
        doc="environment for distributed training containers (HCCL time-outs, NICs, torchrun variables)",
    ),
    "rank_tables": Section(
        "family",
        {"family": STR, "version": STR, "written": BOOL, "why": TEXT},
        dict(NOTES),
        doc="hccl.json rank-table format per chip family and whether provision writes it",
    ),
    "device_settings": Section(
        "id",
        {"id": STR, "value": STR, "why": TEXT},
        dict(NOTES),
        doc="fixed names the device renderers use (CDI kind and version, runtime name, container paths)",
    ),
    "audit_limits": Section(
        "id",
        {"id": STR, "value": INT},
        {"unit": opt(STR), **NOTES},
        doc="thresholds the host audit and the doctor warn at",
    ),
    "audit_device_nodes": Section(
        "family",
        {"family": STR, "nodes": list_of(STR)},
        dict(NOTES),
        doc="device nodes besides /dev/davinciN a container of each chip family needs",
    ),
    "audit_runtime_mounts": Section(
        "path",
        {"path": STR},
        dict(NOTES),
        doc="host paths Ascend Docker Runtime mounts by default (checked for group/other-writable parents)",
    ),
    "audit_libraries": Section(
        "name",
        {
            "name": STR,
            "provided_by": enum("driver", "cann", "dcmi"),
            "dirs": list_of(STR),
            "severity": enum("error", "warning", "info"),
            "fix": STR,
        },
        dict(NOTES),
        doc="shared libraries the doctor loads inside a container, and the fix when one is missing",
    ),
    "audit_env": Section(
        "name",
        {"name": STR, "kind": enum("int", "ip", "ifname", "ids")},
        {"min": opt(INT), "max": opt(INT), **NOTES},
        doc="launch variables the doctor validates (HCCL_*, ASCEND_RT_VISIBLE_DEVICES)",
    ),
}

# Fields of a profile's `constraints` mapping: they mirror `provision resolve` options.
PROFILE_CONSTRAINTS = {
    "card": STR,
    "task": enum("train", "inference"),
    "framework": enum("pytorch", "mindspore"),
    "cann": VER,
    "torch": VER,
    "torch_npu": VER,
    "mindspore": VER,
    "python": VER,
    "arch": enum("x86_64", "aarch64"),
    "os": STR,
    "driver": VER,
    "dtype": enum("bf16", "fp16", "fp32"),
    "with": list_of(STR),
    "pins": MAP,
    "host_os": TEXT,
    "base_image": STR,
}
PIN_FIELDS = ("mindspeed", "megatron", "mindspeed_llm", "mindspeed_rl")

POLICY = {
    "python_preference": list_of(VER),
    "os_preference": list_of(STR),
    "training_fallback_cards": list_of(STR),
    "default_task": enum("train", "inference"),
    "source": SOURCE,
    "notes": opt(TEXT),
}


def check_row(section: str, row) -> Node:
    """Validate one row; raise MatrixError naming file:line of the bad field."""
    spec = SECTIONS[section]
    where = row.where if isinstance(row, Node) else (lambda key=None: section)
    if not isinstance(row, dict):
        raise MatrixError(f"{where()}: each {section} row must be a mapping")
    if row.get("remove") is True:
        if spec.key not in row:
            raise MatrixError(f"{where()}: a remove row needs its {spec.key!r}")
        return row
    allowed = set(spec.allowed())
    for key in row:
        if key not in allowed:
            raise MatrixError(
                f"{where(key)}: unknown key {key!r} in {section} (expected one of: {', '.join(sorted(allowed))})"
            )
    checks = {**spec.required, **spec.optional, "source": SOURCE, "remove": BOOL}
    for key, value in row.items():
        try:
            row[key] = checks[key](value, key)
        except ValueError as exc:
            raise MatrixError(f"{where(key)}: {section}: {exc}") from None
    return row


def check_complete(section: str, row: Node) -> None:
    """After overlays merge: every required field and a source must be present."""
    spec = SECTIONS[section]
    needed = [*spec.required] + ([] if section == "sources" else ["source"])
    missing = [k for k in needed if k not in row]
    if missing:
        raise MatrixError(f"{row.where()}: {section} row {row.get(spec.key)!r} lacks {', '.join(missing)}")


def check_profile_constraints(row: Node) -> None:
    cons = row["constraints"]
    where = cons.where if isinstance(cons, Node) else row.where
    for key, value in cons.items():
        if key not in PROFILE_CONSTRAINTS:
            raise MatrixError(
                f"{where(key)}: unknown constraint {key!r} in profile {row['name']!r}"
                f" (expected one of: {', '.join(sorted(PROFILE_CONSTRAINTS))})"
            )
        try:
            cons[key] = PROFILE_CONSTRAINTS[key](value, key)
        except ValueError as exc:
            raise MatrixError(f"{where(key)}: profile {row['name']!r}: {exc}") from None
    for pin in cons.get("pins", {}) or {}:
        if pin not in PIN_FIELDS:
            raise MatrixError(f"{where('pins')}: unknown pin {pin!r} (expected one of: {', '.join(PIN_FIELDS)})")


def check_policy(policy) -> dict:
    if not isinstance(policy, dict):
        raise MatrixError("policy must be a mapping")
    where = policy.where if isinstance(policy, Node) else (lambda key=None: "policy")
    for key, value in policy.items():
        if key not in POLICY:
            raise MatrixError(f"{where(key)}: unknown policy key {key!r} (expected one of: {', '.join(sorted(POLICY))})")
        try:
            policy[key] = POLICY[key](value, key)
        except ValueError as exc:
            raise MatrixError(f"{where(key)}: policy: {exc}") from None
    return policy
