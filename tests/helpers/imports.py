"""The package's import graph, read with ast as ../shared/tools/house.py reads it: every import counts, at the
top of a module, inside a function (a lazy import) or under TYPE_CHECKING, and a name lands in the longest
module path that exists. Used by tests/unit/test_architecture.py."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "provisioner"


def modules(root: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Dotted module name -> file, for every .py of the package (a package is its __init__)."""
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = list(f.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = f
    return out


def _owner(name: str, mods: dict[str, Path]) -> str | None:
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def imported_names(module: str, path: Path) -> list[str]:
    """Every dotted name `module` imports (relative imports made absolute)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    is_pkg = path.name == "__init__.py"
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_pkg else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names += [mod] + [f"{mod}.{a.name}" for a in node.names]
    return names


def graph(root: Path = PACKAGE_DIR) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a module's own package and submodules left out)."""
    mods = modules(root)
    pkg = root.name
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        for n in imported_names(m, f):
            if n == pkg or n.startswith(pkg + "."):
                o = _owner(n, mods)
                if o and o != m and not m.startswith(o + ".") and not o.startswith(m + "."):
                    edges[m].add(o)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def closure(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module `start` reaches through imports, itself included."""
    seen, todo = {start}, [start]
    while todo:
        for w in edges[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen
