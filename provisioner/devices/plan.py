"""The device plan: which host device nodes, read-only mounts and environment a
container needs to use the selected Ascend chips.

One planner, one plan; `runline`, `cdi` and `k8s` render the same plan as a
`docker run` line or docker-py kwargs, a CDI spec, or Kubernetes manifests.
Every device name and path comes from matrices/devices.yaml; the host is read
through `hostfs` (a root for files, a dev root for nodes), the engine through
`enginefacts` (passed in, so planning itself stays pure and testable).
"""

from __future__ import annotations

import fnmatch
import glob
import os
import re
from dataclasses import asdict, dataclass, field, replace

from provisioner import chipids, validate
from provisioner.errors import ProvisionError
from provisioner.host import hostfs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.devices.enginefacts import EngineFacts


class PlanRefused(ProvisionError):
    """The host cannot run this selection; the message names every reason."""

    def __init__(self, reasons: list[str]):
        super().__init__("; ".join(reasons))
        self.reasons = reasons


@dataclass(frozen=True)
class Node:
    name: str  # path under the dev root on the host: davinci4, uburma/uburma0, davinci_manager_docker
    container: str  # path inside the container
    type: str  # char | block
    major: int
    minor: int
    mode: int
    uid: int
    gid: int
    chip: int | None = None  # physical id for chip nodes


@dataclass(frozen=True)
class Mount:
    id: str
    host: str  # absolute path as the host names it (without --root)
    container: str
    kind: str  # dir | file
    why: str
    local: bool = False  # host is a path on this machine, not under --root (--rank-table)


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str | None  # None: set only where k8s_field supplies it
    k8s_field: str | None = None
    why: str = ""


@dataclass(frozen=True)
class MultiNode:
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: str | None = None

    def require_master(self) -> None:
        """Nodes that rendezvous themselves (docker run, launch) need node 0's address; Kubernetes names it."""
        if self.nnodes > 1 and not self.master_addr:
            raise ProvisionError("--nnodes > 1 needs --master-addr (the IP or name of node rank 0)")


@dataclass(frozen=True)
class DevicePlan:
    card: dict  # id, name
    family: str  # chip family id (910b, a3, 310p, ...)
    device_family: str
    k8s_resource: str | None
    ring_label: str | None
    task: str | None
    mode: str  # devices | runtime
    chips: tuple[int, ...]
    nodes: tuple[Node, ...]
    mounts: tuple[Mount, ...]
    env: tuple[EnvVar, ...]
    runtime_env: tuple[tuple[str, str], ...]
    ipc: str | None
    shm_size: str | None
    network: str | None
    group_add: tuple[int, ...]
    group_why: str
    user: str | None
    multi: MultiNode
    driver: dict  # version, mount (lib64/whole), why, dir
    settings: dict  # device_settings id -> value
    root: str = "/"
    dev_root: str = "/dev"
    notes: tuple[str, ...] = ()
    stack: dict | None = None  # id, cann, fit when an image stack was checked

    # -- paths as this machine sees them ------------------------------------------------
    def host_path(self, mount: Mount) -> str:
        if mount.local or self.root == "/":
            return mount.host
        return os.path.join(self.root, mount.host.lstrip("/"))

    def node_path(self, node: Node) -> str:
        return os.path.join(self.dev_root, node.name)

    def rebase(self, root: str = "/", dev_root: str = "/dev") -> DevicePlan:
        """The same plan as seen from another root (e.g. print a fixture host's plan with real paths)."""
        return replace(self, root=root, dev_root=dev_root)

    @property
    def chip_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.chip is not None)

    @property
    def shared_nodes(self) -> tuple[Node, ...]:
        return tuple(n for n in self.nodes if n.chip is None)

    @property
    def world_size(self) -> int:
        return len(self.chips) * self.multi.nnodes

    def to_dict(self) -> dict:
        out = asdict(self)
        out["chips"] = list(self.chips)
        out["container_ids"] = list(range(len(self.chips)))
        out["runtime_env"] = dict(self.runtime_env)
        out["nodes"] = [{**asdict(n), "host": self.node_path(n), "mode": f"0{n.mode:o}"} for n in self.nodes]
        out["mounts"] = [{**asdict(m), "source": self.host_path(m), "read_only": True} for m in self.mounts]
        return out


