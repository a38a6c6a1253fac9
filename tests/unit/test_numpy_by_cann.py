"""The numpy of an image follows its CANN: CANN before 9.0 fails torch_npu's set_device (error 500001) under
numpy 2, so every stack with such a CANN locks numpy below 2, whatever its torch line."""

from __future__ import annotations

import subprocess
import sys

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from provisioner.image import packages
from provisioner.matrix import loader as matrix
from provisioner.versions import V, any_match


@pytest.fixture(scope="module")
def m():
    return matrix.load()


def numpy_versions(row: dict, python: str) -> set[Version]:
    stack = {"framework": "pytorch", "python": python, "arch": "x86_64"}
    return {Version(str(next(iter(req.specifier)).version)) for _, req in packages.active_lines(row["lock"], stack)
            if req.name == "numpy"}


def test_every_torch_npu_pairing_with_cann_8_gets_numpy_1(m):
    """Each torch_npu wheel row pairs a torch with a CANN; the set chosen for that pair must fit the CANN."""
    checked = 0
    for wheel in m.rows("torch_npu"):
        cann = wheel.get("cann")
        if not cann or V(cann) >= V("9.0.0"):
            continue
        for python in ("3.9", "3.10", "3.11", "3.12"):
            stack = {"framework": "pytorch", "torch": {"version": wheel["torch"]}, "cann": {"version": cann},
                     "python": python, "arch": "x86_64"}
            try:
                row = packages.select(m, stack)
            except Exception:  # noqa: BLE001 - no set for this Python: nothing is installed
                continue
            assert all(v < Version("2") for v in numpy_versions(row, python)), (wheel["wheel"], cann, row["id"])
            checked += 1
    assert checked > 20


@pytest.mark.parametrize("torch, cann, set_id", [
    ("2.8.0", "8.3.RC1", "torch2.8-cann8"), ("2.8.0", "8.5.0", "torch2.8-cann8"), ("2.8.0", "9.0.0", "torch2.8"),
    ("2.9.0", "8.5.0", "torch2.9-cann8"), ("2.9.0", "9.1.0", "torch2.9"), ("2.9.0", "9.0.0-beta.1", "torch2.9"),
])
def test_set_chosen_by_cann(m, torch, cann, set_id):
    stack = {"framework": "pytorch", "torch": {"version": torch}, "cann": {"version": cann}, "python": "3.11",
             "arch": "x86_64"}
    row = packages.select(m, stack)
    assert row["id"] == set_id
    twin = next(r for r in m.rows("packages") if r["id"] == set_id.split("-")[0])
    # The twin holds the same packages; its lines differ in numpy and in what numpy's line decides: pandas 3 and
    # contourpy 1.4 need numpy 2, so the numpy-1 twin takes pandas 2 (with its pytz) and contourpy 1.3.
    def names(lock):
        return {line.split("==")[0] for line in lock}

    assert names(row["lock"]) == names(twin["lock"])
    differ = names(set(row["lock"]) ^ set(twin["lock"]))
    assert differ <= {"numpy", "pandas", "contourpy", "pytz"}, sorted(differ)
    assert ("numpy" in differ) is (row is not twin)
    assert any_match(row["cann"], cann) if row.get("cann") else not any(
        r.get("cann") and any_match(r["cann"], cann) for r in m.rows("packages") if r["id"].startswith(set_id))


@pytest.mark.parametrize("cann, below_2", [("8.3.RC1", True), ("9.0.0", False)])
def test_rendered_torch_2_8_stack_locks_numpy_by_cann(tmp_path, cann, below_2):
    out = tmp_path / "ctx"
    proc = subprocess.run([sys.executable, "-m", "provisioner.cli", "render", "--card", "800T-A2", "--torch", "2.8.0",
                           "--cann", cann, "--python", "3.11", "-o", str(out)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    lock = (out / "requirements.lock").read_text().splitlines()
    numpy = [Requirement(line) for line in lock if line.startswith("numpy==")]
    assert len(numpy) == 1
    version = Version(str(next(iter(numpy[0].specifier)).version))
    assert (version < Version("2")) is below_2, version
    assert ("package set torch2.8-cann8" in "\n".join(lock)) is below_2
