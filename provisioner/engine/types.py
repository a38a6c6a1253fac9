"""Typed results of the engine: what an image, a container, the engine itself and a build step look like to
the rest of the package.

Each is read from the engine's own JSON (`docker image inspect`, `docker container inspect`, `/version` and
`/info`, the classic builder's message stream) by one `from_*` function, which the real engine (docker.py) and
the fake (fake.py) share, so both give the same objects for the same payloads.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def env_dict(items: list[str] | None) -> dict[str, str]:
    """An engine's `KEY=VALUE` list as a dict (a bare `KEY` has no value and is left out)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if sep and key:
            out[key] = value
    return out


@dataclass(frozen=True)
class ImageInfo:
    """A local image: the reference asked for, its id, labels, environment, tags, size in bytes, the
    architecture the engine records for it (amd64, arm64, ...; None when it records none) and when it was
    created (the engine's RFC 3339 time, which sorts as text)."""

    ref: str
    id: str
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    size: int | None = None
    arch: str | None = None
    created: str = ""

    @classmethod
    def from_inspect(cls, ref: str, payload: dict) -> ImageInfo:
        cfg = payload.get("Config") or {}
        return cls(ref=ref, id=payload.get("Id") or "", labels=dict(cfg.get("Labels") or {}),
                   env=env_dict(cfg.get("Env")), tags=tuple(payload.get("RepoTags") or ()), size=payload.get("Size"),
                   arch=payload.get("Architecture") or None, created=str(payload.get("Created") or ""))


@dataclass(frozen=True)
class ContainerInfo:
    """A container as `docker container inspect` shows it, with what the device planner asks of it."""

    id: str
    name: str
    image: str
    status: str  # created | running | exited | ...
    exit_code: int | None
    devices: tuple[str, ...]  # HostConfig.Devices[].PathOnHost
    runtime: str | None  # HostConfig.Runtime (runc, ascend, ...)
    privileged: bool
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def short_id(self) -> str:
        return self.id[:12]

    @property
    def running(self) -> bool:
        return self.status == "running"

    @classmethod
    def from_inspect(cls, payload: dict) -> ContainerInfo:
        cfg = payload.get("Config") or {}
        host = payload.get("HostConfig") or {}
        state = payload.get("State") or {}
        cid = payload.get("Id") or ""
        return cls(
            id=cid,
            name=(payload.get("Name") or "").lstrip("/") or cid[:12],
            image=cfg.get("Image") or payload.get("Image") or "",
            status=state.get("Status") or ("running" if state.get("Running") else "unknown"),
            exit_code=state.get("ExitCode"),
            devices=tuple(d.get("PathOnHost") or "" for d in host.get("Devices") or []),
            runtime=host.get("Runtime"),
            privileged=bool(host.get("Privileged")),
            env=env_dict(cfg.get("Env")),
            labels=dict(cfg.get("Labels") or {}),
        )


@dataclass(frozen=True)
class EngineInfo:
    """The engine's version and the runtimes it has registered."""

    version: str | None
    api_version: str | None
    runtimes: tuple[str, ...]
    default_runtime: str | None
    cdi_spec_dirs: tuple[str, ...] | None = None

    @classmethod
    def from_payloads(cls, version: dict, info: dict) -> EngineInfo:
        cdi = info.get("CDISpecDirs")
        return cls(version=version.get("Version"), api_version=version.get("ApiVersion"),
                   runtimes=tuple(sorted((info.get("Runtimes") or {}).keys())),
                   default_runtime=info.get("DefaultRuntime"),
                   cdi_spec_dirs=tuple(cdi) if cdi is not None else None)


@dataclass(frozen=True)
class BuildEvent:
    """One message of a build's log stream.

    kind: "stream" (builder output, `text`), "status" (pulls, `text`), "aux" (the built image's `image_id`),
    or "error" (`text` is the engine's error message).
    """

    kind: str
    text: str = ""
    image_id: str | None = None

    @classmethod
    def from_message(cls, message: dict) -> BuildEvent:
        if "error" in message or "errorDetail" in message:
            detail = message.get("errorDetail") or {}
            return cls("error", str(detail.get("message") or message.get("error") or "the build failed"))
        aux = message.get("aux")
        if isinstance(aux, dict) and "ID" in aux:
            return cls("aux", image_id=aux["ID"])
        if "stream" in message:
            return cls("stream", str(message["stream"]))
        return cls("status", str(message.get("status") or ""))
