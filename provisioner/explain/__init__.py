"""Why a distributed job failed: read its logs (the rank-prefixed stream, torchrun's per-rank files, CANN plogs),
classify each line against matrices/errors.yaml, order the events across ranks in time and name the first failing
rank and chip, the cause and the fix; the ranks that only timed out waiting for it are its consequences.

    readlogs  finding and reading log files and directories (bounded), the rank / PID / device / time of a line
    rules     the error table as a line classifier
    analyze   events, their order, the first failure, the `provision.explain/1` document and its text

Used by `provision explain LOG...` (provisioner/cli/explain_cmds.py) and by a failed `provision launch`, which
imports it only on failure (provisioner/launch/run.py, jobrun.py).
"""

from __future__ import annotations


def explain_lines(lines: list[str], name: str = "launch output", matrix=None) -> dict:
    """The `provision.explain/1` document for lines already in memory (a launch's container output)."""
    from provisioner.explain import analyze, readlogs, rules

    if matrix is None:
        from provisioner.matrix import loader

        matrix = loader.load()
    return analyze.explain([readlogs.from_lines(lines, name)], rules.Rules.from_matrix(matrix))
