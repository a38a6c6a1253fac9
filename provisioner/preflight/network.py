"""The NPU network checks of preflight: each chip's address, netmask and gateway (/etc/hccn.conf or
`hccn_tool -ip -g`), link state, network health, one subnet per plane, the TLS switch, a ping to a peer,
and the clock's skew against HCCL_CONNECT_TIMEOUT.

A chip's device id (the number in `address_N=` and `hccn_tool -i N`) is its physical id (provisioner.preflight
.facts). Results have the shape provisioner.preflight.checks.result makes.
"""

from __future__ import annotations

import ipaddress

from provisioner.preflight.checks import result

CONF_FIX = ("set each chip's address on the host: `hccn_tool -i N -ip -s address A netmask M` (it writes"
            " /etc/hccn.conf), with one subnet per plane across the nodes of the job")
NO_NET = ("no /etc/hccn.conf and no hccn_tool output: the chips' own NICs are not configured (one 8-chip node over"
          " HCCS does not need them; a multi-node job does)")


def _iface(entry: dict) -> ipaddress.IPv4Interface | None:
    try:
        return ipaddress.IPv4Interface(f"{entry['address']}/{entry['netmask']}")
    except (ValueError, TypeError, KeyError):
        return None


def addresses(facts: dict) -> dict:
    """chip label -> {address, netmask, gateway, netdetect, from, tool_address, tool_netmask}."""
    conf = facts.get("hccn_conf") or {}
    out = {}
    for c in facts["chips"]:
        row = conf.get(c["device"], {})
        tool = (facts["net"].get(c["device"]) or {}).get("ip") or {}
        entry = {"address": row.get("address"), "netmask": row.get("netmask"), "gateway": row.get("gateway"),
                 "netdetect": row.get("netdetect"), "from": "/etc/hccn.conf" if row.get("address") else None,
                 "tool_address": tool.get("address"), "tool_netmask": tool.get("netmask")}
        if entry["address"] is None and tool.get("address"):
            entry.update(address=tool["address"], netmask=tool["netmask"], **{"from": "hccn_tool -ip -g"})
        out[c["label"]] = entry
    return out


def check_config(facts: dict, addrs: dict) -> dict:
    chips = facts["chips"]
    have = [c for c in chips if addrs[c["label"]]["address"]]
    if not have:
        return result("npu-net-config", "n/a", NO_NET, CONF_FIX)
    problems, names = [], []
    for c in chips:
        a = addrs[c["label"]]
        if not a["address"]:
            problems.append(f"{c['label']} (device {c['device']}) has no address")
        elif _iface(a) is None:
            problems.append(f"{c['label']}: address {a['address']} / netmask {a['netmask']} is not a valid IPv4 one")
        elif a["tool_address"] and (a["tool_address"], a["tool_netmask"]) != (a["address"], a["netmask"]):
            problems.append(f"{c['label']}: /etc/hccn.conf says {a['address']}/{a['netmask']}, the NIC has"
                            f" {a['tool_address']}/{a['tool_netmask']}")
        else:
            continue
        names.append(c["label"])
    seen: dict = {}
    for c in have:
        seen.setdefault(addrs[c["label"]]["address"], []).append(c["label"])
    for addr, labels in sorted(seen.items()):
        if len(labels) > 1:
            problems.append(f"{', '.join(labels)} share address {addr}")
            names.extend(labels)
    if problems:
        return result("npu-net-config", "fail", "; ".join(problems), CONF_FIX, sorted(set(names)))
    source = sorted({addrs[c["label"]]["from"] for c in have})
    return result("npu-net-config", "pass", f"{len(have)} chip address(es) set ({', '.join(source)}), all distinct")


