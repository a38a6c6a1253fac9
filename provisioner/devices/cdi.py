"""Render a DevicePlan as a Container Device Interface spec.

Kind `ascend.com/npu` (as Ascend Docker Runtime's own CDI mode), one device per
chip named by its physical id plus `all`; the shared nodes and the read-only
mounts go in the spec-wide containerEdits, applied whenever any of its devices
is requested. The declared cdiVersion is the lowest that has every field used
(deviceNodes.hostPath, names starting with a digit), so older Docker and Podman
load it; that rules out `additionalGids`, so the group is a comment/option.
"""

from __future__ import annotations

import json

from provisioner import validate
from provisioner.devices.plan import DevicePlan


def _node(plan: DevicePlan, node) -> dict:
    return {
        "path": node.container,
        "hostPath": plan.node_path(node),
        "type": "c" if node.type == "char" else "b",
        "major": node.major,
        "minor": node.minor,
        "fileMode": node.mode,
        "permissions": "rwm",
        "uid": node.uid,
        "gid": node.gid,
    }


def spec(plan: DevicePlan) -> dict:
    s = plan.settings
    options = s["cdi_mount_options"].split(",")
    devices = [
        {"name": str(n.chip), "containerEdits": {"deviceNodes": [_node(plan, n)]}}
        for n in plan.chip_nodes
    ]
    devices.append({"name": "all", "containerEdits": {"deviceNodes": [_node(plan, n) for n in plan.chip_nodes]}})
    edits: dict = {}
    if plan.shared_nodes:
        edits["deviceNodes"] = [_node(plan, n) for n in plan.shared_nodes]
    if plan.mounts:
        edits["mounts"] = [
            {"hostPath": plan.host_path(m), "containerPath": m.container, "options": list(options)} for m in plan.mounts
        ]
    return {"cdiVersion": s["cdi_version"], "kind": s["cdi_kind"], "devices": devices, "containerEdits": edits}


def header(plan: DevicePlan) -> list[str]:
    kind = plan.settings["cdi_kind"]
    first = plan.chips[0] if plan.chips else 0
    lines = [
        f"# CDI spec for {plan.card['id']} ({plan.card['name']}): chips {','.join(map(str, plan.chips))}, written by provision cdi",
        f"# use: docker run --device {kind}={first} ... (Docker >= 25 with CDI enabled, Podman), or {kind}=all",
        "# device names are the physical ids; each chip's node keeps its host name inside the container",
    ]
    for g in plan.group_add:
        lines.append(f"# non-root users: add --group-add {g} ({plan.group_why})")
    lines.extend(f"# note: {n}" for n in plan.notes)
    return [validate.comment(line) for line in lines]


def render(plan: DevicePlan, fmt: str = "yaml") -> str:
    """Deterministic text: YAML with a comment header, or JSON."""
    doc = spec(plan)
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    import yaml

    body = yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=1000)
    return "\n".join(header(plan)) + "\n" + body
