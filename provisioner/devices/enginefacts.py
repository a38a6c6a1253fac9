"""What the Docker engine knows that a device plan needs: which running
containers hold which chips, which runtimes are registered, an image's labels.

The matching (`holders`) is pure and works on container-inspect dicts. `gather`
asks the engine through the Docker SDK, imported lazily, with a short time-out;
an unreachable engine is not an error: the facts say so and the planner notes it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from provisioner.image.labels import STACK_LABEL  # noqa: F401 (re-exported for the planner's callers)

_NAMED_ID = re.compile(r"^[A-Za-z][A-Za-z0-9]*-(\d+)$")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


@dataclass(frozen=True)
class Holder:
    """A running container that maps a chip."""

    name: str
    id: str
    how: str  # "device" (HostConfig.Devices) or "runtime" (ASCEND_VISIBLE_DEVICES with the Ascend runtime)


@dataclass
class EngineFacts:
    reachable: bool
    note: str = ""
    containers: list[dict] = field(default_factory=list)  # inspect dicts of running containers
    runtimes: list[str] = field(default_factory=list)
    default_runtime: str | None = None
    image_labels: dict | None = None  # None: image not asked for or not found
    image_note: str = ""


def runtime_ids(value: str) -> list[int]:
    """Physical ids named by an ASCEND_VISIBLE_DEVICES value: 0-3,6 or npu-1 / Ascend910-2 names.

    Unreadable pieces are skipped (the runtime would have refused the container).
    """
    ids: set[int] = set()
    for piece in (value or "").split(","):
        piece = piece.strip()
        if not piece or piece.lower() == "void":
            continue
        m = _RANGE.match(piece)
        if m:
            lo = int(m[1])
            hi = int(m[2]) if m[2] else lo
            ids.update(range(lo, hi + 1))
            continue
        m = _NAMED_ID.match(piece)
        if m:
            ids.add(int(m[1]))
    return sorted(ids)


def _env(inspect: dict, name: str) -> str | None:
    for item in (inspect.get("Config") or {}).get("Env") or []:
        key, sep, value = item.partition("=")
        if sep and key == name:
            return value
    return None


def _same_path(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def holders(
    containers: list[dict],
    chip_paths: dict[int, str],
    runtime_name: str,
    runtime_env: str,
    runtime_applies: bool,
) -> dict[int, list[Holder]]:
    """Chip id -> running containers that map it.

    A container maps chip N when HostConfig.Devices has PathOnHost equal to the
    chip's node (as this machine resolves both paths), or when it runs under the
    Ascend runtime (`runtime_name` in HostConfig.Runtime) with `runtime_env`
    naming N. The runtime maps the host's real /dev nodes, so that second rule
    applies only when the plan's dev root is the host's (`runtime_applies`).
    """
    out: dict[int, list[Holder]] = {}
    for c in containers:
        name = (c.get("Name") or "").lstrip("/") or (c.get("Id") or "")[:12]
        cid = (c.get("Id") or "")[:12]
        host_cfg = c.get("HostConfig") or {}
        for dev in host_cfg.get("Devices") or []:
            src = dev.get("PathOnHost") or ""
            for chip, path in chip_paths.items():
                if src and _same_path(src, path):
                    out.setdefault(chip, []).append(Holder(name, cid, "device"))
        if runtime_applies and runtime_name in (host_cfg.get("Runtime") or "").lower():
            for chip in runtime_ids(_env(c, runtime_env) or ""):
                if chip in chip_paths:
                    out.setdefault(chip, []).append(Holder(name, cid, "runtime"))
    return {k: _dedup(v) for k, v in sorted(out.items())}


def _dedup(items: list[Holder]) -> list[Holder]:
    seen, out = set(), []
    for h in items:
        if (h.name, h.id) not in seen:
            seen.add((h.name, h.id))
            out.append(h)
    return out


def privileged(containers: list[dict]) -> list[str]:
    """Names of running privileged containers: they can open every chip without mapping one."""
    return sorted((c.get("Name") or "").lstrip("/") for c in containers if (c.get("HostConfig") or {}).get("Privileged"))


def gather(image: str | None = None, timeout: float = 3.0, want_containers: bool = True) -> EngineFacts:
    """Ask the engine; never raises. ``image``: also read that local image's labels."""
    from provisioner import engine

    try:
        client = engine.connect(timeout)
    except engine.EngineUnavailable as exc:
        return EngineFacts(False, note=f"no Docker engine reachable ({engine.short(exc, 120)})")
    facts = EngineFacts(True)
    try:
        info = client.info()
        facts.runtimes = sorted((info.get("Runtimes") or {}).keys())
        facts.default_runtime = info.get("DefaultRuntime")
        if want_containers:
            for summary in client.api.containers(filters={"status": "running"}):
                try:
                    facts.containers.append(client.api.inspect_container(summary["Id"]))
                except Exception:  # noqa: BLE001 - it stopped between list and inspect
                    continue
        if image:
            try:
                facts.image_labels = (client.api.inspect_image(image).get("Config") or {}).get("Labels") or {}
            except Exception:  # noqa: BLE001 - not pulled or built here
                facts.image_note = f"image {image} is not in the local engine; its stack label was not read"
    except Exception as exc:  # noqa: BLE001
        facts.reachable = False
        facts.note = f"Docker engine stopped answering ({engine.short(exc, 120)})"
    finally:
        try:
            client.close()
        except Exception:  # noqa: BLE001
            pass
    return facts

