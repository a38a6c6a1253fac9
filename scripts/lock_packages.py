#!/usr/bin/env python3
"""Maintainer tool: resolve the `lock:` lists of matrices/packages.yaml.

    python scripts/lock_packages.py SET_ID [SET_ID ...]    (needs `uv` on PATH)

For each set it resolves, with `uv pip compile --universal`, the set's framework
(`resolved_with`), its top-level `pins` and this project's own requirements
(pyproject.toml: dependencies + the extras the framework's recipe installs,
images/*.yaml `project_extras`: train, grpo and plot for PyTorch sets) for
every Python from the set's lower bound (or the project's requires-python, if
higher) up, and prints the YAML to paste into the row. Each extra (`extras: NAME: {pins, requires}`) is resolved on top of the
base lock (constrained to it), so it only adds lines.

Why these exclusions: x86_64 takes torch's `+cpu` build from PyTorch's CPU
index, which has none of the CUDA packages that PyPI's torch metadata lists, so
nvidia-*, cuda-* and triton never enter a lock; torch and torch-npu themselves
come from the stack, not from the set. Windows- and browser-only lines are
dropped. The build checks the result (`pip check` semantics) and fails on
anything missing.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import tomllib
import yaml

ROOT = Path(__file__).resolve().parents[1]
DROP = re.compile(r"^(nvidia-|cuda-|triton\b|torch\b|torch-npu\b|mindspore\b)", re.I)
FOREIGN = re.compile(r"sys_platform == '(win32|emscripten|darwin)'(?! and| or)|platform_system == 'Windows'")


def recipe_extras(framework: str) -> list[str]:
    """The project extras the framework's default recipe installs (images/*.yaml `project_extras`)."""
    for path in sorted((ROOT / "images").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if doc.get("framework") == framework and doc.get("default", framework != "pytorch"):
            return list(doc.get("project_extras") or [])
    return []


def project_python() -> str:
    """The lowest Python this project installs on (pyproject.toml requires-python, `>=3.X`): a lock starts there,
    since the image installs the project on top of it (math-verify, for one, has no release for older ones)."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    found = re.fullmatch(r"\s*>=\s*(\d+\.\d+)\s*", spec)
    if not found:
        raise SystemExit(f"pyproject.toml: requires-python {spec!r} is not of the form >=X.Y")
    return found.group(1)


def project_requirements(framework: str) -> list[str]:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(meta["dependencies"])
    for extra in recipe_extras(framework):
        reqs += [r for r in meta["optional-dependencies"][extra] if not re.match(r"torch\b", r)]
    return reqs


def compile_lock(inputs: list[str], python: str, constraints: list[str] | None = None,
                 overrides: list[str] | None = None) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "in.txt")
        src.write_text("\n".join(inputs) + "\n")
        cmd = ["uv", "pip", "compile", str(src), "--universal", "--python-version", python, "--no-header",
               "--no-annotate", "--index-url", "https://pypi.org/simple", "--system-certs",
               "--python-preference", "only-system", "--quiet"]
        if constraints:
            con = Path(tmp, "constraints.txt")
            con.write_text("\n".join(constraints) + "\n")
            cmd += ["--constraints", str(con)]
        if overrides:
            # x86_64 torch-npu wheels pin torch==X+cpu, which PyPI does not serve;
            # the plain release has the same non-CUDA requirements.
            ovr = Path(tmp, "overrides.txt")
            ovr.write_text("\n".join(overrides) + "\n")
            cmd += ["--overrides", str(ovr)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"uv pip compile failed:\n{proc.stderr}")
        out = proc.stdout
    lines = []
    for line in out.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or DROP.match(line) or FOREIGN.search(line):
            continue
        lines.append(_simplify(line))
    return sorted(lines, key=lambda s: s.lower())


# Clauses that are always true in a Linux image.
_TRUE_ON_LINUX = ("sys_platform != 'emscripten'", "sys_platform == 'linux'", "sys_platform != 'win32'")


def _simplify(line: str) -> str:
    req, _, marker = (part.strip() for part in line.partition(";"))
    if marker and " or " not in marker:
        clauses = [c.strip() for c in marker.split(" and ") if c.strip() not in _TRUE_ON_LINUX]
        marker = " and ".join(clauses)
    elif marker in _TRUE_ON_LINUX:
        marker = ""
    return f"{req} ; {marker}" if marker else req


def resolve_set(row: dict) -> dict:
    framework = "mindspore" if row.get("mindspore") else "pytorch"
    python = max(row["python"].split("-")[0], project_python(), key=lambda v: tuple(int(x) for x in v.split(".")))
    pins = [f"{k}=={v}" for k, v in sorted(row["pins"].items())]
    base_inputs = list(row["resolved_with"]) + pins + project_requirements(framework)
    overrides = [r for r in row["resolved_with"] if re.match(r"torch\s*==", r)]
    base = compile_lock(base_inputs, python, overrides=overrides)
    out = {"lock": base, "extras": {}}
    for name, extra in sorted((row.get("extras") or {}).items()):
        inputs = base_inputs + list(extra.get("requires", []))
        # The extra's own package is installed without dependency resolution
        # (deepspeed is an sdist whose setup.py imports torch), so only its
        # declared requirements are resolved here.
        full = compile_lock(inputs, python, constraints=base, overrides=overrides)
        added = [line for line in full if line not in base]
        added += [f"{k}=={v}" for k, v in sorted(extra["pins"].items())]
        out["extras"][name] = sorted(added, key=str.lower)
    return out


def _block(indent: int, lines: list[str]) -> list[str]:
    pad = " " * indent
    return [f"{pad}lock:"] + [f"{pad}  - {json.dumps(line)}" for line in lines] if lines else [f"{pad}lock: []"]


def write_back(text: str, set_id: str, result: dict) -> str:
    """Replace the `lock:` lists of one row in the YAML text, keeping everything else."""
    lines = text.split("\n")
    start = lines.index(f"  - id: {set_id}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("  - id: ")), len(lines))
    row = lines[start:end]
    out: list[str] = []
    extra = None
    i = 0
    while i < len(row):
        line = row[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if indent == 6 and stripped.endswith(":") and not stripped.startswith("-"):
            extra = stripped[:-1]
        if stripped.startswith("lock:"):
            i += 1
            while i < len(row) and row[i].startswith(" " * (indent + 2) + "- "):
                i += 1
            new = result["lock"] if indent == 4 else result["extras"][extra]
            out += _block(indent, new)
            continue
        out.append(line)
        i += 1
    return "\n".join(lines[:start] + out + lines[end:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+")
    parser.add_argument("--write", action="store_true", help="write the locks into matrices/packages.yaml")
    args = parser.parse_args()
    path = ROOT / "matrices" / "packages.yaml"
    text = path.read_text()
    rows = {r["id"]: r for r in yaml.safe_load(text)["packages"]}
    for set_id in args.sets:
        if set_id not in rows:
            print(f"unknown set {set_id!r} (known: {', '.join(rows)})", file=sys.stderr)
            return 2
        result = resolve_set(rows[set_id])
        if args.write:
            text = write_back(text, set_id, result)
            print(f"{set_id}: {len(result['lock'])} lines" + "".join(
                f", {name}: {len(lines)}" for name, lines in result["extras"].items()))
            continue
        print(f"# --- {set_id}")
        print("\n".join(_block(4, result["lock"])))
        for name, lines in result["extras"].items():
            print(f"# extras.{name}:")
            print("\n".join(_block(8, lines)))
    if args.write:
        path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
