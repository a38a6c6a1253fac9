"""The trainer's input error: a bad config or data file, reported as one line that names the field."""

from __future__ import annotations

from provisioner.errors import ProvisionError


class ConfigError(ProvisionError):
    """A bad trainer config or data file; the message names the field or file:line."""
