"""`provision preflight`: before the hours go in, will this host hold a training job? (library:
provisioner/preflight)."""

from __future__ import annotations

import click

from provisioner.cli.common import emit_json, json_option, matrix_option


def register(group: click.Group) -> None:
    group.add_command(preflight_cmd)


def _peer(ctx, param, values):
    import ipaddress

    for value in values:
        try:
            ipaddress.IPv4Address(value)
        except ValueError:
            raise click.BadParameter(f"{value!r} is not an IPv4 address (a chip address of the other node)",
                                     param=param) from None
    return values


@click.command("preflight")
@click.option("--root", default="/", show_default=True, type=click.Path(),
              help="Root of the host tree to read (a mounted host or a fixture); nothing in another root is run.")
@click.option("--npu-smi-output", "npu_smi_output", multiple=True, type=click.Path(), metavar="FILE",
              help="Saved `npu-smi info` (and/or `npu-smi info -m`) output to read instead of running npu-smi.")
@click.option("--saved", "saved", multiple=True, type=click.Path(), metavar="FILE",
              help="A collection file: each command line (npu-smi info -t health|ecc|temp|power|usages -i N -c C,"
                   " hccn_tool -i N -ip|-link|-net_health|-tls -g, chronyc tracking) followed by its output, as"
                   " MindCluster FaultDiag's npu_info_before.txt.")
@click.option("--peer", "peers", multiple=True, metavar="ADDR", callback=_peer,
              help="A chip address of another node of the job: each chip pings it (hccn_tool -ping).")
@click.option("--bandwidth", "bandwidth_file", type=click.Path(), metavar="FILE",
              help="A measured all-reduce sweep (the provision.collective/1 line of the collective check) to judge.")
@click.option("--selftest", "selftest_file", type=click.Path(), metavar="FILE",
              help="The output of `provision selftest` on these chips (its provision.selftest/1 line): matmul judged.")
@click.option("--nodes", type=click.IntRange(min=1, max=4096), default=1, show_default=True,
              help="Nodes of the job (more than one: the bandwidth is judged as RoCE between nodes).")
@click.option("-e", "--env", "env_items", multiple=True, metavar="KEY=VALUE",
              help="A launch variable of the job (HCCL_CONNECT_TIMEOUT judges the clock skew).")
@click.option("--timeout", type=click.FloatRange(min=0.5, max=600), default=10.0, show_default=True,
              help="Seconds each tool call may take (they run in parallel).")
@matrix_option
@json_option
def preflight_cmd(root, npu_smi_output, saved, peers, bandwidth_file, selftest_file, nodes, env_items, timeout,
                  overlays, as_json):
    """Check the chips and the NPU network before a job: one line per check with its fix.

    \b
    Chips: health, ECC counters, temperature and power, HBM in use, processes holding chips.
    Network: addresses (hccn.conf / hccn_tool), subnet, link, health, TLS, ping to --peer, clock skew.
    HCCL bandwidth (--bandwidth) against matrices/preflight.yaml; matmul from a self-test (--selftest).
    A check that could not be measured says n/a and why.

    Exit code 0 when ready, 1 with warnings (or nothing measured), 2 when a check failed (or bad input).
    """
    import math
    from pathlib import Path

    from provisioner.errors import ProvisionError
    from provisioner.matrix import loader
    from provisioner.preflight import bandwidth, report, stress

    if not Path(root).is_dir():
        raise ProvisionError(f"--root {root}: not a directory")
    for opt, items in (("--npu-smi-output", npu_smi_output), ("--saved", saved)):
        for item in items:
            if not Path(item).is_file():
                raise ProvisionError(f"{opt} {item}: no such file")
    if not math.isfinite(timeout):
        raise ProvisionError(f"--timeout {timeout}: not a number of seconds")
    env = {}
    for item in env_items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ProvisionError(f"-e {item!r}: write KEY=VALUE")
        env[key] = value
    m = loader.load(list(overlays))
    doc_bw = bandwidth.read(bandwidth_file) if bandwidth_file else None
    doc_st = stress.read(selftest_file) if selftest_file else None
    doc = report.run(m, root, npu_smi_outputs=npu_smi_output, saved=saved, peers=peers, env=env,
                     bandwidth_doc=doc_bw, selftest_doc=doc_st, nodes=nodes, timeout=timeout)
    if as_json:
        emit_json(doc)
    else:
        click.echo(report.render(doc))
    return doc["exit_code"]