@dataclass
class Options:
    """Everything the planner takes besides the matrix and the host."""

    card: str
    devices: str
    root: str = "/"
    dev_root: str = "/dev"
    task: str | None = "train"  # None: do not check training capability (cdi)
    mode: str = "devices"  # devices | runtime (auto is decided by the caller from enginefacts)
    shm_size: str | None = None
    driver_mount: str | None = None  # lib64 | whole; default from the family
    user: str | None = None
    multi: MultiNode = field(default_factory=MultiNode)
    hccl_if_ip: str | None = None
    socket_ifname: str | None = None
    hccl_connect_timeout: str | None = None
    hccl_exec_timeout: str | None = None
    rank_table: str | None = None  # host file mounted as RANK_TABLE_FILE
    stack: dict | None = None  # the image's Stack (label or --stack file)
    check_in_use: bool = True  # False for specs that describe the host, not one run (cdi, k8s)
    engine: EngineFacts | None = None  # None when not asked
    engine_skipped: str | None = None  # why the engine was not asked


_SIZE = re.compile(r"^(\d+)([bkmg]?)$", re.I)


def shm_bytes(size: str) -> int:
    """Docker's --shm-size units (b, k, m, g; binary)."""
    m = _SIZE.match(size.strip())
    if not m or int(m[1]) == 0:
        raise ProvisionError(f"--shm-size {size!r}: write a size such as 16g, 512m")
    return int(m[1]) * {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m[2].lower()]


def _chip_regex(pattern: str) -> re.Pattern:
    before, _, after = pattern.partition("{id}")
    return re.compile(f"^{re.escape(before)}(\\d+){re.escape(after)}$")


def _char_nodes(dev_root: str, names=None) -> dict[str, dict]:
    return {r["name"]: r for r in hostfs.scan_devices(dev_root, names) if r["type"] in ("char", "block")}


def _node(rec: dict, name: str, container: str, chip: int | None = None) -> Node:
    return Node(name, container, rec["type"], rec["major"], rec["minor"], int(rec["mode"], 8), rec["uid"], rec["gid"], chip)


def plan(matrix, opts: Options) -> DevicePlan:
    """Plan the selection or raise PlanRefused (every reason) / ProvisionError (bad input)."""
    card, family, _ = matrix.lookup_card(opts.card)
    dfam = next((r for r in matrix.rows("device_families") if r["id"] == family["device_family"]), None)
    if dfam is None:
        raise ProvisionError(f"no device data for device family {family['device_family']!r} (matrices/devices.yaml)")
    settings = {r["id"]: r["value"] for r in matrix.rows("device_settings")}
    _check_input(opts)
    opts = replace(opts, root=os.path.abspath(opts.root), dev_root=os.path.abspath(opts.dev_root))
    notes: list[str] = []
    refusals: list[str] = []
    container_dev = settings["container_dev"]

    ids, chip_nodes = _chips(opts, dfam, container_dev, refusals)
    _check_training(matrix, opts, card, family, refusals)
    shared = _shared_nodes(opts, dfam, container_dev, notes, refusals)
    mounts, driver = _driver_and_mounts(matrix, opts, dfam, notes, refusals)
    env_extra = _rank_table(opts, settings, mounts, notes)
    stack_summary = _check_stack(matrix, opts.stack, family, driver["version"], notes, refusals) if opts.stack else None
    _check_in_use(opts, settings, chip_nodes, notes, refusals)
    if refusals:
        raise PlanRefused(refusals)

    gids, group_why = _group(opts, chip_nodes + shared, notes)
    multi = opts.multi
    options = {
        "hccl_connect_timeout": opts.hccl_connect_timeout,
        "hccl_exec_timeout": opts.hccl_exec_timeout,
        "hccl_if_ip": opts.hccl_if_ip,
        "socket_ifname": opts.socket_ifname,
        "master_addr": multi.master_addr,
        "master_port": multi.master_port,
        "nnodes": str(multi.nnodes),
        "node_rank": str(multi.node_rank),
        "nproc_per_node": str(len(ids)),
    }
    env = _env(matrix, options, len(ids) * multi.nnodes > 1, multi.nnodes > 1, family["id"]) + env_extra
    env = _gloo_env(env, opts, notes)
    multi = replace(multi, master_port=next((e.value for e in env if e.name == "MASTER_PORT"), None))

    runtime_env: list[tuple[str, str]] = []
    if opts.mode == "runtime":
        # The runtime maps the nodes itself; the plan still lists them (numbering, CDI, checks).
        runtime_env.append((settings["runtime_devices_env"], chipids.format_ids(ids)))
        runtime_env.extend(sorted(dfam.get("runtime_env", {}).items()))

    return DevicePlan(
        card={"id": card["id"], "name": card["name"]},
        family=family["id"],
        device_family=dfam["id"],
        k8s_resource=family.get("k8s_resource"),
        ring_label=family.get("k8s_ring_label"),
        task=opts.task,
        mode=opts.mode,
        chips=tuple(ids),
        nodes=tuple(chip_nodes + shared),
        mounts=tuple(mounts),
        env=tuple(env),
        runtime_env=tuple(runtime_env),
        ipc=None if opts.shm_size else "host",
        shm_size=opts.shm_size,
        network="host" if multi.nnodes > 1 else None,
        group_add=tuple(gids),
        group_why=group_why,
        user=opts.user,
        multi=multi,
        driver=driver,
        settings=settings,
        root=opts.root,
        dev_root=opts.dev_root,
        notes=tuple(notes),
        stack=stack_summary,
    )


