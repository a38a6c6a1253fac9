"""The fast paths of `provision resolve` and `provision launch`: the same options (one table, options.py) and
output without importing click (about half the start-up time of a warm resolve; ~0.02 s of the ~0.1 s a launch
spends before its container is created). The host is read here as in the click path
(provisioner/cli/hoststack.py): on a machine without an Ascend driver that costs a stat per driver directory.

They handle only what they can parse for certain; any doubt (help, an unknown or repeated option, a bad choice
or number) returns None and the click CLI takes over, so every usage message comes from one place. resolve also
hands a refusal or an error to click; launch, once parsed, runs as the click command would (launching.main)
and its errors are the same one line (text.guarded).
"""

from __future__ import annotations

from provisioner.cli.options import DEVICE_HOST, HOST, JSON, LAUNCH, LAUNCH_NET, MATRIX, RESOLVE, Opt

RESOLVE_OPTS = (*RESOLVE, *HOST, MATRIX, JSON)
LAUNCH_OPTS = (MATRIX, *DEVICE_HOST, *LAUNCH_NET, *LAUNCH, JSON)


def parse(args: list[str], opts: tuple[Opt, ...], rest: str | None = None) -> dict | None:
    """click's reading of `args` for the options `opts` (and, with `rest`, the words after `--` under that key),
    or None when click should read them: an unknown, repeated or malformed option, a value that starts with
    `-`, an int out of its range, a choice not offered, a missing required option, a word before `--`."""
    by_flag: dict[str, Opt] = {}
    for o in opts:
        by_flag[o.flag] = o
        if o.short:
            by_flag[o.short] = o
    values: dict = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--" and rest is not None:
            values[rest] = tuple(args[i + 1:])
            break
        flag, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        opt = by_flag.get(flag)
        if opt is None or (opt.dest in values and not opt.multiple):
            return None
        i += 1
        if opt.kind == "flag":
            if eq:
                return None
            values[opt.dest] = True
            continue
        if not eq:
            if i >= len(args) or args[i].startswith("-"):
                return None
            value = args[i]
            i += 1
        if opt.choices and value not in opt.choices:
            return None
        typed: str | int = value
        if opt.kind == "int":
            if not (value.isascii() and value.isdigit()):
                return None
            typed = int(value)
            if (opt.low is not None and typed < opt.low) or (opt.high is not None and typed > opt.high):
                return None
        values[opt.dest] = (*values.get(opt.dest, ()), typed) if opt.multiple else typed
    for o in opts:
        if o.dest not in values:
            if o.required:
                return None
            values[o.dest] = () if o.multiple else (False if o.kind == "flag" else o.default)
    if rest is not None:
        values.setdefault(rest, ())
    return values


def try_launch(args: list[str]) -> int | None:
    """`provision launch` without click when its options parse for certain (else None: click reads them)."""
    values = parse(args, LAUNCH_OPTS, rest="args")
    if values is None:
        return None
    from provisioner.cli import launching, text

    return text.guarded(lambda: launching.main(**values))


def try_resolve(args: list[str]) -> int | None:
    values = parse(args, RESOLVE_OPTS)
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
