"""One exception family. The CLI turns any of these into one line on stderr
and exit code 2; nothing else should reach the user as a traceback."""

from __future__ import annotations


class ProvisionError(Exception):
    """Bad input or an impossible request: exit code 2, one line."""

    exit_code = 2


class MatrixError(ProvisionError):
    """A matrix file is malformed or inconsistent; the message starts with file:line."""


class ResolveError(ProvisionError):
    """No stack satisfies the request. Carries the reasons, the nearest valid stacks and, for a request resolved
    for a host (resolve/hostfit.py), that host's record."""

    def __init__(self, message: str, reasons: list[str] | None = None, alternatives: list | None = None):
        super().__init__(message)
        self.reasons = reasons or [message]
        self.alternatives = alternatives or []
        self.host: dict | None = None
