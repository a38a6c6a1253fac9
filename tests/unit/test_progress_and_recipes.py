"""The build progress display, the recipes, the project source and the in-image lock check."""

from __future__ import annotations

import io
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from provisioner.engine.types import BuildEvent
from provisioner.errors import ProvisionError
from provisioner.image import project, recipes
from provisioner.image.progress import Progress

ROOT = Path(__file__).resolve().parents[2]

# What docker-py yields for a classic-builder build (shape taken from a real engine's stream).
STREAM = [
    {"stream": "Step 1/4 : FROM base:1 AS deps\n"}, {"stream": " ---> 301f3ab234ab\n"},
    {"stream": "Step 2/4 : RUN make venv\n"}, {"stream": " ---> Using cache\n"}, {"stream": " ---> 1a2b\n"},
    {"stream": "Step 3/4 : FROM base:1\n"}, {"stream": " ---> 301f3ab234ab\n"},
    {"stream": "Step 4/4 : RUN pip install -r x.txt\n"}, {"stream": " ---> Running in 9f\n"},
    {"stream": "Collecting torch-npu\n"}, {"stream": "ERROR: No matching distribution found for "},
    {"stream": "torch-npu==2.13.0\n"},
    {"errorDetail": {"code": 1, "message": "The command '/bin/sh -c pip install' returned a non-zero code: 1"},
     "error": "The command '/bin/sh -c pip install' returned a non-zero code: 1"},
]


def test_progress_steps_cache_and_failure_tail():
    out = io.StringIO()
    with Progress(out, live=False) as progress:
        for message in STREAM:
            progress.feed(BuildEvent.from_message(message))
    steps = progress.summary()
    assert [(s["step"], s["stage"], s["cached"]) for s in steps] == [(1, "deps", False), (2, "deps", True),
                                                                       (3, "image", False), (4, "image", False)]
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and lines[1].startswith("[ 2/4]") and "cached" in lines[1] and "RUN make venv" in lines[1]
    report = progress.failure_report()
    assert report.splitlines()[0] == "build failed at step 4/4 (stage image): RUN pip install -r x.txt"
    assert "  | ERROR: No matching distribution found for torch-npu==2.13.0" in report  # split chunks joined


def test_progress_live_redraws_one_line():
    out = io.StringIO()
    with Progress(out, live=True) as progress:
        for message in STREAM[:5]:
            progress.feed(BuildEvent.from_message(message))
    text = out.getvalue()
    assert "\r" in text and text.count("\n") == 2


def test_recipes_load_and_choose():
    assert recipes.names() == ["mindspeed-llm", "mindspore", "pytorch"]
    pytorch = recipes.load("pytorch")
    assert pytorch.default and pytorch.project_extras == ("train", "grpo", "plot")
    stack = {"framework": "pytorch", "extras": {}, "apex": None}
    assert recipes.choose(stack).name == "pytorch"
    assert recipes.choose({**stack, "extras": {"mindspeed_llm": {"set": "x"}}}).name == "mindspeed-llm"
    ms = {"framework": "mindspore", "extras": {"mindformers": {"set": "mindformers-x"}}, "apex": None}
    assert recipes.choose(ms).name == "mindspore"
    # The MindSpore image carries MindSpore Transformers: a stack without it says how to get one.
    with pytest.raises(ProvisionError, match="recipe 'mindspore' needs a stack resolved --with mindformers"):
        recipes.choose({**ms, "extras": {}})
    assert recipes.request_options("mindspore", {})["extras"] == ("mindformers",)
    with pytest.raises(ProvisionError, match="needs a stack resolved --with mindspeed-llm"):
        recipes.choose(stack, "mindspeed-llm")
    with pytest.raises(ProvisionError, match="builds mindspore images, but the stack is pytorch"):
        recipes.choose(stack, "mindspore")
    opts = recipes.request_options("mindspeed-llm", {"extras": ("apex",)})
    assert opts["extras"] == ("apex", "mindspeed-llm")
    assert recipes.request_options("mindspore", {})["framework"] == "mindspore"


