"""Version numbers live in matrices/, never in Python code.

Docstrings and help texts that say "e.g." may show example versions; any other
string constant that looks like a software version fails the test.
"""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "provisioner"
# Three-part versions (2.1.0, 8.3.RC1, 24.1.rc3) and bare Python versions ("3.11").
VERSION = re.compile(r"(?<![\w.])\d{1,2}\.\d{1,2}\.(?:\d{1,3}|rc\d+|RC\d+)(?![\w])|^3\.(?:[89]|1[0-4])$")


def _docstrings(tree) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def offending(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if "e.g." in node.value:
                continue
            for piece in re.split(r"[\s,;()\[\]{}=<>'\"`]+", node.value):
                if VERSION.search(piece):
                    hits.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {piece}")
    return hits


def test_detector_catches_a_planted_version(tmp_path):
    bad = ROOT / "_planted_for_test.py"
    try:
        bad.write_text('PIN = "torch==2.5.1"\n')
        assert offending(bad)
    finally:
        bad.unlink()


def test_no_version_numbers_in_python_code():
    hits = [h for path in sorted(ROOT.rglob("*.py")) for h in offending(path)]
    assert not hits, "version numbers belong in matrices/:\n" + "\n".join(hits)
