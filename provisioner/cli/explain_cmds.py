"""`provision explain LOG...`: why a job failed (first failing rank and chip, cause, fix, the ranks that only
timed out); the work is in provisioner/explain/."""

from __future__ import annotations

import click

from provisioner.cli.common import emit_json, json_option, matrix_option


def register(group: click.Group) -> None:
    group.add_command(explain_cmd)


@click.command("explain")
@click.argument("logs", nargs=-1, metavar="LOG...")
@click.option("--events", "max_events", type=click.IntRange(0, 1000), default=12, show_default=True,
              help="Events to list in time order (text output).")
@matrix_option
@json_option
def explain_cmd(logs, max_events, overlays, as_json):
    """Explain a failed run from its logs: the rank-prefixed output of `provision launch` or torchrun --tee, torchrun
    --log-dir files, CANN plog directories (~/ascend/log/debug/plog). Each LOG is a file or a directory.

    Names the first failing rank and chip, the cause and the fix from matrices/errors.yaml (every row cites its
    source); the ranks that only timed out waiting for it are listed as consequences.
    Exit 0: explained, or no failure found; 1: a failure no row explains; 2: bad input.
    """
    from provisioner.explain import analyze, readlogs, rules
    from provisioner.matrix import loader

    m = loader.load(list(overlays))
    doc = analyze.explain(readlogs.read_paths(list(logs)), rules.Rules.from_matrix(m))
    if as_json:
        emit_json(doc)
    else:
        for line in analyze.render(doc, max_events):
            click.echo(line)
    return analyze.exit_code(doc)
