"""Audit checks of the chips npu-smi shows: npu-smi itself, health, busy chips, chip families, training
capability and the --card the user named."""

from __future__ import annotations

from provisioner.host.audit_context import AuditContext
from provisioner.host.findings import error, info, warning


def chip_label(chips: list[dict], host_chips: list[dict] | None = None) -> str:
    """'NPU 3' or, where an NPU holds several chips on this host (A3, 310 cards), 'NPU 3 chip 1'."""
    every = host_chips if host_chips is not None else chips
    npus = [c["npu"] for c in every]
    return ", ".join(f"NPU {c['npu']}" + (f" chip {c['chip']}" if c.get("chip") is not None and npus.count(c["npu"]) > 1
                                           else "") for c in chips)


def check_npu_smi(ctx: AuditContext):
    smi = ctx.npu_smi
    source = smi.get("source")
    if source == "absent":
        if not ctx.has_npu_hints:
            return  # nothing NPU here at all: check_stack_presence says so once
        yield warning("npu-smi-absent", "npu-smi not found (/usr/local/bin, /usr/local/sbin, /usr/bin, /usr/sbin); chips"
                  " and their health were not read",
                  "npu-smi comes with the Ascend driver package; or pass saved output with --npu-smi-output FILE")
        return
    for note in smi.get("notes") or []:
        if note.startswith("cannot read"):
            yield warning("npu-smi-output-unreadable", note, "check the --npu-smi-output path")
    if smi.get("error"):
        yield warning("npu-smi-failed", smi["error"],
                      "ret -8005/-8020 means another process or container holds the device: free it;"
                      " otherwise check the driver (dmesg, npu-smi info as root)")
    info_ = smi.get("info") or {}
    warns = info_.get("warnings") or []
    if info_ and not info_.get("chips") and not smi.get("error"):
        yield warning("npu-smi-unparsed", f"npu-smi output not understood: {'; '.join(warns) or 'no chip rows'}",
                      "report the output to provision (a new npu-smi layout); pass --json to see what was read")
    elif warns:
        yield warning("npu-smi-partly-unparsed", f"{len(warns)} npu-smi line(s) not understood, e.g. {warns[0]}",
                      "report the output to provision; the chips that were read are still checked")
    mapping = smi.get("mapping") or {}
    bad = sorted({r["chip"] for r in mapping.get("rows", []) if r["npu"] == -1})
    if bad:
        yield warning("npu-unavailable", f"npu-smi info -m lists chip(s) {bad} with NPU ID -1 (unavailable)",
                      "check the card's seating, power and driver logs")


def check_chip_health(ctx: AuditContext):
    bad = [c for c in ctx.chips if (c.get("health") or "").upper() not in ("OK", "WARNING")]
    warn = [c for c in ctx.chips if (c.get("health") or "").upper() == "WARNING"]
    if bad:
        states = ", ".join(sorted({c["health"] for c in bad}))
        yield error("chip-unhealthy", f"{chip_label(bad, ctx.chips)}: health {states}",
                    "exclude these chips from jobs; check `npu-smi info -t health -i <npu>` and the device logs")
    if warn:
        yield warning("chip-health-warning", f"{chip_label(warn, ctx.chips)}: health Warning",
                      "see `npu-smi info -t health -i <npu>`; avoid these chips for long runs until cleared")


def check_chip_busy(ctx: AuditContext):
    busy = [c for c in ctx.chips if c.get("processes")]
    if busy:
        procs = "; ".join(f"{chip_label([c], ctx.chips)}: " + ", ".join(f"pid {p['pid']} {p['name']}" for p in c["processes"])
                          for c in busy)
        yield warning("chip-busy", f"chip(s) in use: {procs}",
                      "a chip serves one container at a time (npu-smi/dcmi -8005 otherwise): stop those processes or"
                      " pick other chips")


def check_chip_family(ctx: AuditContext):
    unknown = [c for c in ctx.chips if not c.get("family")]
    if unknown:
        names = sorted({c["name"] for c in unknown})
        yield warning("chip-unknown", f"chip name(s) {', '.join(names)} not in the matrix ({chip_label(unknown, ctx.chips)})",
                      "pass --card to say what the host is, or add the name to a matrix overlay (chips: npu_smi_names)")
    notes = sorted({c["class_note"] for c in ctx.chips if c.get("family") and c.get("class_note")})
    for note in notes:
        yield info("chip-memory-unexpected", note)
    if len(ctx.families) > 1:
        per = "; ".join(f"{ctx.family_name(f)}: {chip_label([c for c in ctx.chips if c.get('family') == f], ctx.chips)}"
                        for f in ctx.families)
        yield warning("chips-mixed-families", f"chips of different families on one host ({per})",
                      "give each job chips of one family only (select /dev/davinciN per job); images are per family")


def check_training(ctx: AuditContext):
    if ctx.task != "train":
        return
    if ctx.card and ctx.card[0].get("training") is False:
        card = ctx.card[0]
        yield error("card-inference-only", f"{card['name']} is an inference product; it cannot be used for training",
                    "train on an A2/A3 training product, or use --task inference")
    cannot = [f for f in ctx.families if not ctx.matrix.family(f)["training"]]
    for fam in cannot:
        row = ctx.matrix.family(fam)
        chips = [c for c in ctx.chips if c.get("family") == fam]
        note = row.get("training_note") or "an inference chip"
        fallback = ", ".join(ctx.matrix.policy.get("training_fallback_cards", []))
        yield error("chip-inference-only", f"{chip_label(chips, ctx.chips)} ({row['name']}) cannot train: {note}",
                    f"train on a training product ({fallback}); keep this host for inference (--task inference)")


def check_card(ctx: AuditContext):
    if not ctx.card:
        return
    card, family = ctx.card
    if not ctx.chips:
        yield info("card-not-verified", f"--card {ctx.options.card}: no chips were read, so the card could not be"
                   " checked against the host")
        return
    found = ctx.families
    if found and family["id"] not in found:
        names = ", ".join(f"{ctx.family_name(f)}" for f in found)
        chips = ", ".join(sorted({c["name"] for c in ctx.chips}))
        yield error("card-family-mismatch",
                    f"--card {ctx.options.card} is {family['name']}, but this host has {names} (npu-smi names: {chips})",
                    "use the card this host really has (`provision matrix --section cards`), or audit the right host")
