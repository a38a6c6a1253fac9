"""The click application behind ``provision``: the command group and error handling.

Each command module imports only click at module level and the library code it
needs inside its functions, so ``provision --help`` stays fast.
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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-V", "--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print the version of provision and exit.")
def cli() -> None:
    """Consistent Ascend NPU stacks: resolve versions, build images, run and audit hosts."""


def _register() -> None:
    # Command modules are small and import only click at module level.
    from provisioner.cli import audit_cmds, device_cmds, image_cmds, launch_cmds, matrix_cmds, selftest_cmds

    for module in (matrix_cmds, device_cmds, launch_cmds, selftest_cmds, audit_cmds, image_cmds):
        module.register(cli)


_register()


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

