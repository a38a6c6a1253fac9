"""GLOO_SOCKET_IFNAME from HCCL_SOCKET_IFNAME: the two variables name network interfaces differently.

HCCL_SOCKET_IFNAME (CANN environment-variable reference, envref_07_0075) takes a comma-separated list of
interface-name prefixes (`eth,enp`), exact names when the list starts with `=` (`=eth0`), and exclusions when
it starts with `^` (`^docker`, `^=eth1`). Gloo (torch's ProcessGroupGloo) takes a comma-separated list of
exact interface names and knows neither prefixes nor `=` or `^`. So `=eth0` becomes `eth0`, and prefixes or
exclusions are resolved against the interfaces of the host the job runs on (its network namespace, as
multi-node launches use the host network); where those are not known (a Kubernetes manifest, a host tree
without /sys/class/net) GLOO_SOCKET_IFNAME is left unset with a note saying why.
"""

from __future__ import annotations

import os

# Interfaces that never carry a job's traffic between nodes.
_LOCAL_PREFIXES = ("lo", "docker", "veth", "virbr", "br-", "cni", "flannel", "cali", "tunl", "kube-ipvs")


def host_interfaces(root: str) -> list[str] | None:
    """Interface names under <root>/sys/class/net, or None when the tree has none."""
    net = os.path.join(root, "sys", "class", "net")
    if not os.path.isdir(net):
        return None
    return sorted(os.listdir(net))


def gloo_ifname(hccl: str, interfaces: list[str] | None) -> tuple[str | None, str | None]:
    """(GLOO_SOCKET_IFNAME, note): the exact names Gloo should use for an HCCL_SOCKET_IFNAME value."""
    value = hccl.strip()
    exclude = value.startswith("^")
    body = value[1:] if exclude else value
    exact = body.startswith("=")
    names = [n.strip() for n in (body[1:] if exact else body).split(",") if n.strip()]
    if not names:
        return None, f"HCCL_SOCKET_IFNAME={hccl!r} names no interface; GLOO_SOCKET_IFNAME left unset"
    if exact and not exclude:
        return ",".join(names), None
    if interfaces is None:
        return None, (f"GLOO_SOCKET_IFNAME left unset: Gloo takes exact interface names and HCCL_SOCKET_IFNAME="
                      f"{hccl} is a {'exclusion' if exclude else 'prefix'} list whose matches on the node are not "
                      "known here; pass --socket-ifname =NAME to set both")

    def hit(name: str) -> bool:
        return any(name == n if exact else name.startswith(n) for n in names)

    if exclude:
        found = [i for i in interfaces if not hit(i) and not i.startswith(_LOCAL_PREFIXES)]
    else:
        found = [i for i in interfaces if hit(i)]
    if not found:
        return None, (f"HCCL_SOCKET_IFNAME={hccl} matches none of this host's interfaces "
                      f"({', '.join(interfaces) or 'none'}); GLOO_SOCKET_IFNAME left unset")
    # One interface, the first by name, as HCCL takes the first match: several would make Gloo spread its
    # connections over them.
    return found[0], None
