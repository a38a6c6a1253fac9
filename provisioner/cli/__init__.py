"""The ``provision`` command line: parse, call the library, print a table or JSON.

`main` is the console script. `provision --version` and a warm `provision resolve`
take the fast path (provisioner/cli/fast.py: same options table, same output, no
click import); everything else, and every error, goes through the click
application (provisioner/cli/app.py).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args in (["--version"], ["-V"]):
        from provisioner.cli.text import version_line

        print(version_line())
        return 0
    if args[:1] == ["launch"] and not {"-h", "--help"} & set(args[: args.index("--") if "--" in args else None]):
        from provisioner import engine

        engine.connect_early()  # docker-py's import and the first round trip overlap click and the planning
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