def _check_input(opts: Options) -> None:
    if not os.path.isdir(opts.dev_root):
        raise ProvisionError(f"--dev-root {opts.dev_root}: no such directory")
    if not os.path.isdir(opts.root):
        raise ProvisionError(f"--root {opts.root}: no such directory")
    if opts.mode not in ("devices", "runtime"):
        raise ProvisionError(f"--mode {opts.mode!r}: expected devices or runtime")
    if opts.driver_mount not in (None, "lib64", "whole"):
        raise ProvisionError(f"--driver-mount {opts.driver_mount!r}: expected lib64 or whole")
    if opts.shm_size:
        validate.single_line(opts.shm_size, "--shm-size", 32)
        shm_bytes(opts.shm_size)
    validate.single_line(opts.card, "--card", 128)
    validate.single_line(opts.devices, "--devices", 512)
    m = opts.multi
    if m.master_addr is not None:
        validate.host(m.master_addr, "--master-addr")
    if opts.hccl_if_ip is not None:
        validate.ip_address(opts.hccl_if_ip, "--hccl-if-ip")
    if opts.socket_ifname is not None:
        validate.ifname_spec(opts.socket_ifname, "--socket-ifname")
    for flag, value in (("--hccl-connect-timeout", opts.hccl_connect_timeout), ("--hccl-exec-timeout", opts.hccl_exec_timeout)):
        if value is not None:
            validate.single_line(value, flag, 16)
    if opts.user is not None:
        validate.docker_user(opts.user, "--user")
    if m.nnodes < 1 or not 0 <= m.node_rank < m.nnodes:
        raise ProvisionError(f"--node-rank {m.node_rank} must be in 0..{m.nnodes - 1} (--nnodes {m.nnodes})")


def _chips(opts: Options, dfam: dict, container_dev: str, refusals: list[str]) -> tuple[list[int], list[Node]]:
    """The selected ids and the nodes of those the host has."""
    chip_re = _chip_regex(dfam["chip_node"])
    present = {int(m[1]): rec for name, rec in _char_nodes(opts.dev_root).items() if (m := chip_re.match(name))}
    if not present:
        # Nothing else is worth listing: no chip nodes means no loaded driver (or the wrong --dev-root).
        if opts.devices.strip().lower() != "all":
            chipids.parse(opts.devices)  # a malformed spec is still reported as such
        pattern = dfam["chip_node"].format(id="N")
        raise PlanRefused([f"no {pattern} device nodes under {opts.dev_root}: is the Ascend driver installed and loaded?"
                           " (--dev-root reads another place)"])
    ids = chipids.parse(opts.devices, sorted(present))
    missing = [i for i in ids if i not in present]
    if missing:
        have = chipids.format_ids(sorted(present)) if present else "none"
        refusals.append(
            f"chip {chipids.format_ids(missing)} not found: {opts.dev_root} has no "
            f"{', '.join(dfam['chip_node'].format(id=i) for i in missing)} (chips present: {have})"
        )
    nodes = []
    for i in ids:
        if i in present:
            name = dfam["chip_node"].format(id=i)
            nodes.append(_node(present[i], name, f"{container_dev}/{name}", i))
    return ids, nodes


