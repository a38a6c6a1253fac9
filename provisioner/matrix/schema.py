"""The shape of every matrix section, checked row by row with file:line errors (the field checkers are
in fields.py).

A matrix file is a mapping of section name -> list of rows (``policy`` is a
single mapping). Each row is keyed by one field (``key``); overlays replace
the fields they name in a row with the same key, add new rows, or drop a row
with ``remove: true``.
"""

from __future__ import annotations

from provisioner.arch import ARCHES
from provisioner.errors import MatrixError
from provisioner.matrix.fields import (
    ARCH_PIN,
    ARCH_PY,
    BOOL,
    COMMIT,
    COMMITS,
    GIT_REF,
    IMAGE,
    INT,
    MAP,
    NOTES,
    PAIRINGS,
    PIN,
    PY,
    REQ,
    SDISTS,
    SOURCE,
    SOURCE_KINDS,
    SPECS,
    STEPS,
    STR,
    STR_MAP,
    TEXT,
    TORCH_REQ,
    URL,
    VER,
    Section,
    enum,
    list_of,
    opt,
    records,
)
from provisioner.matrix.schema_flow import FLOW_SECTIONS
from provisioner.matrix.yamlio import Node

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
            "idle_hbm_mb": opt(INT),
            "idle_hbm_note": opt(TEXT),
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
        {"id": STR, "image": IMAGE},
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
    "torch_npu_features": Section(
        "feature",
        {"feature": STR, "title": STR, "wheels": SPECS},
        {"instead": opt(STR), **NOTES},
        doc="what the bundled trainer needs from torch_npu, by wheel version (FSDP2, ...)",
    ),
    "trl_rollout": Section(
        "trl",
        {"trl": SPECS},
        {"vllm": opt(SPECS), "fsdp2_offload_sync_device": opt(STR), **NOTES},
        doc="what TRL's colocated vLLM rollout needs, by TRL version (the vLLM range, the FSDP2-offload weight sync)",
    ),
    "optimizer_temporaries": Section(
        "id",
        {"id": STR, "optimizer": STR, "step": enum("every", "first"), "copies": INT},
        dict(NOTES),
        doc="fp32 copies of the trainable parameters an optimizer step keeps alive at once on a device (memory plan)",
    ),
    "torch": Section(
        "version",
        {"version": VER, "python": PY},
        dict(NOTES),
        doc="generic Python range per torch line (used when a wheel row has none)",
    ),
    "torch_wheels": Section(
        "id",
        {"id": STR, "arch": enum(*ARCHES), "torch": SPECS, "pin": PIN, "requirement": TORCH_REQ},
        {"index_url": opt(URL), **NOTES},
        doc="per CPU architecture and torch line: the torch pin in torch_npu's wheel metadata and how torch is installed",
    ),
    "apex": Section(
        "id",
        {"id": STR, "repo": URL, "ref": GIT_REF, "commit": COMMIT, "setuptools_max": VER, "setuptools_pin": VER,
         "python": PY},
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
            "commits": COMMITS,
            "torch": list_of(VER),
            "python": PY,
        },
        {
            "release": opt(STR),
            "mindspeed_rl_ref": opt(STR),
            "vllm_ascend_ref": opt(STR),
            "commits_note": opt(TEXT),
            "torch_npu_product": opt(STR),
            "cann": list_of(VER),
            "cann_compatible": SPECS,
            "hdk": list_of(VER),
            "families": list_of(STR),
            "apex": opt(BOOL),
            "status": opt(enum("release", "preview")),
            # torch_npu x CANN pairings the set's own install guide states and no TorchNPU table lists: a
            # candidate on one of them is offered to a request for this set only (resolve/candidates.py)
            "torch_npu_pairings": records({"wheel": VER, "cann": list_of(VER)}),
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
    "mindformers": Section(
        "version",
        {"version": VER, "mindspore": VER, "cann": VER, "ref": STR, "commit": COMMIT},
        {"hdk": list_of(VER), "python": opt(PY), **NOTES},
        doc="MindSpore Transformers releases, the MindSpore and CANN each pairs with, and its source commit",
    ),
    "lock_targets": Section(
        "arch",
        {"arch": enum(*ARCHES), "platforms": list_of(STR)},
        dict(NOTES),
        doc="the wheel platform tags a framework lock is resolved for, per CPU architecture",
    ),
    "framework_envs": Section(
        "id",
        {"id": STR, "set": STR, "python": VER, "steps": STEPS},
        {
            "torch": opt(VER),
            # the torch-npu build the lock is resolved with, where the set's CANN takes another build of the torch
            # line than its base_set was resolved with (the set's own steps pin it)
            "torch_npu": opt(VER),
            "mindspore": opt(VER),
            "base_set": opt(STR),
            "sdists": opt(SDISTS),
            "resolved": opt(MAP),
            "inputs": opt(MAP),
            "layers": opt(MAP),
            "sources": opt(MAP),
            "overrides": opt(list_of(MAP)),
            "conflicts": opt(list_of(MAP)),
            **NOTES,
        },
        doc="per framework set: the upstream install order and the lock it yields (scripts/lock_frameworks.py)",
    ),
    "extras": Section(
        "name",
        {"name": STR, "requirement": REQ},
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
        {"value": opt(STR), "option": opt(STR), "k8s_field": opt(STR), **NOTES},
        doc="environment for distributed training containers (HCCL time-outs, NICs, torchrun variables); an"
            " option's value is checked against the audit_env row of the same name for the plan's chip family",
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
        {"name": STR, "kind": enum("int", "ip", "ifname", "ids", "choice", "text")},
        {"min": opt(INT), "max": opt(INT), "values": list_of(STR), "status": enum("current", "legacy"),
         "default": opt(STR),
         "by_family": records({"families": list_of(STR), "min": INT, "max": INT},
                              {"default": opt(STR), "notes": opt(TEXT)}),
         **NOTES},
        doc="launch variables audit, doctor and the device plan validate (HCCL_*, torch_npu,"
            " ASCEND_RT_VISIBLE_DEVICES); by_family: the bounds that differ on some chip families",
    ),
    "audit_env_prefixes": Section(
        "prefix",
        {"prefix": STR, "why": TEXT},
        dict(NOTES),
        doc="variable name prefixes whose unknown members audit and doctor flag (a typo is silently ignored)",
    ),
    # --- framework jobs (matrices/jobs.yaml) ---
}
SECTIONS.update(FLOW_SECTIONS)

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
    "host_os": STR,
    "base_image": IMAGE,
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


def check_row(section: str, row) -> dict:
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