def check_subnet(facts: dict, addrs: dict) -> dict:
    """Each chip's gateway and netdetect address inside its own subnet; a chip off the subnet most chips share."""
    ifaces = {lbl: i for lbl, a in addrs.items() if a["address"] and (i := _iface(a)) is not None}
    if not ifaces:
        return result("npu-subnet", "n/a", NO_NET, CONF_FIX)
    problems, names = [], []
    for label, iface in ifaces.items():
        a = addrs[label]
        outside = []
        for key in ("gateway", "netdetect"):
            value = a.get(key)
            if not value:
                continue
            try:
                inside = ipaddress.IPv4Address(value) in iface.network
            except ValueError:
                problems.append(f"{label}: {key} {value!r} is not an IPv4 address")
                names.append(label)
                continue
            if not inside:
                outside.append(f"{key} {value}")
        if outside:
            problems.append(f"{label}: {a['address']}/{iface.network.prefixlen} is not in the subnet of its"
                            f" {' and '.join(outside)}")
            names.append(label)
    nets: dict = {}
    for label, iface in ifaces.items():
        nets.setdefault(iface.network, []).append(label)
    common, members = max(nets.items(), key=lambda kv: len(kv[1]))
    if len(members) * 2 > len(ifaces) and len(nets) > 1:
        for net, labels in nets.items():
            if net != common:
                for label in labels:
                    if label not in names:
                        problems.append(f"{label}: {addrs[label]['address']} is on {net}, the other chips on"
                                        f" {common}")
                        names.append(label)
    if problems:
        return result("npu-subnet", "fail", "; ".join(problems),
                      "put the chip on its plane's subnet: `hccn_tool -i N -ip -s address A netmask M` and"
                      " `hccn_tool -i N -gateway -s gateway G` (HCCL cannot reach peers off the subnet)", names)
    return result("npu-subnet", "pass", f"{len(ifaces)} chip(s) on {len(nets)} subnet(s) ("
                  + ", ".join(str(n) for n in sorted(nets)) + "), gateways inside")


def _per_device(facts: dict, kind: str) -> dict:
    return {c["label"]: (facts["net"].get(c["device"]) or {}).get(kind) for c in facts["chips"]}


def _tool_why(facts: dict, kind: str) -> str:
    if not facts["ran_tools"]:
        return f"another host's tree; no saved `hccn_tool -i N -{kind} -g` output (pass it with --saved FILE)"
    if not facts["hccn_tool"]:
        return "hccn_tool not found (/usr/local/Ascend/driver/tools/hccn_tool)"
    return f"`hccn_tool -i N -{kind} -g` printed nothing readable"


def check_link(facts: dict) -> dict:
    state = _per_device(facts, "link")
    read = {k: v for k, v in state.items() if v}
    if not read:
        return result("npu-link", "n/a", f"link state not read: {_tool_why(facts, 'link')}",
                      "on the host: `hccn_tool -i N -link -g` for each chip")
    down = [k for k, v in read.items() if v != "UP"]
    if down:
        return result("npu-link", "fail", "link not up: " + "; ".join(f"{k}: {read[k]}" for k in down),
                      "check the chip's cable/optical module and switch port (`hccn_tool -i N -optical -g`,"
                      " `hccn_tool -i N -link_stat -g`); the job's collectives over this chip hang until it is up",
                      down)
    unread = [k for k in state if not state[k]]
    if unread:
        return result("npu-link", "warn", f"link state not read for {', '.join(unread)} (the others: UP)",
                      "on the host: `hccn_tool -i N -link -g`", unread)
    return result("npu-link", "pass", f"{len(read)} link(s) UP")


def check_net_health(facts: dict) -> dict:
    state = _per_device(facts, "net_health")
    read = {k: v for k, v in state.items() if v}
    if not read:
        return result("npu-net-health", "n/a", f"network health not read: {_tool_why(facts, 'net_health')}",
                      "on the host: `hccn_tool -i N -net_health -g` for each chip")
    # Success: the detect address answered; Init: no detection run yet (netdetect unset), not a fault.
    bad = [k for k, v in read.items() if v.lower() not in ("success", "init")]
    if bad:
        return result("npu-net-health", "fail", "network health: " + "; ".join(f"{k}: {read[k]}" for k in bad),
                      "the chip cannot reach its netdetect address: check its address, gateway and the switch"
                      " (`hccn_tool -i N -netdetect -g`, `hccn_tool -i N -ping -g address PEER`)", bad)
    return result("npu-net-health", "pass", "network health: " + ", ".join(sorted({v for v in read.values()}))
                  + f" on {len(read)} chip(s)")


