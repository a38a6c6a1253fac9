"""The ``provision`` command line: parse, call the library, print a table or JSON.

`main` is the console script. `provision --version`, a warm `provision resolve`
and a `provision launch` whose options parse for certain take the fast path
(provisioner/cli/fast.py: same options table, same output, no click import);
everything else, and every usage error, goes through the click application
(provisioner/cli/app.py).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return _main(args)
    except BrokenPipeError:
        # The reader went away (`provision ... | head`): no traceback, and no second error when Python
        # flushes stdout at exit.
        _quiet_stdout()
        return 141


def _quiet_stdout() -> None:
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _main(args: list[str]) -> int:
    for n, arg in enumerate(args, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            # An argument that was not UTF-8 on the command line (Python keeps its bytes as surrogates).
            shown = arg.encode("utf-8", "surrogateescape").decode("ascii", "backslashreplace")
            sys.stderr.write(f"provision: error: argument {n} is not UTF-8 text: {shown[:80]!r}\n")
            return 2
        if "\x00" in arg:  # no command line can carry one; a caller of main() could
            sys.stderr.write(f"provision: error: argument {n} holds a NUL character\n")
            return 2
    if args in (["--version"], ["-V"]):
        from provisioner.cli.text import version_line

        print(version_line())
        return 0
    if args[:1] == ["launch"] and not {"-h", "--help"} & set(args[: args.index("--") if "--" in args else None]):
        from provisioner import engine

        engine.connect_early()  # the engine's first round trips overlap the imports and the planning
        from provisioner.cli.fast import try_launch

        code = try_launch(args[1:])
        if code is not None:
            return code
    if args[:1] == ["resolve"]:
        from provisioner.cli.fast import try_resolve

        code = try_resolve(args[1:])
        if code is not None:
            return code
    from provisioner.cli.app import run

    return run(args)


def __getattr__(name: str):
    if name == "cli":  # the click group, for callers that drive click directly
        from provisioner.cli.app import cli

        return cli
    raise AttributeError(name)
