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
from provisioner.cli.text import emit_json, refuse, refused_doc  # noqa: F401 (re-exported)


def click_option(opt: Opt, **extra):
    """The click option an Opt describes (its kind, range, choices, default, short flag)."""
    kwargs: dict = {"help": opt.help}
    if opt.kind == "flag":
        kwargs["is_flag"] = True
    else:
        kwargs["multiple"] = opt.multiple
    if opt.choices:
        kwargs["type"] = click.Choice(list(opt.choices))
    elif opt.kind == "int":
        kwargs["type"] = click.IntRange(opt.low, opt.high)
    elif opt.kind == "path":
        kwargs["type"] = click.Path()
    if opt.default is not None:
        kwargs["default"] = opt.default
    for key in ("required", "show_default"):
        if getattr(opt, key):
            kwargs[key] = True
    if opt.metavar:
        kwargs["metavar"] = opt.metavar
    flags = (opt.short, opt.flag) if opt.short else (opt.flag,)
    return click.option(*flags, opt.dest, **{**kwargs, **extra})


def click_options(opts, f):
    """Decorate `f` with the click options of `opts`, in their order in --help."""
    for opt in reversed(opts):
        f = click_option(opt)(f)
    return f


def json_option(f):
    return click_option(JSON)(f)


def matrix_option(f):
    return click_option(MATRIX, type=click.Path())(f)


def resolve_options(f):
    """All `provision resolve` options, for every command that builds on a Stack (the host options last)."""
    for opt in reversed(HOST):
        f = click_option(opt, type=click.Path())(f) if opt.dest != "for_host" else click_option(opt)(f)
    for opt in reversed(RESOLVE):
        f = click_option(opt)(f)
    return matrix_option(f)
