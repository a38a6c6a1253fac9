"""provision's own Python floor (pyproject.toml's requires-python) as a constraint of every image it builds.

Every image installs provision itself (the trainer, doctor), so an official base image whose Python is below
provision's Requires-Python is no candidate (provisioner/resolve/candidates.py); a refusal names the floor and
the way forward (explain.py, hostfit.py); render holds a stack made elsewhere to it (image/render.py). The floor
is read from the checkout's pyproject.toml, else from the installed metadata (provisioner/version.py).

The expected words take the floor from the same reader, never a number written here: the tests hold when
pyproject.toml's floor moves.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from provisioner import version
from provisioner.errors import ProvisionError, ResolveError
from provisioner.matrix import loader
from provisioner.resolve import candidates, request, solve
from provisioner.resolve.cached import cached_resolve
from tests.unit.test_hostfit import root, run, run_json

ROOT = Path(__file__).resolve().parents[2]
KYLIN = "seed-300ta2-kylin"  # Atlas 300T A2 on Kylin V10, driver 23.0.7: it runs CANN 7.0.0, whose images are 3.8/3.9


@pytest.fixture(scope="module")
def m():
    return loader.load()


@pytest.fixture
def floor() -> str:
    got = version.requires_python()
    assert got, "pyproject.toml names a requires-python"
    return got


@pytest.fixture
def no_floor(monkeypatch):
    """A provision that would install on any Python: what the resolver did before it held images to the floor."""
    monkeypatch.setattr(version, "_cached_python", "")


def meets(floor: str, python: str) -> bool:
    from packaging.specifiers import SpecifierSet

    return python in SpecifierSet(floor)


def stack(m, **kw):
    kw.setdefault("arch", "aarch64")
    return solve.resolve(m, request.build(m, **kw))


def refused(m, **kw) -> ResolveError:
    with pytest.raises(ResolveError) as err:
        stack(m, **kw)
    return err.value


# ------------------------------------------------------------------ reading the floor


def test_the_floor_is_the_checkouts_and_the_installed_metadatas(floor):
    import tomllib

    written = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["requires-python"]
    assert floor == written == version.requires_python_at(str(ROOT))
    assert metadata.metadata("provisioner")["Requires-Python"] == written  # the editable install says the same


def _tree(tmp_path: Path, text: str, package: bool = True) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "pyproject.toml").write_text(text, encoding="utf-8")
    if package:
        (tmp_path / "provisioner").mkdir(exist_ok=True)
    return str(tmp_path)


def test_a_source_tree_is_read_from_its_project_table(tmp_path):
    at = version.requires_python_at
    assert at(_tree(tmp_path / "a", '[project]\nname = "provisioner"\nrequires-python = ">=3.42"  # note\n')) == ">=3.42"
    # another table's key, another project, no package beside it, no file: not this checkout's floor
    assert at(_tree(tmp_path / "b", '[project]\nname = "provisioner"\n[tool.x]\nrequires-python = ">=9"\n')) == ""
    assert at(_tree(tmp_path / "c", '[project]\nname = "other"\nrequires-python = ">=3.42"\n')) is None
    assert at(_tree(tmp_path / "d", '[project]\nname = "provisioner"\n', package=False)) is None
    assert at(str(tmp_path / "nowhere")) is None


def test_an_installed_wheel_reads_its_metadata(tmp_path, monkeypatch):
    """No checkout around the package (a wheel in site-packages): the dist-info's Requires-Python."""
    info = tmp_path / "site" / "provisioner-9.9.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: provisioner\nVersion: 9.9.9\n"
                                   "Requires-Python: >=3.42\n\nRequires-Python: no\n")
    monkeypatch.setattr(version, "requires_python_at", lambda root=None: None)
    monkeypatch.setattr(version, "_cached_python", None)
    monkeypatch.setattr(sys, "path", [str(tmp_path / "site")])
    assert version.requires_python() == ">=3.42"


def test_a_floor_that_is_no_specifier_is_one_clear_error(monkeypatch):
    with pytest.raises(ProvisionError, match="Requires-Python 'three' .* is not a version specifier"):
        candidates.floor_ok("three", "3.11")


# ------------------------------------------------------------------ the resolver


def test_no_candidate_is_below_the_floor(m, floor):
    for card in ("800T-A2", "300T-A2", "800-9000", "800T-A3"):
        card_row, family, _ = m.lookup_card(card)
        ctx = candidates.Context(m, request.build(m, card=card, arch="aarch64"), card_row, family)
        pythons = {c["python"] for c in ctx.base()}
        assert pythons and all(meets(floor, p) for p in pythons), (card, pythons)


def test_cann_7_gets_no_image_below_the_floor_and_says_the_way_forward(m, floor):
    err = refused(m, card="300T-A2", cann="7.0.0")
    reason = err.reasons[0]
    assert reason.startswith("--cann 7.0.0: the listed CANN 7.0.0 images for chip 910b offer Python 3.8, 3.9 only")
    assert f"needs Python {floor} (its Requires-Python)" in reason
    assert "pass --base-image with a CANN 7.0.0 image that has such a Python, or use a newer CANN" in reason
    # the way forward works: the user's own CANN 7.0.0 image gets a Python at the floor
    s = stack(m, card="300T-A2", cann="7.0.0", base_image="my/cann:7.0.0-py3")
    assert s["cann"]["version"] == "7.0.0" and meets(floor, s["python"])


