"""The click application behind ``provision``: the command group and error handling.

Each command module imports only click at module level and the library code it
needs inside its functions, so ``provision --help`` stays fast; and a command's
module is imported only when that command runs (COMMANDS), so `provision launch`
does not import the other ten.
"""

from __future__ import annotations

import click


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
    "explain": "explain_cmds",
    "launch": "launch_cmds",
    "matrix": "matrix_cmds", "resolve": "matrix_cmds",
    "preflight": "preflight_cmds",
    "selftest": "selftest_cmds",
    "diff": "upgrade_cmds", "upgrade": "upgrade_cmds",
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
    from provisioner.cli.text import error_line, guarded

    def main() -> int:
        try:
            rv = cli.main(args=argv, prog_name="provision", standalone_mode=False)
        except click.exceptions.Exit as exc:
            return exc.exit_code
        except click.Abort:
            click.echo("provision: aborted", err=True)
            return 130
        except click.ClickException as exc:
            error_line(exc.format_message())
            return 2
        return rv if isinstance(rv, int) else 0

    return guarded(main)