def _check_training(matrix, opts: Options, card: dict, family: dict, refusals: list[str]) -> None:
    if opts.task != "train" or (family["training"] and card.get("training", True)):
        return
    why = family.get("training_note") or f"{card['id']} is not a training product"
    if card.get("training") is False and family["training"]:
        why = card.get("notes") or f"{card['id']} is an inference product"
    fallbacks = ", ".join(matrix.policy.get("training_fallback_cards", []))
    refusals.append(f"{card['id']} cannot train ({why}); use --task inference, or a training card ({fallbacks})")


def _shared_nodes(opts: Options, dfam: dict, container_dev: str, notes: list[str], refusals: list[str]) -> list[Node]:
    """The family's manager nodes (first host candidate present) and every node of its node directories."""
    present = _char_nodes(opts.dev_root)
    out: list[Node] = []
    for row in dfam["nodes"]:
        hit = next((h for h in row.get("host", [row["name"]]) if h in present), None)
        if hit:
            out.append(_node(present[hit], hit, f"{container_dev}/{row['name']}"))
        elif row["need"] == "required":
            refusals.append(f"{opts.dev_root} lacks {row['name']}, which {dfam['id']}-family chips need (is the driver loaded?)")
        elif row["need"] == "expected":
            notes.append(f"{opts.dev_root}/{row['name']} not found; not mapped")
    for row in dfam.get("node_dirs", []):
        sub = os.path.join(opts.dev_root, row["dir"])
        inside = _char_nodes(sub) if os.path.isdir(sub) else {}
        for name, rec in sorted(inside.items()):
            out.append(_node(rec, f"{row['dir']}/{name}", f"{container_dev}/{row['dir']}/{name}"))
        if not inside and row["need"] != "optional":
            (refusals if row["need"] == "required" else notes).append(f"{sub}/ has no device nodes; not mapped")
    return out


def _driver_and_mounts(matrix, opts: Options, dfam: dict, notes: list[str], refusals: list[str]) -> tuple[list[Mount], dict]:
    ddir = hostfs.driver_dir(opts.root)
    choice = opts.driver_mount or dfam["driver_mount"]
    why = dfam["driver_mount_why"] if choice == dfam["driver_mount"] else "chosen with --driver-mount"
    if opts.mode == "runtime":
        choice = "lib64"
        why = "the Ascend runtime mounts driver/lib64, include and topo itself; only what it leaves out is added"
    rel_driver = "/" + str(ddir.relative_to(opts.root)).strip("/") if ddir else None
    if rel_driver is None:
        refusals.append(f"no Ascend driver under {opts.root} (looked for {', '.join('/' + d for d in hostfs.DRIVER_DIRS)})")
        mounts: list[Mount] = []
    else:
        mounts = _mounts(matrix, opts, dfam["id"], choice, rel_driver, notes, refusals)
    version = (hostfs.driver_info(opts.root) or {}).get("Version")
    return mounts, {"version": version, "mount": choice, "why": why, "dir": rel_driver}


def _rank_table(opts: Options, settings: dict, mounts: list[Mount], notes: list[str]) -> list[EnvVar]:
    """--rank-table: mount the file read-only and point RANK_TABLE_FILE at it."""
    if not opts.rank_table:
        return []
    path = os.path.abspath(opts.rank_table)
    if not os.path.isfile(path) or os.path.islink(path):
        raise ProvisionError(f"--rank-table {opts.rank_table}: not a regular file (HCCL refuses symlinks too)")
    mounts.append(Mount("rank-table", path, settings["rank_table_path"], "file", "the HCCL rank table (hccl.json)", local=True))
    if opts.root != "/":
        notes.append("--rank-table is mounted from this machine's path, not from under --root")
    return [EnvVar(settings["rank_table_env"], settings["rank_table_path"], None, "HCCL builds its communicator from this rank table")]


