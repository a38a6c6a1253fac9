"""`provision matrix` and `provision resolve`."""

from __future__ import annotations

import click


def register(group: click.Group) -> None:
    pass
