"""Audit check of the launch variables a job will run with (`provision audit --env-file/--job/-e`): known
HCCL_* / TORCH_HCCL_* / torch_npu names validated by the matrix's `audit_env` rules (host.launchvars),
unknown names under those prefixes flagged, legacy names noted. Ranges are those of the chip family the job
runs on (--card, else the host's one family; neither: the rule's general bounds)."""

from __future__ import annotations

from provisioner.host import launchvars
from provisioner.host.audit_context import AuditContext
from provisioner.host.findings import info, warning


def check_launch_env(ctx: AuditContext):
    env = ctx.options.launch_env
    if env is None:
        return
    where = ctx.options.launch_env_source or "the launch environment"
    family = ctx.card[1]["id"] if ctx.card else (ctx.families[0] if len(ctx.families) == 1 else None)
    issues = launchvars.check(ctx.matrix, env, family)
    for issue in issues:
        make = info if issue.problem == launchvars.LEGACY else warning
        yield make(f"launch-env-{issue.problem}", f"{where}: {issue.message}", issue.remedy)
    checked = launchvars.relevant(ctx.matrix, env)
    if not issues:
        yield info("launch-env-ok", f"{where}: {len(checked)} launch variable(s) checked"
                   + (f" ({', '.join(sorted(checked))})" if checked else ""))
