"""`provision resolve` and `provision matrix`."""

from __future__ import annotations

import click

from provisioner.cli.common import (
    emit_json,
    json_option,
    matrix_option,
    pop_host,
    pop_resolve,
    resolve_options,
)
from provisioner.cli.text import RESOLVE_SCHEMA, refused_doc
from provisioner.errors import ResolveError
from provisioner.resolve.report import format_stack
from provisioner.text import table

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


def register(group: click.Group) -> None:
    from provisioner.cli import verify_cmds

    group.add_command(resolve_cmd)
    group.add_command(matrix_cmd)
    matrix_cmd.add_command(verify_cmds.verify_cmd)
    matrix_cmd.add_command(verify_cmds.sync_cmd)


@click.command("resolve")
@resolve_options
@json_option
def resolve_cmd(overlays, as_json, **kwargs):
    """Resolve a card and constraints into one consistent stack, explaining every choice.

    On a host with an Ascend driver (this machine, or the host tree at --root)
    the stack is limited to what that host runs: its driver, its chips (so
    --card may be left out), its architecture, and its OS family as a
    preference. --for-host none resolves for another machine.

    Impossible requests are refused (exit code 2) with the reasons and the
    nearest valid stacks.
    """
    from provisioner.cli import hoststack

    options = pop_resolve(kwargs)
    host = pop_host(kwargs)
    try:
        m, stack, record = hoststack.stack_for(overlays, options, host)
    except ResolveError as exc:
        hoststack.print_notes(getattr(exc, "host", None))
        return _refused(exc, options, as_json, overlays, host)
    hoststack.print_notes(record)
    if as_json:
        emit_json({"schema": RESOLVE_SCHEMA, "status": "ok", "stack": stack})
    else:
        click.echo(format_stack(stack))
    return 0


def _refused(exc: ResolveError, options: dict, as_json: bool, overlays=(), host: dict | None = None) -> int:
    from provisioner.cli import hoststack

    fix = hoststack.known_good(overlays, options, host or {}) if options.get("profile") else None
    if as_json:
        emit_json(refused_doc(RESOLVE_SCHEMA, exc.reasons, alternatives=exc.alternatives,
                              known_good=fix and fix["stack"], known_good_host=fix and fix["host"],
                              host=_public(getattr(exc, "host", None))))
        return 2
    click.echo(f"provision: refused: {exc.reasons[0]}", err=True)
    for reason in exc.reasons[1:]:
        click.echo(f"  - {reason}", err=True)
    if fix:
        _print_fix(fix)
    if exc.alternatives:
        click.echo("\nNearest valid stacks:", err=True)
        for n, alt in enumerate(exc.alternatives, 1):
            click.echo(f"  {n}. {relaxed_label(alt)}: {summary(alt)}", err=True)
    return 2


def _public(record: dict | None) -> dict | None:
    from provisioner.resolve.hostfit import public

    return public(record)


def relaxed_label(alt: dict) -> str:
    dropped = [f for f in alt["relaxed"] if not f.startswith("--card ")]
    moved = [f for f in alt["relaxed"] if f.startswith("--card ")]
    parts = []
    if moved:
        parts.append(f"on {alt['card']['id']} instead of {moved[0]}")
    if dropped:
        parts.append(f"without {', '.join(dropped)}")
    return "; ".join(parts)


def _print_fix(fix: dict) -> None:
    """The known-good fix for the host (resolve/knowngood.py): the stack to use, and where the host does not run
    the fix as it is, why and what an HDK upgrade opens."""
    host, stack, name = fix["host"], fix["stack"], fix["profile"]
    if host is None:
        click.echo(f"\nKnown-good fix for this report: profile {name}", err=True)
        click.echo(_indent(format_stack(stack)), err=True)
        return
    if host["runs_on"] != "the host":
        click.echo(f"\nKnown-good fix for this report: profile {name}, on another machine: {host['why']}", err=True)
        click.echo(_indent(format_stack(stack)), err=True)
        return
    after = host["after_upgrade"]
    up = host["upgrade"]
    upgrade = (f"it runs after an Ascend HDK upgrade (driver and firmware) to one CANN {up['cann']} lists:"
               f" {up['hdk']}")
    if stack is not None:
        click.echo(f"\nKnown-good fix for this report: profile {name}, as near as the host runs it"
                   f" ({relaxed_label(stack)})", err=True)
        click.echo(_indent(format_stack(stack)), err=True)
        click.echo(f"  ! profile {name} as it is does not run on the host: {host['why']}", err=True)
        click.echo(f"  ! {upgrade}; then: {summary(after)}", err=True)
        return
    click.echo(f"\nKnown-good fix for this report: profile {name} does not run on the host: {host['why']}", err=True)
    click.echo(f"  ! the host runs no stack near it today; {upgrade}:", err=True)
    click.echo(_indent(format_stack(after)), err=True)


