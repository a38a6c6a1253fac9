"""click options and output helpers shared by the command modules (the option data is in options.py)."""

from __future__ import annotations

import click

from provisioner.cli.options import (  # noqa: F401 (re-exported)
    HOST,
    JSON,
    MATRIX,
    RESOLVE,
    RESOLVE_KEYS,
    Opt,
    pop_host,
    pop_resolve,
)
from provisioner.cli.text import emit_json, refused_doc


def _click_option(opt: Opt, **extra):
    kwargs = {"help": opt.help, "multiple": opt.multiple, **extra}
    if opt.choices:
        kwargs["type"] = click.Choice(list(opt.choices))
    return click.option(opt.flag, opt.dest, **kwargs)


def json_option(f):
    return click.option(JSON.flag, JSON.dest, is_flag=True, help=JSON.help)(f)


def matrix_option(f):
    return _click_option(MATRIX, type=click.Path())(f)


def resolve_options(f):
    """All `provision resolve` options, for every command that builds on a Stack (the host options last)."""
    for opt in reversed(HOST):
        f = _click_option(opt, type=click.Path())(f) if opt.dest != "for_host" else _click_option(opt)(f)
    for opt in reversed(RESOLVE):
        f = _click_option(opt)(f)
    return matrix_option(f)


def refuse(schema: str, exc, as_json: bool) -> int:
    """A refusal with reasons (PlanRefused): the refused document and exit 2 with --json, else `exc` is raised
    (one line on stderr)."""
    if as_json:
        emit_json(refused_doc(schema, exc.reasons))
        return 2
    raise exc
