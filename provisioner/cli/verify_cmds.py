"""`provision matrix verify` and `provision matrix sync`: parse, call provisioner.matrix, print."""

from __future__ import annotations

import click

from provisioner.cli.common import emit_json, json_option, matrix_option
from provisioner.text import table

ONLINE_HELP = ("Read the live index pip is configured for (index URL, proxy, CA bundle, trusted hosts: pip config"
               " and PIP_* variables) instead of the recorded snapshot.")


def _facts(online: bool, image_tags: str | None = None):
    from provisioner.matrix import snapshot

    index = None
    if online:
        from provisioner.matrix import pypi

        settings = pypi.pip_settings()
        click.echo(f"provision: reading {settings.describe()}", err=True)
        index = pypi.Index(settings)
    facts = snapshot.load(online_index=index, progress=lambda s: click.echo(f"provision: {s}", err=True))
    if image_tags:
        facts.registry_tags = _read_tags(image_tags)
    return facts


def _read_tags(path: str) -> set[str]:
    from provisioner import validate
    from provisioner.errors import ProvisionError
    from provisioner.hostfile import read_text

    text = read_text(path, f"--image-tags {path}")
    stripped = text.strip()
    if stripped.startswith("{") or stripped.startswith("["):
        data = validate.json_doc(stripped, f"--image-tags {path}")
        tags = data.get("Tags", data.get("tags")) if isinstance(data, dict) else data
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise ProvisionError(f"{path}: expected a list of tags, or skopeo list-tags JSON with \"Tags\"")
        return set(tags)
    tags = {line.strip().rsplit(":", 1)[-1] for line in text.splitlines() if line.strip() and not line.startswith("#")}
    if not tags:
        raise ProvisionError(f"{path}: no tags in the file")
    return tags


@click.command("verify")
@click.option("--online", is_flag=True, help=ONLINE_HELP)
@click.option("--image-tags", type=click.Path(dir_okay=False),
              help="The registry's tags (one per line, or `skopeo list-tags` JSON): every image row must be there.")
@click.option("--all", "show_all", is_flag=True,
              help="Also list notes (unconfirmed pairings, unused sources), the claims no recorded fact can check"
                   " (unchecked), and warn of snapshots over 90 days old.")
@matrix_option
@json_option
def verify_cmd(online, image_tags, show_all, overlays, as_json):
    """Check every checkable claim of the matrix and list the mismatches with their evidence.

    PyPI presence and Python tags per platform, the torch pin in each
    torch_npu wheel's metadata per architecture, Python ranges, image tags,
    citations against the tables they cite, source ids, derived pairings,
    driver ranges, job names, launch-variable ranges (CANN env-var reference),
    framework sets and lock pins against their release notes.
    Offline by default (the recorded snapshot in matrices/snapshots/).
    Exit code 0: no mismatch; 1: mismatches; 2: bad input.
    """
    from provisioner.matrix import loader, verify

    m = loader.load(list(overlays), lenient=True)
    report = verify.verify(m, _facts(online, image_tags))
    if as_json:
        out = report.as_json()
        if not show_all:
            out["claims"] = [c for c in out["claims"] if c["status"] == "mismatch"]
        emit_json(out)
        return 1 if report.mismatches else 0
    f = report.facts
    where = "live index" if f["origin"] == "online" else f"index snapshot of {f['taken']}"
    click.echo(f"matrix verify: {report.checked} claims checked against the {where} ({f['index']}),"
               f" the image tag lists and the cited tables; {len(report.mismatches)} mismatches")
    counts = report.counts()
    click.echo(table([[k, v["ok"], v["mismatch"], v["note"], v["unchecked"]] for k, v in sorted(counts.items())],
                     ["check", "ok", "mismatch", "note", "unchecked"]))
    if show_all:
        for line in report.stale:
            click.echo(f"provision: warning: {line}", err=True)
    shown = [c for c in report.claims if c.status == "mismatch" or (show_all and c.status in ("note", "unchecked"))]
    if shown:
        click.echo("")
        click.echo(table([[c.status, c.check, c.subject, c.field, c.claimed, c.found, c.at, c.evidence]
                          for c in shown],
                         ["status", "check", "row", "field", "claimed", "found", "at", "evidence"]))
    return 1 if report.mismatches else 0


@click.command("sync")
@click.option("--online", is_flag=True, help=ONLINE_HELP)
@click.option("-o", "--output", default="matrix-draft.yaml", show_default=True, type=click.Path(dir_okay=False),
              help="Where to write the draft overlay (atomically; loaded and checked first).")
@click.option("--dry-run", is_flag=True, help="List what is new; write nothing.")
@matrix_option
@json_option
def sync_cmd(online, output, dry_run, overlays, as_json):
    """List what the index has that the matrix lacks and draft overlay rows for it.

    New torch_npu and MindSpore releases (rows derived from their wheel tags
    and metadata, each `pairing: unconfirmed` with the CANN of its closest
    relative), pairing rows for wheels the matrix has without a CANN (so no
    stack could use them; drafted the same way), wheels for new Python
    versions, new torch lines. Use the draft with --matrix FILE.
    """
    import shlex

    from provisioner import validate
    from provisioner.matrix import loader, sync

    validate.single_line(output, "-o/--output")  # it is printed back, and into a shell line
    m = loader.load(list(overlays))
    report = sync.sync(m, _facts(online), None if dry_run else output, list(overlays))
    if as_json:
        emit_json(report.as_json())
        return 0
    f = report.facts
    where = "live index" if f["origin"] == "online" else f"index snapshot of {f['taken']}"
    if not report.findings:
        click.echo(f"matrix sync: the matrix covers everything on the {where} ({f['index']})")
        return 0
    click.echo(f"matrix sync: {len(report.findings)} things on the {where} ({f['index']}) that the matrix lacks")
    click.echo(table([[x.kind, x.version, x.detail] for x in report.findings], ["kind", "version", "what"]))
    if report.written:
        click.echo(f"\nwrote {report.written}: draft rows, unconfirmed until a source pairs them;"
                   f" use it with --matrix {shlex.quote(str(report.written))}")
    elif not dry_run:
        click.echo("\nnothing to draft (only information above)")
    return 0
