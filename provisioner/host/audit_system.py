"""Audit checks of how containers reach the NPU: device nodes and their modes, the HwHiAiUser account,
the Docker engine, Ascend Docker Runtime and CDI, the paths the runtime mounts, /dev/shm."""

from __future__ import annotations

from provisioner import chipids
from provisioner.host.audit_context import AuditContext
from provisioner.host.findings import error, info, warning


def _node(ctx: AuditContext, name: str) -> dict | None:
    return next((n for n in ctx.devices.get("nodes", []) if n["name"] == name), None)


def check_devices(ctx: AuditContext):
    ids = ctx.devices.get("davinci_ids") or []
    chips = ctx.chips
    if chips and not ids:
        yield error("device-nodes-missing", f"npu-smi shows {len(chips)} chip(s) but there is no /dev/davinciN node",
                    "load the driver (reinstall the HDK or reboot); /dev/davinciN appear when the driver is up")
        return
    if not ids:
        return
    needed: list[str] = []
    for fam in ctx.families or []:
        row = next((r for r in ctx.matrix.rows("audit_device_nodes") if r["family"] == fam), None)
        for n in (row or {}).get("nodes", []):
            if n not in needed:
                needed.append(n)
    if not ctx.families:
        needed = ["davinci_manager"]
    missing = [n for n in needed if not (_node(ctx, n) or (n == "davinci_manager" and _node(ctx, "davinci_manager_docker")))]
    if missing:
        yield error("device-nodes-missing", f"/dev/{', /dev/'.join(missing)} missing",
                    "the driver creates these; reinstall the HDK driver or reload it")
    smi = (ctx.npu_smi.get("info") or {})
    phys = sorted({c["phy_id"] for c in chips if c.get("phy_id") is not None})
    if chips and smi.get("second_id") and phys and phys != ids:
        yield warning("device-ids-mismatch", f"npu-smi {smi['second_id']} ids {phys} differ from /dev/davinci ids {ids}",
                      "check that the driver is fully loaded; select devices by /dev/davinciN")
    elif chips and len(chips) != len(ids):
        yield warning("device-ids-mismatch", f"npu-smi shows {len(chips)} chip(s) but there are {len(ids)} /dev/davinciN"
                      f" nodes ({ids})", "check that the driver is fully loaded and all chips are up")
    gid = (ctx.report.get("account") or {}).get("gid")
    closed: dict[str, list[str]] = {}
    other_group: dict[int, list[str]] = {}
    for rec in ctx.devices.get("nodes", []):
        if rec["type"] != "char":
            continue
        mode = int(rec["mode"], 8)
        if mode & 0o060 != 0o060:
            closed.setdefault(rec["mode"], []).append(rec["name"])
        elif gid is not None and rec["gid"] != gid:
            other_group.setdefault(rec["gid"], []).append(rec["name"])
    if closed:
        text = "; ".join(f"{_node_names(names)} (mode {mode})" for mode, names in closed.items())
        yield warning("device-not-group-readable", f"device nodes not group read/write: {text}",
                      "only root can open them; containers running as a non-root user fail: restore mode 0660"
                      " and group HwHiAiUser (reinstalling the driver does)")
    if other_group:
        text = "; ".join(f"{_node_names(names)} (gid {g})" for g, names in other_group.items())
        yield info("device-group-unexpected", f"device nodes not in the HwHiAiUser group (gid {gid}): {text}",
                   "non-root containers need the nodes' group as a supplementary group")


def _node_names(names: list[str]) -> str:
    """davinci0..davinci7 + others -> 'davinci0-7, davinci_manager'."""
    ids = sorted(int(n[7:]) for n in names if n.startswith("davinci") and n[7:].isdigit())
    rest = [n for n in names if not (n.startswith("davinci") and n[7:].isdigit())]
    return ", ".join(([f"davinci{chipids.format_ids(ids)}"] if ids else []) + rest)


