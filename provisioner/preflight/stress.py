"""The compute checks of preflight, read from what ran on the chips: a self-test document (`provision.selftest/1`,
the last line of `provision selftest` / `python -m provisioner.train.selftest`) gives `chip-matmul` (fp16 and
bf16 matmuls against an fp32 reference on every worker's chip) and `chip-stress` (its `hbm` check: a pattern
written over a large share of each chip's free HBM, read back and compared, every chip at once).

A host check never runs anything on the chips itself; without a document both checks are n/a. A word read back
wrong fails the stress and names the rank and chip; its GB/s are reported but not judged (no sourced floor).
"""

from __future__ import annotations

import json

from provisioner.preflight.checks import result

SCHEMA = "provision.selftest/1"
RUN_SELFTEST = ("run `provision selftest --image IMAGE --devices ...` and pass its last line with --selftest"
                " FILE")


def read(path: str) -> dict:
    """A self-test document from a file: its last JSON line."""
    from provisioner import hostfile
    from provisioner.errors import ProvisionError

    text = hostfile.read_text(path, what="--selftest")
    for line in reversed(text.splitlines()):
        line = line.strip().split(":", 1)[-1].strip() if line.startswith("[rank") else line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                break
            if isinstance(doc, dict) and doc.get("schema") == SCHEMA and isinstance(doc.get("checks"), list):
                return doc
            break
    raise ProvisionError(f"--selftest {path}: no {SCHEMA} JSON line (the last line `provision selftest` prints)")


def judge_matmul(doc: dict | None) -> dict:
    if doc is None:
        return result("chip-matmul", "n/a", "no matmul ran on the chips (a host check runs nothing on them)",
                      RUN_SELFTEST)
    check = next((c for c in doc["checks"] if isinstance(c, dict) and c.get("id") == "matmul"), None)
    workers = doc.get("world_size")
    if check is None or check.get("status") not in ("ok", "fail"):
        why = "the self-test has no matmul result" if check is None else f"matmul {check.get('status')}"
        return result("chip-matmul", "n/a", f"{why} ({check.get('detail') if check else 'n/a'})", "")
    if check["status"] == "fail":
        ranks = [str(r) for r in check.get("ranks_failed") or []]
        return result("chip-matmul", "fail", f"matmul wrong or failed on rank(s) {', '.join(ranks) or '?'}:"
                      f" {check.get('error') or check.get('detail') or ''}",
                      check.get("fix") or "take the chip out of jobs and send the self-test output to the vendor",
                      [f"rank {r}" for r in ranks])
    return result("chip-matmul", "pass", f"matmul against an fp32 reference ok on {workers} worker(s):"
                  f" {check.get('detail') or ''}")


def _gib(nbytes) -> str:
    return f"{nbytes / (1 << 30):.2f} GiB" if isinstance(nbytes, (int, float)) else "?"


def judge_stress(doc: dict | None) -> dict:
    """chip-stress from the self-test's `hbm` check: fail naming the rank and chip of every mismatch, pass when
    every chip read its pattern back intact (the GB/s stated, not judged)."""
    if doc is None:
        return result("chip-stress", "n/a", "no HBM stress ran on the chips (a host check runs nothing on them)",
                      RUN_SELFTEST)
    check = next((c for c in doc["checks"] if isinstance(c, dict) and c.get("id") == "hbm"), None)
    if check is None or check.get("status") not in ("ok", "fail"):
        why = "the self-test has no hbm result (one from before the HBM stress)" if check is None \
            else f"hbm {check.get('status')} ({check.get('detail') or 'n/a'})"
        return result("chip-stress", "n/a", why, RUN_SELFTEST if check is None else "")
    got = check.get("figures")
    figures: dict = got if isinstance(got, dict) else {}
    chips = [c for c in figures.get("chips") or [] if isinstance(c, dict)]
    if check["status"] == "fail":
        bad = [c for c in chips if c.get("mismatches")]
        ranks = sorted({int(r) for r in check.get("ranks_failed") or [] if isinstance(r, int)}
                       | {c["rank"] for c in bad if isinstance(c.get("rank"), int)})
        where = "; ".join(f"rank {c.get('rank')} ({c.get('device')}): {c.get('mismatches')} word(s) wrong of"
                          f" {_gib(c.get('bytes'))}" for c in bad) or (check.get("error") or "")
        return result("chip-stress", "fail", f"HBM read back wrong: {where}",
                      check.get("fix") or "take the chip out of jobs and send `npu-smi info -t ecc -i N` and the"
                      " device log to the hardware vendor", [f"rank {r}" for r in ranks])
    speeds = [c["read_gbps"] for c in chips if isinstance(c.get("read_gbps"), (int, float))]
    span = f"; read {min(speeds):.1f}-{max(speeds):.1f} GB/s (not judged: no sourced HBM bandwidth floor)" \
        if speeds else ""
    size = f" ({_gib(chips[0].get('bytes'))} each)" if chips else ""
    return result("chip-stress", "pass", f"HBM pattern read back intact on {len(chips) or doc.get('world_size')}"
                  f" chip(s){size}{span}")
