"""The engine's errors, inside the project's error family (a ProvisionError: one line on stderr, exit 2),
and the one function that shortens an engine's message to one line."""

from __future__ import annotations

from provisioner.errors import ProvisionError


def short(exc: BaseException | str, limit: int = 160) -> str:
    """An exception (or text) as one line of at most `limit` characters."""
    text = " ".join(str(exc).split()) or (type(exc).__name__ if isinstance(exc, BaseException) else "")
    return text if len(text) <= limit else text[: limit - 3] + "..."


class EngineError(ProvisionError):
    """The engine answered and refused or failed a request; str() is one short line."""


class EngineUnavailable(EngineError):
    """No engine answered: the SDK is missing, the socket is absent, refused or dead.

    `reason` is the short cause, `where` the address that was tried.
    """

    def __init__(self, reason: str, where: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.where = where


class ImageNotFound(EngineError):
    """The image is not in the engine (or a registry answered that it does not have it)."""


class PullFailed(EngineError):
    """The engine could not pull `ref` from its registry (the registry answered with an error).

    `registry` is the host the reference names (docker.io when it names none), `reason` the engine's cause.
    """

    def __init__(self, ref: str, reason: str):
        super().__init__(f"pull {ref}: {reason}")
        self.ref = ref
        self.registry = registry_of(ref)
        self.reason = reason


class RegistryUnreachable(PullFailed):
    """The registry did not answer at all: its name does not resolve, the connection is refused or times out,
    TLS fails. Another registry, a mirror or a saved image is the way forward, not another tag."""


def registry_of(ref: str) -> str:
    """The registry host of an image reference, as the engine reads it (docker.io when the first part of the
    path is not a host: no dot, no port, not localhost)."""
    first, sep, _ = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


class ContainerNotFound(EngineError):
    """The container is gone (removed, or never created)."""


class BuildFailed(EngineError):
    """The engine ran the build and a step failed (exit code 1; the log tail was shown)."""

    exit_code = 1