def _check_in_use(opts: Options, settings: dict, chip_nodes: list[Node], notes: list[str], refusals: list[str]) -> None:
    from provisioner.devices import enginefacts

    engine = opts.engine
    if not opts.check_in_use:
        return
    if opts.engine_skipped:
        notes.append(f"in-use check skipped: {opts.engine_skipped}")
        return
    if engine is None or not engine.reachable:
        notes.append(f"in-use check skipped: {engine.note if engine is not None else 'no Docker engine asked'}")
        return
    # The runtime maps the host's real nodes, so its ids only count when the dev root is the real one.
    real_dev = os.path.realpath(opts.dev_root) == os.path.realpath(settings["container_dev"])
    chip_paths = {n.chip: os.path.join(opts.dev_root, n.name) for n in chip_nodes if n.chip is not None}
    held = enginefacts.holders(engine.containers, chip_paths, settings["runtime_name"], settings["runtime_devices_env"], real_dev)
    for chip, hs in held.items():
        names = ", ".join(f"'{h.name}' ({h.id}{', via the Ascend runtime' if h.how == 'runtime' else ''})" for h in hs)
        refusals.append(f"chip {chip} ({chip_paths[chip]}) is already mapped into running container {names}; a chip serves one container")
    priv = enginefacts.privileged(engine.containers)
    if priv:
        notes.append(f"privileged container(s) {', '.join(priv)} can open every chip; check they are not using these")


def _group(opts: Options, nodes: list[Node], notes: list[str]) -> tuple[list[int], str]:
    """Groups that own nodes not open to everyone: added so a non-root user in the image can open them."""
    gids = sorted({n.gid for n in nodes if n.gid != 0 and n.mode & 0o006 != 0o006})
    acct = hostfs.account(opts.root)
    if not gids:
        if acct.get("gid") is None:
            notes.append(f"no {acct['user']} group on the host; a non-root user in the image may not open the nodes")
        return [], "the device nodes are root-owned or open to all; no group needed"
    named = f" ({acct['user']})" if acct.get("gid") in gids else ""
    modes = sorted({f"0{n.mode:o}" for n in nodes if n.gid in gids})
    return gids, (
        f"the device nodes belong to group {','.join(map(str, gids))}{named} with mode {','.join(modes)};"
        " a non-root user in the image opens them through this group"
    )


def _mounts(matrix, opts: Options, dfam_id: str, driver_mount: str, rel_driver: str, notes, refusals) -> list[Mount]:
    sets = {"always", f"driver-{driver_mount}"}
    if opts.multi.nnodes > 1:
        sets.add("multi-node")
    out: list[Mount] = []
    for row in matrix.rows("device_mounts"):
        if row["set"] not in sets or (row.get("families") and dfam_id not in row["families"]):
            continue
        found = []
        for cand in row["host"]:
            path = cand.replace("{driver}", rel_driver)
            full = hostfs.under(opts.root, path)
            matches = sorted(glob.glob(str(full))) if "*" in path else ([str(full)] if os.path.lexists(full) else [])
            for m in matches:
                found.append("/" + os.path.relpath(m, opts.root).lstrip("/"))
            if found and row.get("pick", "first") == "first":
                break
        if opts.mode == "runtime":
            covered = [c.replace("{driver}", rel_driver) for c in row.get("by_runtime", [])]
            found = [f for f in found if not any(fnmatch.fnmatchcase(f, c) for c in covered)]
            if not found and covered:
                continue
        if not found:
            shown = " or ".join(c.replace("{driver}", rel_driver) for c in row["host"])
            if row["need"] == "required":
                refusals.append(f"{opts.root} lacks {shown} ({row['why']})")
            elif row["need"] == "expected":
                notes.append(f"{shown} not found on the host; not mounted")
            continue
        for host in found:
            container = row.get("container") if len(found) == 1 and row.get("container") else host
            kind = "dir" if os.path.isdir(hostfs.under(opts.root, host)) else "file"
            out.append(Mount(row["id"], host, container, kind, row["why"]))
    return _drop_covered(out)