def test_recipe_files_are_checked(tmp_path, monkeypatch):
    bad = tmp_path / "images"
    bad.mkdir()
    (bad / "broken.yaml").write_text("name: broken\ntitle: t\ndescription: d\nframework: tensorflow\n"
                                     "repository: r\ntemplate: Dockerfile.j2\n")
    (bad / "typo.yaml").write_text("name: typo\ntitle: t\ndescription: d\nframework: pytorch\n"
                                   "repository: r\ntemplate: Dockerfile.j2\nextra: {}\n")
    monkeypatch.setattr(recipes, "_recipe_dir", lambda: bad)
    with pytest.raises(ProvisionError, match=r"images/broken\.yaml:4: framework must be pytorch or mindspore"):
        recipes.load("broken")
    with pytest.raises(ProvisionError, match=r"images/typo\.yaml:7: unknown recipe key 'extra'"):
        recipes.load("typo")


def test_project_files_from_the_checkout():
    files = project.files(project.source_root())
    assert "pyproject.toml" in files and "provisioner/image/render.py" in files and "templates/Dockerfile.j2" in files
    assert "matrices/packages.yaml" in files and "images/pytorch.yaml" in files
    assert "templates/build/pip.conf.j2" in files  # data directories named like build outputs are kept
    assert not [f for f in files if f.startswith(("tests/", ".venv/", ".git/", "benchmarks/", "scripts/"))
                or "__pycache__" in f or f.endswith(".pyc")]
    assert list(files) == sorted(files)


def test_project_source_from_an_installed_wheel(tmp_path):
    """Installed from a wheel (no checkout), the image still gets an installable copy of this project."""
    tomllib = pytest.importorskip("tomllib")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "dist"), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("provisioner-*.whl")
    site = tmp_path / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(site), str(wheel)], check=True,
                   capture_output=True)
    tree = tmp_path / "tree"
    code = ("import sys\nfrom pathlib import Path\nfrom provisioner.image import project\n"
            "assert project.source_root() is None, project.source_root()\n"
            "for rel, src in project.files(None).items():\n"
            "    dest = Path(sys.argv[1], rel); dest.parent.mkdir(parents=True, exist_ok=True)\n"
            "    dest.write_bytes(src if isinstance(src, bytes) else src.read_bytes())\n")
    env = {**__import__("os").environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", code, str(tree)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = tomllib.loads((tree / "pyproject.toml").read_text())
    meta = metadata.metadata("provisioner")
    assert doc["project"]["name"] == meta["Name"] and doc["project"]["version"] == meta["Version"]
    assert "provision" in doc["project"]["scripts"]
    assert any(r.startswith("transformers") for r in doc["project"]["optional-dependencies"]["train"])
    assert (tree / "templates" / "Dockerfile.j2").is_file() and (tree / "matrices" / "packages.yaml").is_file()
    assert not (tree / "provisioner" / "_data").exists()
    # ... and it builds into a wheel with the same data files.
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path / "again"), str(tree)],
                   check=True, capture_output=True)
    import zipfile

    (rebuilt,) = (tmp_path / "again").glob("provisioner-*.whl")
    names = set(zipfile.ZipFile(rebuilt).namelist())
    assert {n for n in zipfile.ZipFile(wheel).namelist() if "_data/" in n} <= names


def test_lock_check_passes_and_fails_for_real(tmp_path):
    """templates/files/lock-check.py against this test run's own environment."""
    script = ROOT / "templates" / "files" / "lock-check.py"
    import sysconfig

    venv = sysconfig.get_paths()["purelib"]
    dists = {d.metadata["Name"]: d.version for d in metadata.distributions(path=[venv]) if d.metadata["Name"]}
    good = tmp_path / "good.lock"
    good.write_text("# a comment\n--extra-index-url https://example.invalid/simple\n"
                    + "".join(f"{n}=={v}\n" for n, v in sorted(dists.items())))
    proc = subprocess.run([sys.executable, str(script), str(good), "--strict"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "locked packages at their locked versions" in proc.stdout
    name = next(n for n in dists if n.lower() == "click")
    drift = tmp_path / "drift.lock"
    drift.write_text(good.read_text().replace(f"{name}=={dists[name]}", f"{name}==0.0.1"))
    proc = subprocess.run([sys.executable, str(script), str(drift), "--strict"], capture_output=True, text=True)
    assert proc.returncode == 1
    assert f"lock check: error: click is {dists[name]}, the lock says 0.0.1" in proc.stderr.replace(name, "click")
    missing = tmp_path / "missing.lock"
    missing.write_text("".join(f"{n}=={v}\n" for n, v in sorted(dists.items()) if n != name))
    proc = subprocess.run([sys.executable, str(script), str(missing), "--strict"], capture_output=True, text=True)
    assert proc.returncode == 1 and "is installed but not in the lock" in proc.stderr
