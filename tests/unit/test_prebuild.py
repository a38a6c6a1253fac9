"""tests/helpers/prebuild.py: engine modules run last, whole, and a module's background(items) starts at
collection with only its selected tests (a pytest run of a small tree in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ENGINE = """
import pytest
pytestmark = pytest.mark.docker
def test_e1(): pass
def test_e2(): pass
"""
MIXED = """
import pytest
@pytest.mark.docker
def test_m1(): pass
def test_m2(): pass
"""
PLAIN = """
import pytest
STARTED = []
def background(items):
    STARTED.extend(item.name for item in items)
def test_p1(): assert STARTED == ["test_p1"]
@pytest.mark.full
def test_p2(): pass
"""


def test_engine_modules_run_last_and_background_gets_the_selected_tests(tmp_path):
    for name, text in {"test_a_engine.py": ENGINE, "test_b_mixed.py": MIXED, "test_c_plain.py": PLAIN}.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["tests.helpers.prebuild"]\n')
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    docker: d\n    full: f\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PROVISION_SKIP_DOCKER": "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-m", "not full",
                           str(tmp_path)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    ran = [line.split("::")[1].split()[0] for line in proc.stdout.splitlines() if " PASSED" in line]
    assert ran == ["test_p1", "test_e1", "test_e2", "test_m1", "test_m2"]
