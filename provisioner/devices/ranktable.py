"""HCCL rank table (hccl.json, version 1.0) from the hosts' /etc/hccn.conf.

Each host contributes the selected chips in ascending physical id; ranks run
on across hosts in the order given. Device IPs are the `address_<id>=` lines of
/etc/hccn.conf (what `hccn_tool -i <id> -ip -g` reports). Every value is a
string, as the format asks. A3 (1.2) and 950 (2.0) need data /etc/hccn.conf
does not hold; the matrix says so and the generator refuses them.
"""

from __future__ import annotations

from dataclasses import dataclass

from provisioner import validate
from provisioner.errors import ProvisionError
from provisioner.host import hostfs


@dataclass(frozen=True)
class Host:
    root: str
    host_ip: str | None = None
    container_ip: str | None = None


def device_ips(root: str, hccn_conf: str) -> dict[int, str]:
    """Physical id -> NPU NIC address from root/etc/hccn.conf."""
    kv = hostfs.read_kv(hostfs.under(root, hccn_conf))
    if kv is None:
        raise ProvisionError(f"{hostfs.under(root, hccn_conf)}: not found (the NPU NICs are configured there with hccn_tool)")
    out = {}
    for key, value in kv.items():
        if key.startswith("address_") and key[8:].isascii() and key[8:].isdigit():
            out[int(key[8:])] = value
    return out


def _server_id(host: Host, n: int) -> str:
    if host.host_ip:
        return host.host_ip
    # Without --host-ip the host's name stands in; server_id only has to be unique.
    text = (hostfs.read_text(hostfs.under(host.root, "/etc/hostname"), 4096) or "").strip()
    try:
        return validate.host(text, "/etc/hostname") if text else f"server-{n}"
    except validate.Invalid:
        return f"server-{n}"


def hccn_conf_path(matrix) -> str:
    return next(r for r in matrix.rows("device_mounts") if r["id"] == "hccn-conf")["host"][0]


def check_family(matrix, card: str | None) -> str:
    """The rank-table version for the card's chip family; refuses formats this generator cannot write."""
    if not card:
        written = sorted({r["version"] for r in matrix.rows("rank_tables") if r["written"]})
        if len(written) != 1:
            raise ProvisionError(f"give --card: rank-table versions differ by chip ({', '.join(written)})")
        return written[0]
    _, family, _ = matrix.lookup_card(card)
    row = next((r for r in matrix.rows("rank_tables") if r["family"] == family["id"]), None)
    if row is None:
        raise ProvisionError(f"{family['name']}: no rank-table format is known (rank tables are for training chips)")
    if not row["written"]:
        raise ProvisionError(f"{family['name']} uses rank table version {row['version']}, which provision does not write: {row['why']}")
    return row["version"]


def build(hosts: list[Host], ids: list[int], version: str, hccn_conf: str) -> dict:
    if not hosts:
        raise ProvisionError("give at least one --host-root")
    if not ids:
        raise ProvisionError("--devices selects no chips")
    servers, rank = [], 0
    for n, host in enumerate(hosts):
        ips = device_ips(host.root, hccn_conf)
        lacking = [i for i in ids if i not in ips]
        if lacking:
            raise ProvisionError(
                f"{hostfs.under(host.root, hccn_conf)} has no address_{lacking[0]}= line"
                f" (chips with addresses: {','.join(map(str, sorted(ips))) or 'none'})"
            )
        for i in ids:
            _check_ip(ips[i], f"address_{i}")
        devices = []
        for i in ids:
            devices.append({"device_id": str(i), "device_ip": ips[i], "rank_id": str(rank)})
            rank += 1
        server: dict = {"server_id": _server_id(host, n)}
        if host.host_ip:
            _check_ip(host.host_ip, "--host-ip")
            server["host_ip"] = host.host_ip
        if host.container_ip:
            _check_ip(host.container_ip, "--container-ip")
            server["container_ip"] = host.container_ip
        server["device"] = devices
        servers.append(server)
    ids_seen = [s["server_id"] for s in servers]
    if len(set(ids_seen)) != len(ids_seen):
        raise ProvisionError(f"server ids repeat ({', '.join(ids_seen)}): give each host its --host-ip")
    return {"version": version, "server_count": str(len(servers)), "server_list": servers, "status": "completed"}


def _check_ip(value: str, what: str) -> None:
    validate.ip_address(value, what)