def _drop_covered(mounts: list[Mount]) -> list[Mount]:
    """Drop a mount that another mount of the plan already shows at the same place."""
    keep = []
    for m in mounts:
        covered = any(
            o is not m and m.host.startswith(o.host.rstrip("/") + "/")
            and m.container == o.container.rstrip("/") + m.host[len(o.host.rstrip("/")):]
            for o in mounts
        )
        if not covered:
            keep.append(m)
    return keep


def _env(matrix, options: dict, distributed: bool, multi_node: bool, family: str | None = None) -> list[EnvVar]:
    out = []
    for row in matrix.rows("launch_env"):
        if (row["when"] == "distributed" and not distributed) or (row["when"] == "multi-node" and not multi_node):
            continue
        given = options.get(row.get("option") or "")
        value = given if given is not None else row.get("value")
        if given is not None:
            _check_value(matrix, row["name"], given, family)
        # Kept even without a value: Kubernetes fills some from pod fields (rank, host IP, master DNS name).
        out.append(EnvVar(row["name"], value, row.get("k8s_field"), row["why"]))
    return out


def _gloo_env(env: list[EnvVar], opts: Options, notes: list[str]) -> list[EnvVar]:
    """GLOO_SOCKET_IFNAME in Gloo's syntax (exact names), derived from the HCCL_SOCKET_IFNAME value."""
    from provisioner.devices import netif

    if not opts.socket_ifname or not any(e.name == "GLOO_SOCKET_IFNAME" for e in env):
        return env
    # A run on this host resolves prefixes against its interfaces; a spec for other hosts (CDI, K8s) cannot.
    interfaces = netif.host_interfaces(opts.root) if opts.check_in_use else None
    value, note = netif.gloo_ifname(opts.socket_ifname, interfaces)
    if note:
        notes.append(note)
    return [replace(e, value=value) if e.name == "GLOO_SOCKET_IFNAME" else e for e in env]


def _check_value(matrix, name: str, value: str, family: str | None) -> None:
    """An option's value for a launch variable against the audit_env rule of that name, with the bounds of
    the plan's chip family (HCCL_EXEC_TIMEOUT: 0 is 'never' on A2/A3 but refused on the first-generation 910)."""
    from provisioner.host import launchvars

    rule = launchvars.rules(matrix).get(name)
    if rule is None:
        return
    rule = matrix.rule_for_family(rule, family)
    problem = launchvars.value_problem(rule, value)
    if problem:
        raise ProvisionError(f"{name}={value!r}: {problem}" + (f" ({rule['notes']})" if rule.get("applies_to")
                                                                and rule.get("notes") else ""))


def _check_stack(matrix, stack: dict, family: dict, host_driver: str | None, notes, refusals) -> dict:
    from provisioner.resolve import driverfit

    sid = stack.get("id", "?")
    chip = (stack.get("chip") or {}).get("family")
    cann = (stack.get("cann") or {}).get("version")
    summary = {"id": sid, "cann": cann, "chip": chip, "driver_fit": None}
    if chip and chip != family["id"]:
        refusals.append(f"image stack {sid} was built for chip family {chip}, not {family['id']} ({family['name']})")
    if not cann:
        notes.append(f"image stack {sid} names no CANN version; driver check skipped")
        return summary
    row, fit_matrix = driverfit.stack_row(matrix, stack, notes)
    if row is None:
        notes.append(f"CANN {cann} of image stack {sid} is not in the matrix; driver check skipped")
        return summary
    if not host_driver:
        notes.append("host driver version unknown (no driver/version.info); driver check skipped")
        return summary
    fit = driverfit.driver_fit(host_driver, row, fit_matrix)
    summary["driver_fit"] = fit
    needs = (stack.get("driver") or {}).get("summary") or driverfit.needs(fit_matrix, row)[0]
    if fit == "no":
        refusals.append(f"image stack {sid} has CANN {cann}, which needs HDK driver {needs}; this host has {host_driver}")
    elif fit == "newer":
        notes.append(f"host driver {host_driver} is newer than every driver listed for CANN {cann} ({needs}); usually fine")
    elif fit == "unknown":
        notes.append(f"no published driver list for CANN {cann}; driver {host_driver} not checked")
    return summary
