"""matrices/packages.yaml: complete locks that cover this project's requirements, chosen per stack."""

from __future__ import annotations

import pytest
from packaging.requirements import Requirement

from provisioner.errors import ProvisionError
from provisioner.image import packages, project
from provisioner.matrix import loader
from provisioner.versions import PyRange


@pytest.fixture(scope="module")
def m():
    return loader.load()


def _pythons(row) -> list[str]:
    low, high = row["python"].split("-")
    major = low.split(".")[0]
    return [f"{major}.{n}" for n in range(int(low.split(".")[1]), int(high.split(".")[1]) + 1)]


def _stack(row, python: str, arch: str = "x86_64") -> dict:
    if row.get("mindspore"):
        return {"framework": "mindspore", "mindspore": {"version": row["mindspore"][0]}, "python": python,
                "arch": arch, "torch": None}
    return {"framework": "pytorch", "torch": {"version": row["torch"][0].replace("*", "0")}, "python": python,
            "arch": arch}


def test_every_set_is_exactly_pinned_and_consistent(m):
    rows = m.rows("packages")
    assert len(rows) >= 15
    for row in rows:
        packages._check_row(row)  # pins appear in the lock, every line is name==version
        assert row.get("source") and row.get("notes"), row["id"]


def _project_pythons(row) -> list[str]:
    """The set's Pythons this project installs on (pyproject.toml requires-python)."""
    import tomllib
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(tomllib.loads((project.source_root() / "pyproject.toml").read_text())["project"]
                        ["requires-python"])
    return [p for p in _pythons(row) if spec.contains(f"{p}.0")]


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_every_set_covers_this_projects_requirements_on_every_python(m, arch):
    """Each recipe's project extras (the pytorch recipe's train, grpo and plot: the trainer's own libraries) are
    met by every set of its framework, on every Python of the set the project installs on."""
    from provisioner.image import recipes

    proj = project.describe(project.source_root())
    for row in m.rows("packages"):
        extras = recipes.load("mindspore" if row.get("mindspore") else "pytorch").project_extras
        for python in _project_pythons(row):
            stack = _stack(row, python, arch)
            packages.check_project(row, stack, list(proj.requirements), extras)
            names = [Requirement(line).name.lower() for line, _ in packages.active_lines(row["lock"], stack)]
            assert len(names) == len(set(names)), f"{row['id']} py{python}: a package is locked twice"


def test_check_project_names_what_is_missing(m):
    row = dict(next(r for r in m.rows("packages") if r["id"] == "torch2.13"))
    row["lock"] = [line for line in row["lock"] if not line.startswith("peft==")]
    row["pins"] = {k: v for k, v in row["pins"].items() if k != "peft"}
    stack = _stack(row, "3.11")
    with pytest.raises(ProvisionError, match=r"does not satisfy this project's requirement 'peft>=0.12'"):
        packages.check_project(row, stack, ['peft>=0.12 ; extra == "train"'], ("train",))
    # Without the train extra (the MindSpore recipe) peft is not needed.
    packages.check_project(row, stack, ['peft>=0.12 ; extra == "train"'], ())


def test_markers_follow_the_stacks_python(m):
    row = next(r for r in m.rows("packages") if r["id"] == "torch2.13")
    numpy = {py: [line for line, _ in packages.active_lines(row["lock"], _stack(row, py)) if line.startswith("numpy==")]
             for py in ("3.10", "3.11", "3.12")}
    assert all(len(v) == 1 for v in numpy.values())
    assert len({v[0] for v in numpy.values()}) == 3  # numpy drops old Pythons: one pin per Python here


def test_select_by_torch_line_and_python(m):
    def select(torch, python):
        return packages.select(m, {"framework": "pytorch", "torch": {"version": torch}, "python": python})["id"]

    assert select("2.13.0", "3.11") == "torch2.13"
    assert select("2.1.0", "3.10") == "torch2.1"
    assert select("2.5.1", "3.10") == "torch2.5"
    with pytest.raises(ProvisionError, match=r"no package set for torch 2\.1\.0 on Python 3\.12 .*torch2\.1 \(Python 3\.9-3\.11\)"):
        select("2.1.0", "3.12")
    with pytest.raises(ProvisionError, match=r"no package set for torch 1\.11\.0 in matrices/packages\.yaml"):
        select("1.11.0", "3.9")
    ms = packages.select(m, {"framework": "mindspore", "mindspore": {"version": "2.7.1"}, "python": "3.11"})
    assert ms["id"] == "mindspore2.7.1"


def test_an_overlay_set_wins(tmp_path):
    overlay = tmp_path / "mine.yaml"
    base = loader.load()
    row = next(r for r in base.rows("packages") if r["id"] == "torch2.13")
    lines = "\n".join(f'      - "{line}"' for line in row["lock"])
    overlay.write_text(
        "packages:\n  - id: my-torch2.13\n    torch: [\"2.13.*\"]\n    python: \"3.11-3.11\"\n"
        "    resolved_with: [torch==2.13.0]\n    pins: {}\n    lock:\n" + lines + "\n    source: our own tests\n")
    m2 = loader.load([str(overlay)])
    got = packages.select(m2, {"framework": "pytorch", "torch": {"version": "2.13.0"}, "python": "3.11"})
    assert got["id"] == "my-torch2.13"


def test_deepspeed_lock_exists_wherever_deepspeed_resolves(m):
    for row in m.rows("packages"):
        if row.get("torch"):
            extra = row["extras"]["deepspeed"]
            assert any(line.startswith("deepspeed==") for line in extra["lock"]), row["id"]
            assert Requirement(next(line for line in extra["lock"] if line.startswith("deepspeed=="))).specifier


def test_pinned_versions_are_inside_the_resolver_extra_range(m):
    """The deepspeed pins respect matrices/extras.yaml (what `--with deepspeed` promises)."""
    from packaging.specifiers import SpecifierSet

    spec = SpecifierSet(next(r for r in m.rows("extras") if r["name"] == "deepspeed")["requirement"].split("deepspeed", 1)[1])
    for row in m.rows("packages"):
        if row.get("torch"):
            assert row["extras"]["deepspeed"]["pins"]["deepspeed"] in spec, row["id"]


def test_python_ranges_parse(m):
    for row in m.rows("packages"):
        assert _pythons(row)[0] in PyRange(row["python"])
