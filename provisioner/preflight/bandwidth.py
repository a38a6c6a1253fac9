"""The HCCL bandwidth check of preflight: a measured collective sweep (the `provision.collective/1` document
provisioner.launch.collective prints: per message size algbw and busbw of all_reduce, with `--all-gather` of
all_gather, with `--links` each ring link alone) judged against the busbw floors of matrices/preflight.yaml
(`preflight_bandwidth`) for the host's topology.

A floor exists only where a published figure backs it; with no row for the topology and operation the check
is n/a and prints what was measured. Below a floor fails and names the sizes, the ring links below it and the
rank every slow link shares (the slow chip).
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


def _sweeps(doc: dict) -> dict[str, list[tuple[int, float]]]:
    """op -> [(bytes, busbw GB/s)] of the document's all_reduce (`results`) and all_gather sweeps."""
    out: dict[str, list[tuple[int, float]]] = {}
    for op, rows in (("all_reduce", doc.get("results")), ("all_gather", doc.get("all_gather"))):
        got = [(r["bytes"], bw) for r in rows or [] if isinstance(r, dict) and isinstance(r.get("bytes"), int)
               and not isinstance(r.get("bytes"), bool) and (bw := _num(r.get("busbw_gbps"))) is not None]
        if got:
            out[op] = got
    return out


def _size(nbytes: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift and nbytes % (1 << shift) == 0:
            return f"{nbytes >> shift} {unit}"
    return f"{nbytes} B"


def _slow_links(doc: dict, floor_mbps: int) -> tuple[list[str], list[str]]:
    """The links below the floor, and the ranks every slow link shares (the slow chip, when there is one)."""
    slow = [link for link in doc.get("links") or [] if isinstance(link, dict)
            and (bw := _num(link.get("busbw_gbps"))) is not None and bw * 1000 < floor_mbps]
    names = [f"link {link.get('a')}-{link.get('b')} ({link['busbw_gbps']:.2f} GB/s)" for link in slow]
    common = set.intersection(*({link.get("a"), link.get("b")} for link in slow)) if len(slow) > 1 else set()
    return names, [f"rank {r}" for r in sorted(common, key=str)]


def judge(doc: dict | None, rows: list[dict], top: str | None) -> dict:
    if doc is None:
        return result("hccl-bandwidth", "n/a", "no collective sweep measured",
                      "run one on the chips (`python -m provisioner.launch.collective --all-gather --links 64M` under"
                      " torchrun, as `provision launch --check` does) and pass its JSON line with --bandwidth FILE")
    sweeps = _sweeps(doc)
    if not sweeps:
        return result("hccl-bandwidth", "n/a", "the collective document holds no busbw figures", "")
    measured = "; ".join(f"{op} " + ", ".join(f"{_size(b)}: busbw {bw:.2f} GB/s" for b, bw in got)
                         for op, got in sweeps.items())
    floors = [r for r in rows if r["topology"] == top and r["op"] in sweeps]
    if top is None or not floors:
        return result("hccl-bandwidth", "n/a", f"{measured}; no sourced floor for {top or 'this topology'} in"
                      " matrices/preflight.yaml, so it is not judged",
                      "add a floor from a published hccl_test figure to a matrix overlay (preflight_bandwidth, with"
                      " source:)")
    slow = []
    for op, got in sweeps.items():
        for nbytes, busbw in got:
            applicable = [f for f in floors if f["op"] == op and nbytes >= f["min_bytes"]]
            if applicable:
                floor = max(applicable, key=lambda f: f["min_bytes"])
                if busbw * 1000 < floor["busbw_min_mbps"]:
                    slow.append((op, nbytes, busbw, floor))
    if not slow:
        return result("hccl-bandwidth", "pass", f"{top}: {measured}, at or above the floor")
    links, ranks = _slow_links(doc, min(f["busbw_min_mbps"] for *_, f in slow))
    detail = "; ".join(f"{op} {_size(b)}: {bw:.2f} GB/s < {f['busbw_min_mbps'] / 1000:g} GB/s ({f['id']})"
                       for op, b, bw, f in slow)
    where = (f"; slow: {', '.join(links)}" if links else "") + (f"; in every slow link: {', '.join(ranks)}"
                                                               if ranks else "")
    return result("hccl-bandwidth", "fail", f"{top} below the floor: {detail}{where}",
                  "find the slow chip or link (`hccn_tool -i N -link_stat -g`, `npu-smi info -t topo`), reseat or"
                  " replace it, or leave it out of the job", ranks or links)
