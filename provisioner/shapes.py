"""The shapes of the plain dicts that flow between the packages, as TypedDicts for the type checker.

    Stack       resolve -> image (labels), devices, host (audit, doctor), cli   (schema provision.stack/1)
    Candidate   resolve's candidates -> solve / explain / stack                  (internal to resolve/)
    HostReport  host.probe -> host.audit and its checks, cli                     (schema provision.host/1)

The values stay plain JSON-ready dicts at run time (they are written to labels, caches and --json output).
Import this module only under TYPE_CHECKING: it costs `typing`, which the CLI's fast path never imports.
A Stack read back from an image label or a file is someone else's data: readers still use .get().
"""

from __future__ import annotations

from typing import Any, TypedDict

# --------------------------------------------------------------------- Stack


class StackCard(TypedDict):
    id: str
    name: str
    form: str
    chips_per_card: int | None
    chips_per_server: int | None


class StackChip(TypedDict):
    family: str
    name: str
    image_chip: str | None
    device_family: str
    k8s_resource: str | None
    training: bool
    bf16: bool


class StackCann(TypedDict):
    version: str
    status: str


class StackBaseImage(TypedDict):
    ref: str
    tag: str | None
    official: bool
    mirrors: list[str]


class StackDriver(TypedDict, total=False):
    paired: list[str]
    compatible: list[str]
    summary: str
    inherited_from: str | None
    host: str  # with --driver: the host's driver and how it fits
    fit: str


class StackTorch(TypedDict):
    version: str
    requirement: str
    index_url: str | None


class StackTorchNpu(TypedDict):
    version: str
    requirement: str
    product: str | None
    branch: str | None
    released_with_cann: str
    on_pypi: bool


class StackMindSpore(TypedDict):
    version: str
    requirement: str
    on_pypi: bool


class StackApex(TypedDict):
    repo: str
    ref: str  # the branch the commit was read from (a label)
    commit: str  # what the build checks out and verifies
    upstream_repo: str | None
    upstream_commit: str | None
    setuptools: str
    setuptools_max: str


class StackDtype(TypedDict):
    compute: str
    loss_scaling: str | None


class Stack(TypedDict, total=False):
    """One resolved, consistent choice (resolve.stack.make_stack); `id` hashes the choices, not the prose."""

    schema: str
    id: str
    card: StackCard
    chip: StackChip
    task: str
    arch: str
    os: str
    python: str
    framework: str
    cann: StackCann
    base_image: StackBaseImage
    driver: StackDriver
    torch: StackTorch | None
    torch_npu: StackTorchNpu | None
    mindspore: StackMindSpore | None
    apex: StackApex | None
    extras: dict[str, dict[str, Any]]
    dtype: StackDtype
    profile: str | None
    request: dict[str, Any]
    explain: dict[str, str]
    warnings: list[str]
    sources: dict[str, list[str]]
    relaxed: list[str]  # on the alternatives of a refusal: the flags dropped to get it


# ----------------------------------------------------------------- Candidate


class _ImageFields(TypedDict):
    tag: str | None
    chip: str | None
    os: str
    python: str
    devel: bool
    source: list[str]


class Image(_ImageFields, total=False):
    """An official CANN base image of the matrix (or a custom --base-image stand-in)."""

    listed: bool  # False: seen published, but not in today's official list
    evidence: str | None  # where an unlisted image was seen


class Candidate(TypedDict, total=False):
    """A complete combination the matrix allows for a chip (resolve.candidates)."""

    framework: str  # pytorch | mindspore
    wheel: dict[str, Any]  # the torch_npu row (pytorch)
    mindspore_row: dict[str, Any]  # the MindSpore row (mindspore)
    mindspore: str
    torch: str | None
    torch_npu: str | None
    cann: str
    cann_row: dict[str, Any]
    paired: bool
    image: Image
    python: str
    os: str
    soft: list[str]
    unlisted: list[str]  # the warning for a base image outside today's official list
    via_sets: list[str]  # the MindSpeed sets whose own guide alone pairs this torch_npu with this CANN


# ---------------------------------------------------------------- HostReport


class ProbeError(TypedDict):
    section: str
    error: str


class HostReport(TypedDict, total=False):
    """Facts read from a host root (host.probe); a section whose probe failed is None."""

    schema: str
    root: str
    dev_root: str
    live: bool
    probe_errors: list[ProbeError]
    system: dict[str, Any] | None  # arch, kernel, os, memory_mb
    driver: dict[str, Any] | None  # dir, roots, info, version, package_version, compatible_firmware, lib64
    firmware: dict[str, Any] | None  # dir, info, version, package_version, compatible_drivers
    install_info: dict[str, str] | None
    cann: list[dict[str, Any]] | None  # kind, layout, version, arch, info_file, paths, ...
    npu_smi: dict[str, Any] | None  # source, path, version, info, mapping, error, notes, chips
    devices: dict[str, Any] | None  # nodes (hostfs.scan_devices records), davinci_ids
    account: dict[str, Any] | None  # user, uid, user_gid, gid, group
    docker: dict[str, Any] | None  # binaries, daemon_json, ascend_runtime, cdi, engine
    runtime_paths: dict[str, Any] | None  # list, checked, problems
    shm: dict[str, Any] | None  # path, total_mb, free_mb
