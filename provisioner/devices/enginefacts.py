"""What the container engine knows that a device plan needs: which running
containers hold which chips, which runtimes are registered, an image's labels.

The matching (`holders`) is pure and works on inspected containers
(engine.types.ContainerInfo). `gather` asks an engine (provisioner.engine) with
a short time-out; an unreachable engine is not an error: the facts say so and
the planner notes it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from provisioner import chipids

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.engine.base import Engine
    from provisioner.engine.types import ContainerInfo



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
    containers: list[ContainerInfo] = field(default_factory=list)  # the running containers, inspected
    runtimes: list[str] = field(default_factory=list)
    default_runtime: str | None = None
    image_labels: dict | None = None  # None: image not asked for or not found
    image_note: str = ""


def runtime_ids(value: str) -> list[int]:
    """Physical ids named by an ASCEND_VISIBLE_DEVICES value: 0-3,6 or npu-1 / Ascend910-2 names.

    Unreadable pieces are skipped (the runtime would have refused the container).
    """
    return chipids.read(value)[0]


def _same_path(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def holders(
    containers: list[ContainerInfo],
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
        for src in c.devices:
            for chip, path in chip_paths.items():
                if src and _same_path(src, path):
                    out.setdefault(chip, []).append(Holder(c.name, c.short_id, "device"))
        if runtime_applies and runtime_name in (c.runtime or "").lower():
            for chip in runtime_ids(c.env.get(runtime_env) or ""):
                if chip in chip_paths:
                    out.setdefault(chip, []).append(Holder(c.name, c.short_id, "runtime"))
    return {k: _dedup(v) for k, v in sorted(out.items())}


def _dedup(items: list[Holder]) -> list[Holder]:
    seen, out = set(), []
    for h in items:
        if (h.name, h.id) not in seen:
            seen.add((h.name, h.id))
            out.append(h)
    return out


def privileged(containers: list[ContainerInfo]) -> list[str]:
    """Names of running privileged containers: they can open every chip without mapping one."""
    return sorted(c.name for c in containers if c.privileged)


def gather(image: str | None = None, timeout: float = 3.0, want_containers: bool = True,
           engine: Engine | None = None) -> EngineFacts:
    """Ask the engine (`engine`, else the one at DOCKER_HOST); never raises. ``image``: also read its labels."""
    from provisioner import engine as engines
    from provisioner.engine.errors import EngineError, EngineUnavailable, ImageNotFound, short

    own = engine is None
    try:
        eng = engine if engine is not None else engines.connect(timeout)
    except EngineUnavailable as exc:
        return EngineFacts(False, note=f"no Docker engine reachable ({short(exc, 120)})")
    facts = EngineFacts(True)
    try:
        info = eng.info()
        facts.runtimes = list(info.runtimes)
        facts.default_runtime = info.default_runtime
        if want_containers:
            facts.containers = eng.containers()
        if image:
            try:
                facts.image_labels = eng.image(image).labels
            except ImageNotFound:
                facts.image_note = f"image {image} is not in the local engine; its stack label was not read"
    except EngineUnavailable as exc:
        facts = EngineFacts(False, note=f"no Docker engine reachable ({short(exc, 120)})")
    except EngineError as exc:
        facts.reachable = False
        facts.note = f"Docker engine stopped answering ({short(exc, 120)})"
    finally:
        if own:
            eng.close()
    return facts
