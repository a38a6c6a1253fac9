"""`provision audit` (a host) and `provision doctor` (inside a container)."""

from __future__ import annotations

import click

from provisioner.cli.common import emit_json, json_option, matrix_option


def register(group: click.Group) -> None:
    group.add_command(audit_cmd)
    group.add_command(doctor_cmd)


def _root_options(f):
    f = click.option("--dev-root", type=click.Path(), help="Where the device nodes are (default: /dev for --root /,"
                     " else ROOT/dev).")(f)
    return click.option("--root", default="/", show_default=True, type=click.Path(),
                        help="Root of the host tree to read (a mounted host or a fixture).")(f)


def _check_root(root: str, dev_root: str | None) -> None:
    from pathlib import Path

    from provisioner.errors import ProvisionError

    if not Path(root).is_dir():
        raise ProvisionError(f"--root {root}: not a directory")
    if dev_root is not None and not Path(dev_root).is_dir():
        raise ProvisionError(f"--dev-root {dev_root}: not a directory")


@click.command("audit")
@_root_options
@click.option("--card", help="The card you believe this host has (800T-A2, 300I, ...): checked against the chips found.")
@click.option("--task", type=click.Choice(["train", "inference"]), help="What the host is for (default: train).")
@click.option("--mode", type=click.Choice(["runtime", "devices", "cdi"]),
              help="How containers will get the NPU: Ascend Docker Runtime, explicit --device flags, or CDI.")
@click.option("--image", "image", metavar="TAG", help="Check whether this host can run an image built by provision build.")
@click.option("--npu-smi-output", "npu_smi_output", multiple=True, type=click.Path(), metavar="FILE",
              help="Saved `npu-smi info` (and/or `npu-smi info -m`) output to read instead of running npu-smi.")
@click.option("--npu-smi-timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
              help="Seconds to wait for the host's npu-smi (with --root: ROOT/usr/local/bin/npu-smi).")
@matrix_option
@json_option
def audit_cmd(root, dev_root, card, task, mode, image, npu_smi_output, npu_smi_timeout, overlays, as_json):
    """Audit a host: driver, firmware, CANN, chips, devices, users, Docker and runtime.

    Exit code 0 when clean, 1 with warnings, 2 with errors (or bad input).
    """
    from pathlib import Path

    from provisioner.errors import ProvisionError
    from provisioner.host import audit, audit_report
    from provisioner.host import probe as host
    from provisioner.matrix import loader

    _check_root(root, dev_root)
    for item in npu_smi_output:
        if not Path(item).is_file():
            raise ProvisionError(f"--npu-smi-output {item}: no such file")
    m = loader.load(list(overlays))
    if card:
        m.lookup_card(card)
    options = audit.AuditOptions(card=card, task=task, mode=mode, image=image)
    if image:
        from provisioner.image import labels as image_labels

        options.image_stack = image_labels.read_stack(image)
    report = host.probe(root, dev_root, npu_smi_outputs=list(npu_smi_output), npu_smi_timeout=npu_smi_timeout,
                        runtime_mounts=audit.runtime_mounts(m), chip_rows=audit.chip_rows(m))
    if report["probe_errors"] and not Path(root).exists():  # pragma: no cover - checked above
        raise ProvisionError(f"--root {root}: unreadable")
    result = audit.audit(report, m, options)
    if as_json:
        emit_json(result)
    else:
        click.echo(audit_report.render_audit(result))
    return result["exit_code"]


@click.command("doctor")
@_root_options
@click.option("--stack-file", type=click.Path(), metavar="FILE",
              help="The image's stack JSON (default: $PROVISION_STACK, then /etc/provision/stack.json).")
@click.option("--timeout", type=click.FloatRange(min=1), default=180.0, show_default=True,
              help="Seconds allowed for importing torch and torch_npu.")
@matrix_option
@json_option
def doctor_cmd(root, dev_root, stack_file, timeout, overlays, as_json):
    """Inside a container: can a training run start here? torch/torch_npu, CANN, driver, devices, bf16, HCCL.

    Exit code 0 when clean, 1 with warnings, 2 with errors. Works (and says so)
    on a machine with no NPU.
    """
    from provisioner.host import audit_report, doctor
    from provisioner.matrix import loader

    _check_root(root, dev_root)
    m = loader.load(list(overlays))
    result = doctor.run(root, dev_root, stack_file=stack_file, matrix=m, timeout=timeout)
    if as_json:
        emit_json(result)
    else:
        click.echo(audit_report.render_doctor(result))
    return result["exit_code"]
