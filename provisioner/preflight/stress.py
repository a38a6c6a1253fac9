"""The compute checks of preflight, read from what ran on the chips: `chip-matmul` from a self-test document
(`provision.selftest/1`, the last line of `provision selftest` / `python -m provisioner.train.selftest`: fp16
and bf16 matmuls against an fp32 reference on every worker's chip) and `chip-stress`, the HBM stress, which
nothing here runs yet (always n/a).

A host check never runs anything on the chips itself; without a document the matmul check is n/a.
"""

from __future__ import annotations

import json

from provisioner.preflight.checks import result

SCHEMA = "provision.selftest/1"
STRESS = result("chip-stress", "n/a", "no HBM stress has run (neither preflight nor the self-test runs one)",
                "long jobs that fail with HBM errors: send `npu-smi info -t ecc -i N` and the device log")


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
                      "run `provision selftest --image IMAGE --devices ...` and pass its last line with --selftest"
                      " FILE")
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
