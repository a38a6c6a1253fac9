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
    """The image is not in the engine (or a registry does not have it)."""


class ContainerNotFound(EngineError):
    """The container is gone (removed, or never created)."""


class BuildFailed(EngineError):
    """The engine ran the build and a step failed (exit code 1; the log tail was shown)."""

    exit_code = 1