def test_cann_7_image_below_the_floor_was_picked_before(m, no_floor):
    """Without the floor the resolver picks the 7.0.0 image with an older Python (what `provision build` then
    failed on in its project stage)."""
    s = stack(m, card="300T-A2", cann="7.0.0")
    assert s["cann"]["version"] == "7.0.0" and s["python"] in ("3.8", "3.9")


def test_a_python_below_the_floor_is_refused_as_such(m, floor):
    err = refused(m, card="300T-A2", python="3.9")
    assert err.reasons[0].startswith(f"--python 3.9 is below the Python provision runs on: provision itself, which"
                                     f" every image it builds installs, needs Python {floor}")


def test_a_driver_that_runs_only_images_below_the_floor_names_the_upgrade(m, floor):
    err = refused(m, card="300T-A2", driver="23.0.7")
    reason = err.reasons[0]
    assert reason.startswith("driver 23.0.7 runs CANN 7.0.0 (of those with an official image), and the listed CANN"
                             " 7.0.0 images for chip 910b offer Python 3.8, 3.9 only")
    assert f"needs Python {floor}" in reason and reason.endswith("which needs an Ascend HDK upgrade")
    assert err.alternatives and all(meets(floor, a["python"]) for a in err.alternatives)


def test_the_resolve_cache_is_keyed_by_the_floor(m, monkeypatch, tmp_path):
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path))
    req = request.build(m, card="300T-A2", cann="7.0.0", arch="aarch64")
    monkeypatch.setattr(version, "_cached_python", "")
    assert cached_resolve(m, req)["python"] in ("3.8", "3.9")  # cached under the empty floor
    monkeypatch.setattr(version, "_cached_python", None)  # provision's real floor again
    with pytest.raises(ResolveError, match="Requires-Python"):
        cached_resolve(m, req)


def test_the_fast_path_holds_the_floor_cold_and_warm(tmp_path, floor):
    """`provision resolve` (the click-free fast path, then the cache) refuses the same way twice."""
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-m", "provisioner.cli", "resolve", "--card", "300T-A2", "--cann",
                               "7.0.0", "--for-host", "none", "--json"], capture_output=True, text=True,
                              env={"PROVISION_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"}, cwd=ROOT)
        doc = json.loads(proc.stdout)
        assert proc.returncode == 2 and doc["status"] == "refused", proc.stderr
        assert f"needs Python {floor} (its Requires-Python)" in doc["reasons"][0]


# ------------------------------------------------------------------ the 300T-A2 / 23.0.7 / Kylin host


@pytest.mark.parametrize("card", [[], ["--card", "300T-A2"]])
def test_the_kylin_host_is_refused_with_the_upgrade_and_its_own_base_image(capsys, floor, card):
    code, doc, _ = run_json(capsys, "resolve", "--root", root(KYLIN), *card)
    assert code == 2 and doc["status"] == "refused" and doc["host"]["driver"]["version"] == "23.0.7"
    first = doc["reasons"][0]
    assert "23.0.7 (/usr/local/Ascend/driver/version.info), is older than every CANN with an official image for" \
           f" chip 910b with the Python provision needs ({floor}, its Requires-Python)" in first
    assert "(the driver runs CANN 7.0.0, whose listed images have an older Python)" in first
    newest, today = doc["alternatives"]
    assert newest["relaxed"] == ["the host's driver 23.0.7 (after the HDK upgrade)"] and meets(floor, newest["python"])
    assert today["cann"]["version"] == "7.0.0" and today["base_image"]["official"] is False
    assert meets(floor, today["python"]) and today["driver"]["host"] == "23.0.7"
    text = "\n".join(doc["reasons"])
    assert f"on your own CANN 7.0.0 base image (--base-image IMAGE) with Python {today['python']}: no official" \
           f" CANN 7.0.0 image for chip 910b with Python {floor} is listed" in text


def test_the_kylin_host_builds_on_its_own_cann_7_image(capsys, floor):
    code, doc, err = run_json(capsys, "resolve", "--root", root(KYLIN), "--base-image", "my/cann:7.0.0-py3")
    assert code == 0, err
    assert doc["stack"]["cann"]["version"] == "7.0.0" and meets(floor, doc["stack"]["python"])


def test_the_kylin_host_got_an_image_below_the_floor_before(capsys, no_floor):
    code, out, err = run(capsys, "resolve", "--root", root(KYLIN), "--json")
    s = json.loads(out)["stack"]
    assert code == 0 and (s["cann"]["version"], s["python"]) in (("7.0.0", "3.8"), ("7.0.0", "3.9")), err


# ------------------------------------------------------------------ render


def test_render_holds_a_stack_made_elsewhere_to_the_floor(m, tmp_path):
    from provisioner.image import recipes
    from provisioner.image import render as image_render

    s = stack(m, card="300T-A2", arch="x86_64")
    with pytest.raises(ProvisionError, match=r"the stack's Python 3\.9 is below the Python this project needs"):
        image_render.render(m, {**s, "python": "3.9"}, recipes.choose(s))
    # the floor of the source that goes into the image: a checkout asking for a newer Python than the stack's
    tree = _tree(tmp_path / "src", '[project]\nname = "provisioner"\nversion = "0"\nrequires-python = ">=3.99"\n')
    with pytest.raises(ProvisionError, match=r"needs \(>=3\.99, its Requires-Python\)"):
        image_render.render(m, s, recipes.choose(s), project_root=tree)
