"""templates/files/lock-check.py in a real virtual environment: drift fails, accepted upstream conflicts pass."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real venv per module: ~30 s on a loaded machine

LOCK_CHECK = Path(__file__).resolve().parents[2] / "templates" / "files" / "lock-check.py"


def wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    """A minimal pure-Python wheel (one module, METADATA with Requires-Dist)."""
    dist = f"{name.replace('-', '_')}-{version}"
    path = folder / f"{dist}-py3-none-any.whl"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{name.replace('-', '_')}_mod.py", "")
        zf.writestr(f"{dist}.dist-info/METADATA", "\n".join(meta) + "\n")
        zf.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}.dist-info/RECORD", "")
    return path


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv holding hydra-like `needs-old` (wants runtime==4.9.*) beside runtime 4.7.2, as MindSpeed-RL ends."""
    root = tmp_path_factory.mktemp("lockcheck")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    wheels = root / "wheels"
    wheels.mkdir()
    files = [wheel(wheels, "needs-old", "1.3.2", ["antlr-runtime==4.9.*"]),
             wheel(wheels, "antlr-runtime", "4.7.2", []),
             wheel(wheels, "fine", "1.0", ["antlr-runtime>=4"])]
    py = root / "venv" / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", *map(str, files)],
                   check=True)
    lock = root / "requirements.lock"
    lock.write_text("# test lock\nneeds-old==1.3.2\nantlr-runtime==4.7.2\nfine==1.0\n")
    return py, lock


def check(venv, *args):
    py, lock = venv
    return subprocess.run([str(py), str(LOCK_CHECK), str(lock), "--allow", "pip", "--allow", "setuptools", "--strict", *args],
                          capture_output=True, text=True)


def test_an_unmet_requirement_fails_the_build(venv):
    proc = check(venv)
    assert proc.returncode == 1
    assert "needs-old 1.3.2 requires antlr-runtime==4.9.*, but 4.7.2 is installed" in proc.stderr


def test_the_accepted_upstream_conflict_passes_and_is_listed(venv):
    proc = check(venv, "--accept", "needs-old:antlr-runtime==4.9.*")
    assert proc.returncode == 0, proc.stderr
    assert "accepted upstream conflict: needs-old 1.3.2 requires antlr-runtime==4.9.*" in proc.stdout


def test_accepting_another_conflict_does_not_hide_this_one(venv):
    proc = check(venv, "--accept", "fine:antlr-runtime<4")
    assert proc.returncode == 1 and "needs-old 1.3.2 requires" in proc.stderr
    assert "the accepted conflict fine: antlr-runtime<4 did not occur" in proc.stdout


def test_drift_from_the_lock_fails(venv, tmp_path):
    py, _ = venv
    lock = tmp_path / "requirements.lock"
    lock.write_text("needs-old==1.3.2\nantlr-runtime==4.9.3\nfine==1.0\n")
    proc = subprocess.run([str(py), str(LOCK_CHECK), str(lock), "--allow", "pip",
                           "--accept", "needs-old:antlr-runtime==4.9.*"], capture_output=True, text=True)
    assert proc.returncode == 1 and "antlr-runtime is 4.7.2, the lock says 4.9.3" in proc.stderr
