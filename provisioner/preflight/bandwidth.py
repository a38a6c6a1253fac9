"""The HCCL bandwidth check of preflight: a measured collective sweep (the `provision.collective/1` document
provisioner.launch.collective prints: per message size algbw and busbw) judged against the busbw floors of
matrices/preflight.yaml (`preflight_bandwidth`) for the host's topology.

A floor exists only where a published figure backs it; with no row for the topology and operation the check
is n/a and prints what was measured. Below a floor fails and names the sizes, and the slow rank or link where
the document carries per-rank or per-link figures (`ranks`: [{rank, chip, busbw_gbps}], `links`: [{a, b,
busbw_gbps}]).
"""

from __future__ import annotations

import json
import math

from provisioner.preflight.checks import result

SCHEMA = "provision.collective/1"
TOPOLOGIES = {"910b": "hccs-8-a2", "a3": "a3-supernode"}


def topology(facts: dict, nodes: int) -> str | None:
    """hccs-8-a2 (one 8-chip A2 node), a3-supernode, roce (between nodes), or None."""
    if nodes > 1:
        return "roce"
    families = {c.get("family") for c in facts["chips"]}
    if len(families) == 1:
        top = TOPOLOGIES.get(next(iter(families)) or "")
        if top == "hccs-8-a2" and len(facts["chips"]) != 8:
            return None
        return top
    return None


def read(path: str) -> dict:
    """A collective document from a file: its last JSON line (the tool prints a table first)."""
    from provisioner import hostfile
    from provisioner.errors import ProvisionError

    text = hostfile.read_text(path, what="--bandwidth")
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                break
            if isinstance(doc, dict) and doc.get("schema") == SCHEMA and isinstance(doc.get("results"), list):
                return doc
            break
    raise ProvisionError(f"--bandwidth {path}: no {SCHEMA} JSON line (the last line `python -m"
                         " provisioner.launch.collective` prints)")


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        else None


def judge(doc: dict | None, rows: list[dict], top: str | None) -> dict:
    if doc is None:
        return result("hccl-bandwidth", "n/a", "no collective sweep measured",
                      "run one on the chips (`provision launch --check` prints a provision.collective/1 line) and"
                      " pass it with --bandwidth FILE")
    op = str(doc.get("op") or "all_reduce")
    sizes = [(int(r["bytes"]), _num(r.get("busbw_gbps")), _num(r.get("algbw_gbps"))) for r in doc["results"]
             if isinstance(r, dict) and isinstance(r.get("bytes"), int) and _num(r.get("busbw_gbps")) is not None]
    if not sizes:
        return result("hccl-bandwidth", "n/a", "the collective document holds no busbw figures", "")
    measured = ", ".join(f"{b >> 20 if b >= 1 << 20 else b} {'MB' if b >= 1 << 20 else 'B'}: busbw {bw:.2f} GB/s"
                         for b, bw, _ in sizes)
    floors = [r for r in rows if r["topology"] == top and r["op"] == op]
    if top is None or not floors:
        return result("hccl-bandwidth", "n/a", f"{op} {measured}; no sourced floor for "
                      f"{top or 'this topology'} in matrices/preflight.yaml, so it is not judged",
                      "add a floor from a published hccl_test figure to a matrix overlay (preflight_bandwidth, with"
                      " source:)")
    slow = []
    for nbytes, busbw, _ in sizes:
        applicable = [f for f in floors if nbytes >= f["min_bytes"]]
        if applicable:
            floor = max(applicable, key=lambda f: f["min_bytes"])
            if busbw is not None and busbw * 1000 < floor["busbw_min_mbps"]:
                slow.append((nbytes, busbw, floor))
    if not slow:
        return result("hccl-bandwidth", "pass", f"{op} on {top}: {measured}, at or above the floor")
    where = []
    for rank in doc.get("ranks") or []:
        if isinstance(rank, dict) and _num(rank.get("busbw_gbps")) is not None:
            if rank["busbw_gbps"] * 1000 < slow[0][2]["busbw_min_mbps"]:
                where.append(f"rank {rank.get('rank')}" + (f" (chip {rank['chip']})" if "chip" in rank else ""))
    for link in doc.get("links") or []:
        if isinstance(link, dict) and _num(link.get("busbw_gbps")) is not None:
            if link["busbw_gbps"] * 1000 < slow[0][2]["busbw_min_mbps"]:
                where.append(f"link {link.get('a')}-{link.get('b')} ({link['busbw_gbps']:.2f} GB/s)")
    detail = "; ".join(f"{b} B: {bw:.2f} GB/s < {f['busbw_min_mbps'] / 1000:g} GB/s ({f['id']})" for b, bw, f in slow)
    return result("hccl-bandwidth", "fail", f"{op} on {top} below the floor: {detail}"
                  + (f"; slow: {', '.join(where)}" if where else ""),
                  "find the slow chip or link (`hccn_tool -i N -link_stat -g`, `npu-smi info -t topo`), reseat or"
                  " replace it, or leave it out of the job", where)
