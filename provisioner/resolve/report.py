"""The human report of a Stack (what `provision resolve` prints): every choice with its reason, the install
lines, the warnings. Plain text, no imports but shlex: the fast path of `provision resolve` prints it."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

_ORDER = ["host", "card", "task", "arch", "base_image", "cann", "driver", "os", "python", "torch", "torch_requirement",
          "torch_npu", "mindspore", "apex", "deepspeed", "mindspeed_llm", "dtype", "host_os"]


def _pip(*words: str) -> str:
    """A `pip install` line a user may paste into a shell: every word quoted where it needs it."""
    import shlex

    return " ".join(("pip", "install", *(shlex.quote(str(w)) for w in words)))


def format_stack(stack: Mapping[str, Any]) -> str:
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
        installs.append(_pip(t["requirement"], *(("--index-url", t["index_url"]) if t["index_url"] else ())))
        installs.append(_pip(stack["torch_npu"]["requirement"]))
    if stack.get("mindspore"):
        installs.append(_pip(stack["mindspore"]["requirement"]))
    if installs:
        lines.append("  install            " + "; ".join(installs))
    for warning in stack.get("warnings", []):
        lines.append(f"  ! {warning}")
    return "\n".join(lines)