def summary(stack: Mapping[str, Any]) -> str:
    from provisioner.resolve.stack import summary as parts

    return f"{parts(stack)}, {stack['dtype']['compute']} ({stack['base_image']['ref']})"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


SECTION_COLUMNS = {
    "cards": ["id", "name", "family", "form", "chips_per_card", "chips_per_server", "training"],
    "families": ["id", "name", "training", "bf16", "device_family", "image_chip", "k8s_resource"],
    "chips": ["model", "family", "npu_smi_names", "hbm_mb"],
    "cann": ["version", "status", "hdk_paired", "hdk_compatible", "python"],
    "hdk": ["version", "firmware", "compatible_firmware"],
    "torch_npu": ["wheel", "torch", "product", "cann", "python", "on_pypi", "in_table"],
    "torch_npu_releases": ["product", "date", "cann_compatible"],
    "mindspore": ["version", "cann", "hdk", "python", "on_pypi"],
    "llm_bundles": ["id", "mindspeed_ref", "megatron_ref", "mindspeed_llm_ref", "torch", "cann", "python"],
    "mindspeed": ["branch", "megatron", "torch", "torch_npu_product", "cann", "python"],
    "images": ["cann", "tags"],
    "profiles": ["name", "kind", "description"],
    "apex": ["id", "ref", "setuptools_pin", "python", "torch_confirmed"],
    "extras": ["name", "requirement"],
    "packages": ["id", "torch", "mindspore", "python", "pins"],
}


@click.group("matrix", invoke_without_command=True)
@click.option("--card", help="Show only what applies to this card's chip family.")
@click.option("--section", "sections", multiple=True, help="Show only these sections (cards, cann, torch_npu, ...).")
@matrix_option
@json_option
@click.pass_context
def matrix_cmd(ctx, card, sections, overlays, as_json):
    """Show the compatibility matrix rows (a table, or JSON with --json).

    `provision matrix verify` checks the rows against PyPI, the image lists and
    the cited sources; `provision matrix sync` drafts rows for new releases.
    """
    if ctx.invoked_subcommand is not None:
        return 0
    from provisioner.matrix import loader

    m = loader.load(list(overlays))
    data = {k: v for k, v in m.data.items() if k != "policy"}
    family = None
    if card:
        card_row, family, _ = m.lookup_card(card)
        data = _for_family(m, data, family)
    if sections:
        unknown = [s for s in sections if s not in data]
        if unknown:
            raise click.UsageError(f"unknown section {unknown[0]!r} (known: {', '.join(sorted(data))})")
        data = {k: data[k] for k in sections}
    if as_json:
        emit_json({"schema": "provision.matrix/1", "layers": m.layers, "family": family and family["id"],
                   "sections": data, "policy": m.policy})
        return 0
    default = ["cards", "cann", "torch_npu"] if not sections else list(data)
    for name in default:
        rows = data.get(name, [])
        cols = SECTION_COLUMNS.get(name) or sorted({k for r in rows for k in r if not k.startswith("_")})[:6]
        click.echo(f"\n{name} ({len(rows)} rows)")
        click.echo(table([[_cell(r.get(c)) for c in cols] for r in rows], cols))
    click.echo(f"\nlayers: {', '.join(m.layers)}; every row cites its source (use --json to see them)")
    return 0


def _cell(value) -> str:
    if isinstance(value, dict):
        return ",".join(f"{k}=={v}" for k, v in value.items())
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "" if value is None else str(value)


def _for_family(m, data: dict, family: dict) -> dict:
    fid = family["id"]
    chip = family.get("image_chip")
    out = dict(data)
    out["families"] = [family]
    out["cards"] = [c for c in data["cards"] if c["family"] == fid]
    out["chips"] = [c for c in data["chips"] if c["family"] == fid]
    imgs = []
    for row in data["images"]:
        tags = [t for t in row["tags"] if chip and t.startswith(f"{chip}-")]
        if tags:
            imgs.append({**row, "tags": tags})
    out["images"] = imgs
    with_image = {m.cann(r["cann"])["version"] for r in imgs}
    out["cann"] = [r for r in data["cann"] if r["version"] in with_image]
    out["torch_npu"] = [r for r in data["torch_npu"] if r.get("cann") in with_image or not r.get("cann")]
    out["mindspore"] = [r for r in data["mindspore"] if m.cann(r["cann"])["version"] in with_image]
    out["llm_bundles"] = [b for b in data["llm_bundles"] if not b.get("families") or fid in b["families"]]
    out["profiles"] = [p for p in data["profiles"]
                       if p["constraints"].get("card") and m.lookup_card(p["constraints"]["card"])[1]["id"] == fid]
    return out
