"""Audit check of an image built by `provision build` against this host: architecture, chip family, the
driver its CANN needs (the HDK list its stack label carries wins over the local matrix), and, when it does not
fit, the stack the matrix recommends for this host."""

from __future__ import annotations

from provisioner import arch
from provisioner.host.audit_context import AuditContext
from provisioner.host.audit_driver import fit_findings
from provisioner.host.findings import error, info
from provisioner.resolve import driverfit


def check_image(ctx: AuditContext):
    stack = ctx.options.image_stack
    if stack is None:
        return
    ref = ctx.options.image or "the image"
    if not isinstance(stack, dict) or not isinstance(stack.get("cann"), dict) or not isinstance(stack.get("chip"), dict):
        yield error("image-label-invalid", f"{ref}: label org.provision.stack is not a provision stack",
                    "rebuild the image with `provision build`")
        return
    problems = 0
    built_for = arch.normalize(stack.get("arch"))
    if built_for and ctx.arch and built_for != ctx.arch:
        problems += 1
        yield error("image-arch-mismatch", f"{ref} is built for {built_for}; this host is {ctx.arch}",
                    f"build for this host: provision build --arch {ctx.arch}")
    fam = stack["chip"].get("family")
    if fam and ctx.families and fam not in ctx.families:
        problems += 1
        yield error("image-chip-mismatch",
                    f"{ref} is built for {ctx.family_name(fam)}; this host has"
                    f" {', '.join(ctx.family_name(f) for f in ctx.families)}",
                    "build an image for this host's chip (--card of this host)")
    cann = stack["cann"].get("version")
    driver = ctx.driver_version
    if cann and driver:
        label_notes: list[str] = []
        row, matrix = driverfit.stack_row(ctx.matrix, stack, label_notes)
        for note in label_notes:
            yield info("image-driver-list-unread", f"{ref}: {note}; the local matrix is used instead")
        if row is not None:
            for f in fit_findings("image-", driver, cann, row, matrix, f"{ref} (CANN {cann})", ctx.card_flag):
                if f.severity == "error":
                    problems += 1
                yield f
    elif cann and not driver:
        problems += 1
        yield error("image-no-driver", f"{ref} needs an NPU driver for CANN {cann}; none is installed here",
                    "install the Ascend HDK driver and firmware")
    if stack.get("task") == "train" and ctx.families and not any(ctx.matrix.family(f)["training"] for f in ctx.families):
        problems += 1
    if problems:
        yield from _recommend(ctx, stack)
    else:
        yield info("image-fits", f"{ref} (CANN {cann}, {ctx.family_name(fam) if fam else 'chip ?'}, {built_for}) can run on"
                   " this host")


def recommend(ctx: AuditContext, stack: dict | None = None) -> dict:
    """The stack the matrix would pick for this host (card, driver, arch), or why there is none."""
    from provisioner.errors import ProvisionError
    from provisioner.resolve import cached, request

    card = ctx.host_card
    if card is None:
        return {"stack": None, "reason": "the host's chip family is not known (pass --card)"}
    options = {"card": card, "driver": ctx.driver_version, "arch": ctx.arch, "task": ctx.task}
    if stack and stack.get("framework"):
        options["framework"] = stack["framework"]
    try:
        req = request.build(ctx.matrix, **options)
        return {"stack": cached.cached_resolve(ctx.matrix, req), "reason": None, "request": options}
    except ProvisionError as exc:
        return {"stack": None, "reason": str(exc), "request": options}


def _recommend(ctx: AuditContext, stack: dict):
    rec = recommend(ctx, stack)
    ctx.recommendation = rec
    flags = " ".join(f"--{k} {v}" for k, v in (rec.get("request") or {}).items() if v)
    if rec["stack"] is None:
        yield info("image-recommendation", f"the matrix has no stack for this host: {rec['reason']}")
        return
    s = rec["stack"]
    tn = f", torch_npu {s['torch_npu']['version']}" if s.get("torch_npu") else ""
    ms = f", MindSpore {s['mindspore']['version']}" if s.get("mindspore") else ""
    yield info("image-recommendation",
               f"for this host the matrix recommends CANN {s['cann']['version']} on {s['base_image']['ref']}{tn}{ms}"
               f" (Python {s['python']})", f"provision build {flags}")