def check_account(ctx: AuditContext):
    if not ctx.has_npu_hints:
        return
    acct = ctx.report.get("account") or {}
    user, group = acct.get("user", "HwHiAiUser"), acct.get("group", "HwHiAiUser")
    if acct.get("uid") is None and acct.get("gid") is None:
        yield warning("hwhiaiuser-missing", f"neither user nor group {user} exists (/etc/passwd, /etc/group)",
                      "the driver installer creates them; reinstall the driver with --install-username/--install-usergroup"
                      " or create both (uid/gid 1000 on most hosts)")
    elif acct.get("gid") is None:
        yield warning("hwhiaiuser-group-missing", f"group {group} is missing from /etc/group",
                      f"create it (groupadd -g <gid> {group}) with the gid the device nodes carry")
    elif acct.get("uid") is None:
        yield info("hwhiaiuser-user-missing", f"user {user} is missing from /etc/passwd (group {group} exists)",
                   "containers can run as root or add the group; the driver installer normally creates the user")


def check_docker(ctx: AuditContext):
    dk = ctx.report.get("docker") or {}
    mode = ctx.options.mode
    engine = dk.get("engine") or {}
    if engine.get("probed") and not engine.get("reachable"):
        sev = warning if mode else info
        yield sev("docker-engine-unreachable", f"Docker engine not reachable: {engine.get('error')}",
                  "start dockerd (systemctl start docker) or set DOCKER_HOST")
    daemon = dk.get("daemon_json") or {}
    if daemon.get("error"):
        yield warning("docker-daemon-json-invalid", f"{daemon['path']}: {daemon['error']}",
                      "fix the JSON; dockerd refuses to start with an invalid daemon.json")
    rt = dk.get("ascend_runtime") or {}
    if mode == "runtime":
        if not rt.get("installed") and not rt.get("configured"):
            yield error("ascend-runtime-missing", "--mode runtime needs Ascend Docker Runtime, which is not installed",
                        "install Ascend-docker-runtime (--install-scene=docker), or use --mode devices")
        elif not rt.get("configured"):
            yield error("ascend-runtime-missing", "Ascend Docker Runtime is installed but not registered in"
                        " /etc/docker/daemon.json (runtimes.ascend)", "rerun its installer, then restart dockerd")
        elif not rt.get("default"):
            yield info("ascend-runtime-not-default", "Ascend Docker Runtime is registered but not the default runtime",
                       "pass --runtime ascend to docker run (provision does)")
    elif mode == "cdi":
        if not any(d.get("ascend_specs") for d in dk.get("cdi") or []):
            dirs = ", ".join(d["dir"] for d in dk.get("cdi") or [])
            yield error("cdi-spec-missing", f"--mode cdi: no CDI spec for ascend.com/npu in {dirs}",
                        "write one with `provision cdi` into /etc/cdi, or use --mode devices")
    elif ctx.has_npu_hints and not rt.get("installed") and not rt.get("configured"):
        yield info("ascend-runtime-missing", "Ascend Docker Runtime is not installed",
                   "containers get the NPU through explicit --device and -v flags (provision run-cmd)")


def check_runtime_paths(ctx: AuditContext):
    rp = ctx.report.get("runtime_paths") or {}
    problems = rp.get("problems") or []
    if not problems:
        return
    rt = (ctx.report.get("docker") or {}).get("ascend_runtime") or {}
    if ctx.options.mode == "runtime" or rt.get("default"):
        sev = error
    elif rt.get("installed") or rt.get("configured"):
        sev = warning
    else:
        sev = info
    for p in problems:
        yield sev("runtime-mount-refused",
                  f"Ascend Docker Runtime would refuse to mount {p['path']}: {p['at']} is {', '.join(p['problems'])}",
                  f"chmod go-w {p['at']} and keep it owned by root" if "symbolic" not in " ".join(p["problems"])
                  else f"replace the symlink {p['at']} by the real path, or set ASCEND_ALLOW_LINK=True")


def check_shm(ctx: AuditContext):
    shm = ctx.report.get("shm")
    limit = ctx.limit("shm_min_mb")
    if not shm or limit is None:
        return
    if shm["total_mb"] < limit:
        yield warning("shm-small", f"/dev/shm is {shm['total_mb']} MB, below {limit} MB",
                      "give training containers --ipc=host or --shm-size of several GB (data loaders and HCCL use it)")
