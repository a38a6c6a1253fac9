"""The click application behind ``provision``: the command group and error handling.

Each command module imports only click at module level and the library code it
needs inside its functions, so ``provision --help`` stays fast; and a command's
module is imported only when that command runs (COMMANDS), so `provision launch`
does not import the other ten.
"""

from __future__ import annotations

import click

from provisioner.errors import ProvisionError
from provisioner.text import one_line
from provisioner.validate import comment


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from provisioner.cli.text import version_line

        click.echo(version_line())
        ctx.exit()


# Each command and the module that registers it (tests check this table against the modules' `register`).
COMMANDS = {
    "audit": "audit_cmds", "doctor": "audit_cmds",
    "cdi": "device_cmds", "k8s": "device_cmds", "ranktable": "device_cmds", "run-cmd": "device_cmds",
    "build": "image_cmds", "render": "image_cmds",
    "launch": "launch_cmds",
    "matrix": "matrix_cmds", "resolve": "matrix_cmds",
    "selftest": "selftest_cmds",
}


class _LazyGroup(click.Group):
    """A group whose commands are registered when first asked for, by importing their module (COMMANDS)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            import importlib

            importlib.import_module(f"provisioner.cli.{COMMANDS[cmd_name]}").register(self)
        return self.commands.get(cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-V", "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print the version of provision and exit.")
def cli() -> None:
    """Consistent Ascend NPU stacks: resolve versions, build images, run and audit hosts."""


def run(argv: list[str] | None = None) -> int:
    """Run the click CLI: every failure becomes one line on stderr and exit code 2."""
    try:
        rv = cli.main(args=argv, prog_name="provision", standalone_mode=False)
    except ProvisionError as exc:
        click.echo(f"provision: error: {comment(one_line(str(exc)))}", err=True)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort:
        click.echo("provision: aborted", err=True)
        return 130
    except click.ClickException as exc:
        click.echo(f"provision: error: {comment(one_line(exc.format_message()))}", err=True)
        return 2
    except OSError as exc:
        # A path the user named that the system refuses (too long, a loop, no permission, ...): bad input.
        if isinstance(exc, BrokenPipeError):
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"provision: error: {comment(one_line(where + (exc.strerror or str(exc))))}", err=True)
        return 2
    except KeyboardInterrupt:
        click.echo("provision: interrupted", err=True)
        return 130
    return rv if isinstance(rv, int) else 0

