"""Render a DevicePlan for Docker: a commented, copy-pasteable `docker run` line,
its argv, and the matching docker-py container-create keyword arguments (what
`provision run-cmd --json` prints and provisioner.engine creates containers from)."""

from __future__ import annotations

import shlex

from provisioner.devices.plan import DevicePlan


def _device_flag(plan: DevicePlan, node) -> str:
    host = plan.node_path(node)
    return host if host == node.container else f"{host}:{node.container}"


def _chunks(plan: DevicePlan, image: str, command: list[str], name: str | None, interactive: bool) -> list[list[str]]:
    """docker run arguments grouped one option per chunk (a chunk is one line of the shell form)."""
    head = ["docker", "run", "--rm"] + (["-it"] if interactive else [])
    chunks: list[list[str]] = [head]
    if name:
        chunks.append(["--name", name])
    if plan.mode == "runtime":
        chunks.append(["--runtime", plan.settings["runtime_name"]])
        chunks.extend(["-e", f"{k}={v}"] for k, v in plan.runtime_env)
    else:
        chunks.extend(["--device", _device_flag(plan, n)] for n in plan.nodes)
    chunks.extend(["-v", f"{plan.host_path(m)}:{m.container}:ro"] for m in plan.mounts)
    chunks.extend(["--group-add", str(g)] for g in plan.group_add)
    if plan.user:
        chunks.append(["--user", plan.user])
    chunks.append(["--ipc=host"] if plan.ipc == "host" else ["--shm-size", plan.shm_size or ""])
    if plan.network:
        chunks.append(["--network", plan.network])
    chunks.extend(["-e", f"{e.name}={e.value}"] for e in plan.env if e.value is not None)
    chunks.append([image, *command])
    return chunks


def argv(plan: DevicePlan, image: str, command: list[str] | None = None, name: str | None = None) -> list[str]:
    command = list(command or [])
    return [tok for chunk in _chunks(plan, image, command, name, not command) for tok in chunk]


def comments(plan: DevicePlan) -> list[str]:
    """The `#` lines above the command: what was chosen and why."""
    ids = list(plan.chips)
    chip = plan.chip_nodes[0].name.rstrip("0123456789")  # a plan always has at least one chip
    vis = plan.settings["visible_env"]
    lines = [
        f"# provision run-cmd: {plan.card['id']} ({plan.card['name']}, chip family {plan.family}),"
        f" host chips {','.join(map(str, ids))}, {plan.mode} mode",
        f"# host {chip}{','.join(map(str, ids))} -> container NPU {','.join(map(str, range(len(ids))))}"
        f" ({vis}, if you set it, takes these container-local ids)",
    ]
    if plan.mode == "runtime":
        lines.append(
            f"# --runtime {plan.settings['runtime_name']}: the Ascend runtime maps the chips named in"
            f" {plan.settings['runtime_devices_env']} (physical ids), the shared nodes and the driver files of its lists"
        )
    else:
        lines.append("# no --privileged: the device nodes listed here are all the container needs")
    for g in plan.group_add:
        lines.append(f"# --group-add {g}: {plan.group_why}")
    shm = plan.settings["shm_path"]
    if plan.ipc == "host":
        lines.append(
            f"# --ipc=host: DataLoader workers and HCCL share memory through {shm}; host IPC lifts Docker's 64 MB"
            " default but shares the host's IPC namespace (--shm-size SIZE gives a private, sized one)"
        )
    else:
        lines.append(f"# --shm-size {plan.shm_size}: a private {shm} of that size (raise it if workers die with bus errors)")
    d = plan.driver
    if d.get("dir"):
        what = f"{d['dir']} (whole)" if d["mount"] == "whole" else f"{d['dir']}/lib64 + version.info"
        lines.append(f"# driver {d.get('version') or 'version unknown'}: {what} read-only; {d['why']}")
    if plan.network:
        m = plan.multi
        lines.append(
            f"# --network host: node {m.node_rank} of {m.nnodes}; HCCL and torchrun reach the other nodes directly"
            f" (master {m.master_addr}:{m.master_port})"
        )
    nic = {e.name: e.value for e in plan.env}
    if plan.network and not any(nic.get(k) for k in ("HCCL_IF_IP", "HCCL_SOCKET_IFNAME")):
        lines.append("# no --hccl-if-ip / --socket-ifname: HCCL takes the first non-docker NIC by name; set one on hosts with several NICs")
    if plan.stack:
        s = plan.stack
        lines.append(f"# image stack {s['id']}: CANN {s['cann']}, driver fit {s['driver_fit'] or 'not checked'}")
    lines.extend(f"# note: {n}" for n in plan.notes)
    return lines


def shell(plan: DevicePlan, image: str, command: list[str] | None = None, name: str | None = None) -> str:
    """The full text: comment lines, then one option per line joined with backslashes."""
    command = list(command or [])
    chunks = _chunks(plan, image, command, name, not command)
    body = [" ".join(shlex.quote(t) for t in chunk) for chunk in chunks]
    text = body[0] + "".join(" \\\n  " + line for line in body[1:])
    return "\n".join(comments(plan)) + "\n" + text + "\n"


def docker_kwargs(plan: DevicePlan, image: str, command: list[str] | None = None, name: str | None = None) -> dict:
    """Keyword arguments of docker-py's container create / run (plain, JSON-able; Engine.create takes them)."""
    kw: dict = {"image": image, "command": list(command) if command else None}
    if name:
        kw["name"] = name
    env = {e.name: e.value for e in plan.env if e.value is not None}
    if plan.mode == "runtime":
        kw["runtime"] = plan.settings["runtime_name"]
        env = {**dict(plan.runtime_env), **env}
    else:
        kw["devices"] = [f"{plan.node_path(n)}:{n.container}:rwm" for n in plan.nodes]
    kw["volumes"] = {plan.host_path(m): {"bind": m.container, "mode": "ro"} for m in plan.mounts}
    kw["environment"] = env
    if plan.group_add:
        kw["group_add"] = [str(g) for g in plan.group_add]
    if plan.user:
        kw["user"] = plan.user
    if plan.ipc == "host":
        kw["ipc_mode"] = "host"
    else:
        kw["shm_size"] = plan.shm_size
    if plan.network:
        kw["network_mode"] = plan.network
    return kw
