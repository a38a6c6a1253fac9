"""Output helpers that need no click: JSON documents, tables, the stack report."""

from __future__ import annotations

import json
import sys

RESOLVE_SCHEMA = "provision.resolve/1"


def emit_json(obj) -> None:
    json.dump(obj, sys.stdout, indent=2, sort_keys=False, ensure_ascii=False)
    sys.stdout.write("\n")


def table(rows: list[list], headers: list[str]) -> str:
    """A plain aligned text table."""
    cells = [[("" if c is None else str(c)) for c in row] for row in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


_ORDER = ["host", "card", "task", "arch", "base_image", "cann", "driver", "os", "python", "torch", "torch_requirement",
          "torch_npu", "mindspore", "apex", "deepspeed", "mindspeed_llm", "dtype", "host_os"]


def format_stack(stack: dict) -> str:
    """The human report of `provision resolve`: every choice with its reason, the install lines, warnings."""
    head = f"stack {stack['id']}" + (f" (profile {stack['profile']})" if stack.get("profile") else "")
    lines = [head]
    explain = stack["explain"]
    for key in _ORDER + [k for k in explain if k not in _ORDER]:
        if key in explain:
            lines.append(f"  {key.replace('_', ' '):<18} {explain[key]}")
    installs = []
    if stack.get("torch"):
        t = stack["torch"]
        installs.append(f"pip install {t['requirement']}" + (f" --index-url {t['index_url']}" if t["index_url"] else ""))
        installs.append(f"pip install {stack['torch_npu']['requirement']}")
    if stack.get("mindspore"):
        installs.append(f"pip install {stack['mindspore']['requirement']}")
    if installs:
        lines.append("  install            " + "; ".join(installs))
    for warning in stack.get("warnings", []):
        lines.append(f"  ! {warning}")
    return "\n".join(lines)