def check_tls(facts: dict) -> dict:
    state = {k: v for k, v in _per_device(facts, "tls").items() if v is not None}
    if not state:
        return result("npu-tls", "n/a", f"TLS switch not read: {_tool_why(facts, 'tls')}",
                      "on the host: `hccn_tool -i N -tls -g | grep switch` for each chip")
    values = sorted(set(state.values()))
    if len(values) > 1:
        on = [k for k, v in state.items() if v == 1]
        off = [k for k, v in state.items() if v == 0]
        return result("npu-tls", "fail", f"TLS switch differs: enabled on {', '.join(on)}; disabled on"
                      f" {', '.join(off)}",
                      "set one value on every chip of every node (`hccn_tool -i N -tls -s enable 0|1`); chips with"
                      " different switches cannot link", sorted(state))
    return result("npu-tls", "pass", f"TLS switch {'enabled' if values[0] else 'disabled'} on all"
                  f" {len(state)} chip(s)")


def check_ping(facts: dict, peers: list[str]) -> dict:
    if not peers:
        return result("npu-ping", "n/a", "no --peer named: the reach to another node's chips is not tested",
                      "name a chip address of the other node: --peer A (repeatable)")
    pings = facts.get("pings") or {}
    if not pings:
        why = ("hccn_tool not found" if facts["ran_tools"] and not facts["hccn_tool"] else
               "another host's tree: nothing is run on it (pass saved `hccn_tool -i N -ping -g address A` output)")
        return result("npu-ping", "n/a", f"ping to {', '.join(peers)} not run: {why}",
                      "run preflight on the node itself with --peer")
    lost = sorted(f"{k} -> {a}: {v['received']}/{v['sent']}" if v else f"{k} -> {a}: no answer"
                  for (k, a), v in pings.items() if not v or v["received"] < v["sent"])
    if lost:
        return result("npu-ping", "fail", "ping lost: " + "; ".join(lost),
                      "check both chips' addresses, subnet and gateway, and the switch between the nodes",
                      sorted({k for (k, _), v in pings.items() if not v or v["received"] < v["sent"]}))
    return result("npu-ping", "pass", f"{len(pings)} ping(s) answered ({', '.join(peers)})")


def check_clock(facts: dict, connect_timeout: int | None, timeout_from: str) -> dict:
    clock = facts.get("clock") or {}
    offset = clock.get("offset_s")
    if offset is None:
        return result("clock-skew", "n/a", "clock offset not read (no `chronyc tracking` output)",
                      "run chrony (or NTP) on every node; on the host: `chronyc tracking`")
    if (clock.get("leap") or "").lower().startswith("not sync"):
        return result("clock-skew", "warn", f"clock not synchronised (chronyc tracking: Leap status {clock['leap']}):"
                      " its offset from the other nodes is unknown",
                      "make chrony reach its NTP server (`chronyc sources -v`) on every node before the job")
    if connect_timeout is None:
        return result("clock-skew", "n/a", f"clock {offset:+.3f} s from NTP; no HCCL_CONNECT_TIMEOUT to judge"
                      " it against", "")
    # Two nodes each `offset` off, in opposite directions, are 2 x offset apart.
    skew = 2 * abs(offset)
    if skew >= connect_timeout:
        return result("clock-skew", "fail", f"clock {offset:+.3f} s from NTP: two nodes may be {skew:.1f} s apart,"
                      f" not below HCCL_CONNECT_TIMEOUT {connect_timeout} s ({timeout_from})",
                      "synchronise the clocks of all nodes (chrony/NTP) before the job")
    return result("clock-skew", "pass", f"clock {offset:+.3f} s from NTP (nodes at most {skew:.3f} s apart, below"
                  f" HCCL_CONNECT_TIMEOUT {connect_timeout} s, {timeout_from})")


def run(facts: dict, peers: list[str], connect_timeout: int | None, timeout_from: str) -> list[dict]:
    names = ["npu-net-config", "npu-subnet", "npu-link", "npu-net-health", "npu-tls", "npu-ping"]
    if not facts["chips"]:
        out = [result(n, "n/a", "no chips read, so no chip NICs to check", "") for n in names]
    else:
        addrs = addresses(facts)
        out = [check_config(facts, addrs), check_subnet(facts, addrs), check_link(facts),
               check_net_health(facts), check_tls(facts), check_ping(facts, peers)]
    return out + [check_clock(facts, connect_timeout, timeout_from)]
