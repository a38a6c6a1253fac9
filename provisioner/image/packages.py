"""The requirement files an image installs, from the Stack and matrices/packages.yaml.

Layers, heaviest and least often changed first, so Docker's cache keeps them:

1. the framework: torch (+ its index) and torch_npu, or MindSpore, from the stack;
2. the package set's complete lock (training packages, this project's
   requirements and everything they need);
3. one file per `--with` extra that brings packages (DeepSpeed).

Every file is fully pinned and installed with `pip install --no-deps`, so a
build resolves nothing; `requirements.lock` is their concatenation, for people
and for `pip download -r requirements.lock` (filling an offline wheelhouse).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provisioner.errors import ProvisionError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class Layer:
    name: str  # file stem: framework, packages, deepspeed
    title: str
    lines: tuple[str, ...]
    build_isolation: bool = True
    env: dict = field(default_factory=dict)

    @property
    def file(self) -> str:
        return f"requirements/{self.name}.txt"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _env(stack: Mapping[str, Any]) -> dict:
    """PEP 508 marker environment of the image (Linux, CPython, the stack's Python and CPU)."""
    py = stack["python"]
    return {"python_version": py, "python_full_version": f"{py}.0", "platform_machine": stack["arch"],
            "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
            "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def _matches(specs, version: str) -> bool:
    from provisioner.versions import any_match

    return any_match(specs, version)


def select(matrix, stack: Mapping[str, Any]) -> dict:
    """The package set for a stack: the last row (overlays come last) whose framework, Python and (where the
    row names one) CANN ranges match. A CANN range exists for what the CANN decides, not torch: numpy 2
    with CANN before 9.0 fails torch_npu's set_device, so the torch 2.8/2.9 sets have a numpy-1 twin for it."""
    from provisioner.versions import PyRange

    if stack["framework"] == "mindspore":
        field_, version = "mindspore", stack["mindspore"]["version"]
    else:
        field_, version = "torch", stack["torch"]["version"]
    cann = (stack.get("cann") or {}).get("version")
    rows = matrix.rows("packages") if "packages" in matrix.data else []
    hits = [r for r in rows if r.get(field_) and _matches(r[field_], version)
            and (not r.get("cann") or (cann is not None and _matches(r["cann"], cann)))]
    fits = [r for r in hits if stack["python"] in PyRange(r["python"])]
    if not fits:
        label = "MindSpore" if field_ == "mindspore" else "torch"
        if hits:
            ranges = ", ".join(f"{r['id']} (Python {r['python']})" for r in hits)
            raise ProvisionError(f"no package set for {label} {version} on Python {stack['python']} in"
                                 f" matrices/packages.yaml (sets for {label} {version}: {ranges}); pass --python"
                                 " or add a set in an overlay (scripts/lock_packages.py resolves one)")
        covered = ", ".join(f"{r['id']}" for r in rows if r.get(field_)) or "none"
        raise ProvisionError(f"no package set for {label} {version} in matrices/packages.yaml (sets: {covered});"
                             " add one in an overlay (scripts/lock_packages.py resolves one)")
    row = fits[-1]
    _check_row(row)
    return row


def _requirement(line: str, where: str):
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        req = Requirement(line)
    except InvalidRequirement as exc:
        raise ProvisionError(f"{where}: bad lock line {line!r}: {exc}") from None
    pins = [s for s in req.specifier if s.operator in ("==", "===") and "*" not in s.version]
    if len(pins) != 1 or len(req.specifier) != 1:
        raise ProvisionError(f"{where}: lock line {line!r} must pin one exact version (name==version)")
    return req


def _check_row(row: dict) -> None:
    where = row.get("_at", "packages")
    lock: dict = {}
    for line in row["lock"]:
        req = _requirement(line, where)
        lock.setdefault(_norm(req.name), []).append(str(next(iter(req.specifier)).version))
    for name, version in row["pins"].items():
        if not _NAME.match(str(name)) or not isinstance(version, str):
            raise ProvisionError(f"{where}: pins must map a package name to a quoted version ({name!r})")
        if version not in lock.get(_norm(name), []):
            raise ProvisionError(f"{where}: set {row['id']!r} pins {name}=={version} but its lock has"
                                 f" {', '.join(lock.get(_norm(name), [])) or 'no such package'};"
                                 " regenerate it with scripts/lock_packages.py")
    for name, extra in (row.get("extras") or {}).items():
        if not isinstance(extra, dict) or not isinstance(extra.get("lock"), list):
            raise ProvisionError(f"{where}: extras.{name} needs a lock list")
        for line in extra["lock"]:
            _requirement(line, where)


def active_lines(lines, stack: Mapping[str, Any]) -> list:
    """The lock lines whose markers hold inside the image, as (line, Requirement)."""
    from packaging.requirements import Requirement

    env = _env(stack)
    out = []
    for line in lines:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            out.append((line, req))
    return out


def check_project(row: dict, stack: Mapping[str, Any], requirements: list[str], extras: tuple[str, ...]) -> None:
    """Every requirement of this project (and of its extras) must be met by the set's lock.

    The image installs the project with `--no-index` against the locked packages,
    so a requirement the lock does not cover would fail the build late; say it now.
    """
    from packaging.requirements import Requirement

    env = _env(stack)
    locked = {_norm(req.name): str(next(iter(req.specifier)).version) for _, req in active_lines(row["lock"], stack)}
    framework = {"torch", "torch-npu", "mindspore"}
    for text in requirements:
        req = Requirement(text)
        wanted = any(req.marker is None or req.marker.evaluate({**env, "extra": e}) for e in ("", *extras))
        if req.marker is not None and not wanted:
            continue
        name = _norm(req.name)
        if name in framework:
            continue
        version = locked.get(name)
        if version is None or not req.specifier.contains(version, prereleases=True):
            have = f"it has {name}=={version}" if version else f"it has no {name}"
            shown = f"{req.name}{req.specifier}"
            raise ProvisionError(f"{row.get('_at', 'packages')}: package set {row['id']!r} does not satisfy this"
                                 f" project's requirement {shown!r} ({have}); regenerate it with"
                                 " scripts/lock_packages.py")


def layers(matrix, stack: Mapping[str, Any], recipe, row: dict) -> list[Layer]:
    """The requirement files for a stack and recipe, in install order."""
    if stack["framework"] == "pytorch":
        lines = []
        if stack["torch"].get("index_url"):
            # torch's +cpu builds come only from this index; torch_npu and the rest from PyPI (or --pip-index-url).
            lines.append(f"--extra-index-url {stack['torch']['index_url']}")
        lines += [stack["torch"]["requirement"], stack["torch_npu"]["requirement"]]
        title = f"torch {stack['torch']['version']} and torch_npu {stack['torch_npu']['version']} (from the stack)"
    else:
        lines = [stack["mindspore"]["requirement"]]
        title = f"MindSpore {stack['mindspore']['version']} (from the stack)"
    out = [Layer("framework", title, tuple(lines))]
    active = [line for line, _ in active_lines(row["lock"], stack)]
    what = ("training packages, provision's requirements" if stack["framework"] == "pytorch"
            else "MindSpore's and provision's requirements")
    out.append(Layer("packages", f"package set {row['id']}: {what} and everything they need", tuple(active)))
    for name in sorted(stack.get("extras") or {}):
        install = (recipe.extras or {}).get(name.replace("_", "-")) or (recipe.extras or {}).get(name) or {}
        extra = (row.get("extras") or {}).get(name.replace("_", "-")) or (row.get("extras") or {}).get(name)
        if name in ("mindspeed_llm", "mindformers"):
            continue  # framework sets: their environment is matrices/frameworks.yaml (provisioner/image/frameworks.py)
        if extra is None:
            raise ProvisionError(f"{row.get('_at', 'packages')}: package set {row['id']!r} has no lock for"
                                 f" --with {name.replace('_', '-')}; add extras.{name.replace('_', '-')}"
                                 " (scripts/lock_packages.py resolves it)")
        extra_lines = tuple(line for line, _ in active_lines(extra["lock"], stack))
        env = {str(k): str(v) for k, v in sorted((install.get("env") or {}).items())}
        out.append(Layer(name.replace("_", "-"), f"--with {name.replace('_', '-')} (package set {row['id']})",
                         extra_lines, build_isolation=bool(install.get("build_isolation", True)), env=env))
    return out


def file_text(layer: Layer) -> str:
    return f"# {layer.title}\n" + "".join(f"{line}\n" for line in layer.lines)


def lock_text(all_layers: list[Layer], stack: Mapping[str, Any], row: dict, extra_head: list[str] | None = None) -> str:
    """requirements.lock: every layer, in install order, with where each group of pins comes from."""
    pins = ", ".join(f"{k}=={v}" for k, v in row["pins"].items())
    head = [
        "# Complete, pinned requirements of this image (install order; every line is installed with --no-deps).",
        f"# Stack {stack['id']}, Python {stack['python']}, {stack['arch']}; package set {row['id']}.",
    ]
    if extra_head:
        head += extra_head
    else:
        head += [
            f"# Top-level pins of the set: {pins}; every other line of the set is what they (and the framework",
            "# and provision) need, resolved once for the set (matrices/packages.yaml), not at build time.",
        ]
    head += [
        "# Fill an offline wheelhouse (on a machine with the image's Python and CPU architecture) with:",
        "#   pip download --no-deps -r requirements.lock -d WHEELHOUSE",
        "",
    ]
    body = []
    for layer in all_layers:
        body.append(f"# [{layer.name}] {layer.title}")
        body.extend(layer.lines)
        body.append("")
    return "\n".join(head + body)
