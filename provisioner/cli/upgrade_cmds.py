"""`provision diff A B` (two stacks side by side) and `provision upgrade` (a host's ordered upgrade plan);
the work is in provisioner/upgrade/."""

from __future__ import annotations

import click

from provisioner.cli.common import emit_json, json_option, matrix_option

DIFF_SCHEMA = "provision.diff/1"
UPGRADE_SCHEMA = "provision.upgrade/1"


def register(group: click.Group) -> None:
    group.add_command(diff_cmd)
    group.add_command(upgrade_cmd)


@click.command("diff")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@click.option("--card", help="Card for both sides given as options (a side's own card=... wins).")
@click.option("--arch", type=click.Choice(["x86_64", "aarch64", "amd64", "arm64"]),
              help="Architecture for both sides given as options (default: this machine's).")
@click.option("--driver", help="A host driver version (e.g. 24.1.rc3): how it fits each side.")
@matrix_option
@json_option
def diff_cmd(a, b, card, arch, driver, overlays, as_json):
    """Compare two stacks: driver, CANN, torch, Python, OS, base image, every package of the lock, and what each
    change breaks or needs.

    A and B are each a stack JSON file (`provision resolve --json`), an image the local engine has (its stack
    label), or resolve options as KEY=VALUE[,KEY=VALUE] (e.g. cann=8.1.RC1,torch=2.5.1; with=apex+deepspeed).
    Exit 0; 1 when B breaks a rule; 2 on bad input.
    """
    from provisioner.errors import ResolveError
    from provisioner.matrix import loader
    from provisioner.upgrade import diff, stacks

    m = loader.load(list(overlays))
    if driver:
        from provisioner.upgrade.plan import _ver

        _ver(driver, "--driver")
    defaults = {"card": card, "arch": arch}
    try:
        sa, fa = stacks.load_side(m, a, "A", defaults)
        sb, fb = stacks.load_side(m, b, "B", defaults)
    except ResolveError as exc:
        if as_json:
            from provisioner.cli.text import refused_doc

            emit_json(refused_doc(DIFF_SCHEMA, exc.reasons))
            return 2
        raise
    doc = diff.diff(m, sa, sb, fa, fb, driver=driver)
    if as_json:
        emit_json(doc)
    else:
        click.echo(diff.render(doc))
    return 1 if doc["breaks"] else 0


@click.command("upgrade")
@click.option("--to-cann", "to_cann", metavar="V", help="Target CANN release, e.g. 8.5.0.")
@click.option("--to-torch", "to_torch", metavar="V", help="Target torch version.")
@click.option("--to-torch-npu", "to_torch_npu", metavar="V", help="Target torch_npu wheel version.")
@click.option("--to-set", "to_set", metavar="NAME", help="Target framework set (matrices/mindspeed.yaml llm_bundles id).")
@click.option("--card", help="The host's card (default: from its chips, as resolve does).")
@click.option("--python", help="Python of the target image.")
@click.option("--task", type=click.Choice(["train", "inference"]), help="What the target stack is for (default: train).")
@click.option("--with", "extras", multiple=True, help="Extras of the target image (apex, deepspeed, mindspeed-llm, ...).")
@click.option("--root", default="/", show_default=True, type=click.Path(), help="Root of the host to upgrade (another"
              " host's files, or a fixture tree).")
@click.option("--npu-smi-output", "npu_smi_outputs", multiple=True, type=click.Path(), metavar="FILE",
              help="Saved `npu-smi info` output of that host (repeatable).")
@click.option("--image", metavar="TAG", help="The image the host runs now: does it keep running on the new driver?")
@click.option("--stack", "stack_file", type=click.Path(), metavar="FILE", help="The current stack as JSON (offline"
              " alternative to --image).")
@matrix_option
@json_option
def upgrade_cmd(to_cann, to_torch, to_torch_npu, to_set, card, python, task, extras, root, npu_smi_outputs, image,
                stack_file, overlays, as_json):
    """Plan a host upgrade to a target stack: firmware and driver in the HDK's order (reboot where it asks),
    CANN on the host, the image rebuild, the checks; what keeps running, and the rollback.

    Prints commands, runs none. A target the card cannot reach is refused with the nearest one that works.
    """
    import os

    from provisioner.errors import ProvisionError, ResolveError
    from provisioner.host import audit, probe
    from provisioner.matrix import loader
    from provisioner.upgrade import plan, stacks

    if not os.path.isdir(root):
        raise ProvisionError(f"--root {root}: not a directory")
    for item in npu_smi_outputs:
        if not os.path.isfile(item):
            raise ProvisionError(f"--npu-smi-output {item}: no such file")
    for flag, value in (("--to-cann", to_cann), ("--to-torch", to_torch), ("--to-torch-npu", to_torch_npu),
                        ("--python", python)):
        if value is not None:
            plan._ver(value, flag)
    m = loader.load(list(overlays))
    report = probe.probe(root, None, npu_smi_outputs=list(npu_smi_outputs), runtime_mounts=audit.runtime_mounts(m),
                         chip_rows=audit.chip_rows(m))
    host = plan.facts_of(report)
    if card:
        m.lookup_card(card)
    else:
        if len(host["families"]) != 1:
            why = "chips of several families" if host["families"] else "no chips read (pass --npu-smi-output)"
            raise ProvisionError(f"--card is required: the host shows {why}")
        card = m.family(host["families"][0])["reference_card"]
    current = None
    if stack_file:
        current = stacks.load_file(stack_file, "--stack")
    elif image:
        from provisioner import validate
        from provisioner.image import labels

        current = labels.read_stack(validate.image_ref(image, "--image"))
    target = {"to_cann": to_cann, "to_torch": to_torch, "to_torch_npu": to_torch_npu, "to_set": to_set}
    extra = {"python": python, "task": task, "extras": tuple(extras)}
    try:
        doc = plan.plan(m, host, card, target, extra, current)
    except ResolveError as exc:
        if as_json:
            from provisioner.cli.text import refused_doc

            emit_json(refused_doc(UPGRADE_SCHEMA, exc.reasons))
            return 2
        raise ProvisionError("; ".join(exc.reasons)) from None
    if as_json:
        emit_json(doc)
    else:
        click.echo(plan.render(doc))
    return 0
