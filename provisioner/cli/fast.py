"""The fast path of `provision resolve`: the same options and output without
importing click (about half the start-up time of a warm call). The host is read
here as in the click path (provisioner/cli/hoststack.py): on a machine without
an Ascend driver that costs a stat per driver directory.

It handles only what it can parse for certain and a stack that resolves; any
doubt (help, an unknown or repeated option, a bad choice, a refusal, an error)
returns None and the click CLI takes over, so every message comes from one place.
"""

from __future__ import annotations

from provisioner.cli.options import HOST, JSON, MATRIX, RESOLVE, Opt

_BY_FLAG: dict[str, Opt] = {o.flag: o for o in (*RESOLVE, *HOST, MATRIX)}


def parse(args: list[str]) -> dict | None:
    """click's reading of `args`, or None when click should read them."""
    values: dict = {"as_json": False}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == JSON.flag:
            values["as_json"] = True
            i += 1
            continue
        flag, eq, value = arg.partition("=")
        opt = _BY_FLAG.get(flag)
        if opt is None:
            return None
        if not eq:
            if i + 1 >= len(args) or args[i + 1].startswith("-"):
                return None
            value = args[i + 1]
            i += 1
        i += 1
        if opt.choices and value not in opt.choices:
            return None
        if opt.multiple:
            values[opt.dest] = (*values.get(opt.dest, ()), value)
        elif opt.dest in values:
            return None
        else:
            values[opt.dest] = value
    return values


def try_resolve(args: list[str]) -> int | None:
    values = parse(args)
    if values is None:
        return None
    from provisioner.cli import hoststack, text
    from provisioner.cli.options import pop_host, pop_resolve

    as_json = values.pop("as_json")
    overlays = values.pop(MATRIX.dest, ())
    options = pop_resolve({o.dest: values.get(o.dest, () if o.multiple else None) for o in RESOLVE})
    host = pop_host({o.dest: values.get(o.dest, () if o.multiple else None) for o in HOST})
    try:
        _, stack, record = hoststack.stack_for(overlays, options, host)
    except Exception:  # noqa: BLE001 - refusals and errors are told by the click path
        return None
    hoststack.print_notes(record)
    try:
        if as_json:
            text.emit_json({"schema": text.RESOLVE_SCHEMA, "status": "ok", "stack": stack})
        else:
            from provisioner.resolve.report import format_stack

            print(format_stack(stack))
    except BrokenPipeError:  # `provision resolve | head`: as the click path does
        return 0
    return 0
