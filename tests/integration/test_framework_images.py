"""Framework images against a real engine, on the local Debian base (no CANN), checkouts from local repositories.

* MindSpore + MindSpore Transformers 1.7.0 (Python 3.11, x86_64: what this machine runs): the whole image, from
  the real locked environment of matrices/frameworks.yaml, MindSpore Transformers built from a local repository
  of its v1.7.0 files; the lock check and `pip check` pass, `provision doctor` runs its MindSpore checks (on the
  CPU), the conversion command is on PATH.
* MindSpeed-RL 2.0.0 (GRPO): its environment is for Python 3.10 with torch 2.5.1, which this machine cannot
  install (no Python 3.10 base image, no torch 2.5.1 CPU wheel reachable); the `checkouts` stage is built for
  real - every checkout from a local repository, verified against its commit in the build, laid out as the
  install guide does.
* MindSpeed-LLM, every set of the matrix (2.0.0, 2.1.0, 2.2.0, 2.3.0, 26.0.0, 26.1.0): MindSpeed, Megatron-LM
  and MindSpeed-LLM from local repositories of their upstream files at the pinned commits. The `checkouts` stage
  is built for real for each set. For two sets (2.0.0 and 26.0.0; the others stop at the same layer),
  `provision build --source ...` then builds it, each archive checked against its commit, and stops at the
  first layer that cannot be built here. That is the first RUN of the `deps` stage (`python3.10 -m venv
  /opt/venv`), because the local base (Debian bookworm) has Python 3.11 only. Every MindSpeed-LLM environment is
  locked for Python 3.10 (`--python 3.11` is refused at resolve), and no Python 3.10 image can be pulled here. On
  a Python 3.10 base the next layer (requirements/framework.txt) would fail too: it installs torch==2.7.1+cpu
  (26.0.0) or torch==2.1.0+cpu (2.0.0) from download.pytorch.org/whl/cpu, which does not resolve here (the local
  wheels hold torch 2.13.0+cpu and 2.14.1 for Python 3.11 only). Everything after is built FROM deps, so none of
  it builds here either: the locked requirement layers, `sources` (the MindSpeed wheel), `stack` (the lock
  check), `project` and the image.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import fwimages, fwrepos, prebuild
from tests.helpers.engine import dangling_ids, provision, remove_images, trusted_ca_file

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def mindspore_build(docker_client, base_image):
    """The MindSpore image (tests/helpers/fwimages.py), built in the background if tests/helpers/prebuild.py
    started it; removed at the end of this module."""
    result = prebuild.result(
        "mindspore", lambda: fwimages.build_mindspore_image(base_image, fwimages.mindspore_wheelhouse())
    )
    prebuild.consumed("mindspore")
    yield result
    fwimages.remove_mindspore_image(result)


def test_mindspore_image_lock_check_and_pip_check(mindspore_build, run_in_image):
    tag = mindspore_build["tag"]
    code, out, err = run_in_image(tag, ["pip", "check"])
    assert code == 0 and "No broken requirements found" in out, out + err
    code, out, err = run_in_image(tag, ["python", "-c", (
        "import json\nfrom importlib import metadata as m\n"
        "print(json.dumps({d: m.version(d) for d in ('mindspore', 'mindformers', 'transformers', 'tokenizers')}))")])
    assert code == 0, err
    got = json.loads(out.strip().splitlines()[-1])
    assert got == {"mindspore": "2.7.1", "mindformers": "1.7.0", "transformers": "4.51.3", "tokenizers": "0.21.0"}


def test_mindspore_image_labels_name_the_set_and_checkouts(docker_client, mindspore_build):
    from provisioner.image.labels import framework_from_labels

    labels = docker_client.images.get(mindspore_build["tag"]).labels
    fw = framework_from_labels(labels)
    assert fw["set"] == "mindformers-1.7.0" and fw["kind"] == "mindformers"
    assert fw["env"] == "mindformers-1.7.0-mindspore2.7.1-py3.11"
    assert fw["checkouts"]["mindformers"]["commit"] == mindspore_build["commit"]
    assert fw["checkouts"]["mindformers"]["path"] == "/opt/mindformers"


def test_doctor_checks_mindspore_in_the_image(mindspore_build, run_in_image):
    code, out, err = run_in_image(mindspore_build["tag"], ["provision", "doctor", "--json"])
    doc = json.loads(out)
    ids = {f["id"]: f for f in doc["findings"]}
    assert doc["facts"]["mindspore"]["mindspore"]["version"] == "2.7.1", doc["facts"]["mindspore"]
    assert ids["mindspore-run-check"]["severity"] == "info", ids["mindspore-run-check"]
    assert "mindformers-ok" in ids and "mindspore-no-npu" in ids
    assert "torch-missing" not in ids  # a MindSpore stack is not held to torch


def test_conversion_command_is_on_path(mindspore_build, run_in_image):
    code, out, err = run_in_image(mindspore_build["tag"], ["mindformers-convert-weight", "--help"])
    # convert_weight.py imports torch, which MindSpore Transformers' install does not bring: one clear line.
    assert code == 2 and "imports torch, which this image does not carry" in err, out + err
    code, out, err = run_in_image(mindspore_build["tag"], ["sh", "-c", "test -f /opt/mindformers/run_mindformer.py"
                                                           " && command -v mindformers-run"])
    assert code == 0 and out.strip() == "/usr/local/bin/mindformers-run", out + err


# ---------------------------------------------------- MindSpeed sets: checkouts from local repositories


def local_set(tmp_path: Path, set_id: str) -> tuple[dict[str, tuple[Path, str]], Path]:
    """The set's checkouts as local repositories of its fixture files, and an overlay that pins their commits."""
    repos = fwrepos.bundle_repos(set_id, tmp_path / "repos")
    overlay = fwrepos.bundle_overlay(tmp_path / "overlay.yaml", set_id,
                                     {name: commit for name, (_, commit) in repos.items()})
    return repos, overlay


@contextlib.contextmanager
def checkouts_stage(docker_client, context: Path, tag: str):
    """The `checkouts` stage of a written build context, built for real; the image is removed afterwards."""
    image, _ = docker_client.images.build(path=str(context), target="checkouts", rm=True, forcerm=True,
                                          network_mode="host", tag=tag)
    try:
        yield image
    finally:
        docker_client.images.remove(tag, force=True)


def run_sh(docker_client, image, script: str) -> str:
    return docker_client.containers.run(image.id, ["sh", "-c", script], remove=True).decode()


# ----------------------------------------------------------------- MindSpeed-RL 2.0.0: the checkouts stage


def test_rl_checkouts_stage_from_local_repositories(docker_client, base_image, tmp_path):
    from provisioner.image import recipes, render
    from provisioner.matrix import loader
    from provisioner.resolve import request, solve

    repos, overlay = local_set(tmp_path, "mindspeed-rl-2.0.0")
    m = loader.load([str(overlay)], use_cache=False)
    stack = solve.resolve(m, request.build(m, profile="mindspeed-rl-2.0.0-grpo", base_image=base_image))
    ctx = render.render(m, stack, recipes.choose(stack, "mindspeed-llm"),
                        sources={name: str(path) for name, (path, _) in repos.items()})
    out = render.write(ctx, tmp_path / "ctx")
    with checkouts_stage(docker_client, out, "provision-fwimg-test/rl-checkouts:latest") as image:
        listing = run_sh(docker_client, image, (
            "cd /opt/src && ls mindspeed_rl && cat mindspeed_rl/requirements.txt | head -3"
            " && test -f mindspeed_rl/mindspeed/__init__.py && test -f mindspeed_rl/megatron/core/__init__.py"
            " && test -f mindspeed_rl/mindspeed_llm/__init__.py && test -f mindspeed_llm/megatron/core/__init__.py"
            " && test ! -e mindspeed_rl/.git && echo LAYOUT-OK"))
    assert "LAYOUT-OK" in listing, listing
    assert "codetiming" in listing  # MindSpeed-RL's own requirements file, byte for byte


def test_rl_checkout_archive_with_another_commit_fails_the_build(docker_client, base_image, tmp_path):
    import docker.errors

    from provisioner.image import recipes, render
    from provisioner.matrix import loader
    from provisioner.resolve import request, solve

    repos, overlay = local_set(tmp_path, "mindspeed-rl-2.0.0")
    m = loader.load([str(overlay)], use_cache=False)
    stack = solve.resolve(m, request.build(m, profile="mindspeed-rl-2.0.0-grpo", base_image=base_image))
    ctx = render.render(m, stack, recipes.choose(stack, "mindspeed-llm"),
                        sources={name: str(path) for name, (path, _) in repos.items()})
    out = render.write(ctx, tmp_path / "ctx")
    # Someone swaps an archive in the written context: the build itself refuses it, naming both commits.
    megatron, megatron_commit = repos["megatron"]
    (out / "sources" / "mindspeed.tar").write_bytes(subprocess.run(
        ["git", "-C", str(megatron), "archive", "--format=tar", "HEAD"], capture_output=True, check=True).stdout)
    with pytest.raises(docker.errors.BuildError) as err:
        docker_client.images.build(path=str(out), target="checkouts", rm=True, forcerm=True, network_mode="host")
    log = "".join(str(x.get("stream", "")) + str(x.get("error", "")) for x in err.value.build_log)
    assert f"holds commit {megatron_commit}, the set pins {repos['mindspeed'][1]}" in log, log[-2000:]


# ------------------------------------- MindSpeed-LLM sets: the checkouts of every set, and where the build stops

# set -> the options that select it on this machine's architecture (those of its golden case). The CANN releases of
# 2.1.0, 2.2.0 and 26.1.0 have official images with Python 3.11/3.12 only: like their goldens, they name --python 3.10
# (the local base stands in for a Python 3.10 image of that CANN).
LLM_SETS = {
    "mindspeed-llm-2.0.0": ["--card", "800T-A2", "--recipe", "mindspeed-llm", "--cann", "8.1.RC1", "--torch", "2.1.0",
                            "--arch", "x86_64"],
    "mindspeed-llm-2.1.0": ["--card", "800T-A2", "--recipe", "mindspeed-llm", "--cann", "8.2.RC1", "--python", "3.10",
                            "--arch", "x86_64"],
    "mindspeed-llm-2.2.0": ["--card", "800T-A2", "--recipe", "mindspeed-llm", "--cann", "8.3.RC1", "--python", "3.10",
                            "--arch", "x86_64"],
    "mindspeed-llm-2.3.0": ["--card", "800T-A2", "--recipe", "mindspeed-llm", "--cann", "8.5.0", "--arch", "x86_64"],
    "mindspeed-llm-26.0.0": ["--card", "800T-A2", "--recipe", "mindspeed-llm", "--cann", "9.0.0", "--arch", "x86_64"],
    "mindspeed-llm-26.1.0": ["--card", "800T-A2", "--recipe", "mindspeed-llm", "--cann", "9.1.0", "--python", "3.10",
                             "--arch", "x86_64"],
}
# The whole build (which stops at the same layer for every set) only for the newest and the oldest set.
LLM_BUILD_SETS = ["mindspeed-llm-2.0.0", "mindspeed-llm-26.0.0"]


def llm_options(set_id: str, base_image: str, overlay: Path, repos: dict[str, tuple[Path, str]]) -> list[str]:
    """`provision render|build` options for the set on the local base, every checkout from its local repository."""
    sources = [arg for name, (path, _) in sorted(repos.items()) for arg in ("--source", f"{name}={path}")]
    return [*LLM_SETS[set_id], "--base-image", base_image, "--for-host", "none", "--matrix", str(overlay), *sources]


def test_every_mindspeed_llm_set_of_the_matrix_is_built():
    from provisioner.matrix import loader

    sets = {b["id"] for b in loader.load(use_cache=False).rows("llm_bundles") if b["kind"] == "mindspeed-llm"}
    assert set(LLM_SETS) == sets


@pytest.mark.parametrize("set_id", sorted(LLM_SETS))
def test_llm_checkouts_stage_from_local_repositories(docker_client, base_image, tmp_path, set_id):
    from provisioner.matrix import loader

    repos, overlay = local_set(tmp_path, set_id)
    proc = provision("render", *llm_options(set_id, base_image, overlay, repos), "-o", str(tmp_path / "ctx"))
    assert proc.returncode == 0, proc.stderr
    dockerfile = (tmp_path / "ctx" / "Dockerfile").read_text()
    assert f"# {set_id}: the checkouts at the commits the matrix pins" in dockerfile
    for name, (_, commit) in repos.items():  # checked in the build too, against the archive's own commit id
        assert f"sources/{name}.tar holds commit ${{got:-none}}, the set pins {commit}" in dockerfile
    # The upstream requirement files the set's lock was made from (matrices/frameworks.yaml `inputs`).
    env = next(e for e in loader.load(use_cache=False).rows("framework_envs") if e["set"] == set_id)
    inputs = {key.partition("@")[0]: digest for key, digest in env["inputs"].items()}
    with checkouts_stage(docker_client, tmp_path / "ctx", f"provision-fwimg-test/llm-checkouts:{set_id}") as image:
        listing = run_sh(docker_client, image, (
            "cd /opt/src && sha256sum mindspeed/requirements.txt mindspeed_llm/requirements.txt"
            # the install guide: Megatron-LM's megatron/ copied into the MindSpeed-LLM checkout, MindSpeed beside it
            # (installed from its setup.py in the `sources` stage)
            " && cmp megatron/megatron/core/__init__.py mindspeed_llm/megatron/core/__init__.py"
            " && test -f mindspeed_llm/mindspeed_llm/__init__.py && test -f mindspeed_llm/LICENSE"
            " && test -f mindspeed/setup.py && test -f mindspeed/mindspeed/__init__.py"
            " && test -z \"$(find /opt/src -name .git)\" && echo LAYOUT-OK"))
    assert "LAYOUT-OK" in listing, listing
    assert f"{inputs['mindspeed']}  mindspeed/requirements.txt" in listing, listing
    assert f"{inputs['mindspeed_llm']}  mindspeed_llm/requirements.txt" in listing, listing


@pytest.mark.parametrize("set_id", LLM_BUILD_SETS)
def test_llm_build_from_local_repositories_stops_at_the_python_environment(docker_client, base_image, tmp_path,
                                                                           set_id):
    repos, overlay = local_set(tmp_path, set_id)
    before = dangling_ids(docker_client)
    try:
        proc = provision("build", *llm_options(set_id, base_image, overlay, repos), "--trusted-ca", trusted_ca_file(),
                         "--network", "host", timeout=1800)
    finally:
        # the checkouts stage this build left untagged (it never reaches a tag)
        remove_images(docker_client, dangling_ids(docker_client) - before)
    assert proc.returncode == 1, proc.stderr[-4000:]
    # Every checkouts step ran, each archive verified against its commit in the build (the step fails otherwise) ...
    for name in repos:
        assert f'checkouts RUN got="$(git get-tar-commit-id < /opt/build/sources/{name}.tar)"' in proc.stderr
    assert "checkouts RUN cp -r /opt/src/megatron/megatron /opt/src/mindspeed_llm/" in proc.stderr
    # ... and the first layer this machine cannot build is the deps stage's venv: the base has no Python 3.10.
    assert re.search(r"build failed at step \d+/\d+ \(stage deps\): RUN py=\"\$\(command -v python3\.10",
                     proc.stderr), proc.stderr[-4000:]
    assert "provision: the base image has no python3.10, which the stack needs" in proc.stderr
    # --python cannot help a framework set (locked for Python 3.10 only): a Python 3.10 image of that CANN can
    assert f"({set_id} is locked for Python 3.10 only: pass --base-image with a CANN " in proc.stderr


def test_llm_build_from_a_local_repository_at_another_commit_is_refused(docker_client, base_image, tmp_path):
    set_id = "mindspeed-llm-26.0.0"
    repos, overlay = local_set(tmp_path, set_id)
    path, pinned = repos["mindspeed_llm"]
    # The checkout moved on after the commit the overlay pins: refused before anything is built.
    with (path / "requirements.txt").open("a") as f:
        f.write("peft==0.7.1\n")
    fwrepos.git(path, "commit", "--quiet", "--no-gpg-sign", "-am", "a local change")
    head = fwrepos.git(path, "rev-parse", "HEAD")
    proc = provision("build", *llm_options(set_id, base_image, overlay, repos), "--network", "host")
    assert proc.returncode == 2 and "building provision/" not in proc.stderr, proc.stderr
    assert f"the checkout is at commit {head}, but the set pins {pinned} (26.0.0)" in proc.stderr
    # Without the overlay the set pins the upstream commit, which no fixture repository holds.
    proc = provision("build", *LLM_SETS[set_id], "--base-image", base_image, "--for-host", "none",
                     "--source", f"megatron={repos['megatron'][0]}")
    assert proc.returncode == 2 and "building provision/" not in proc.stderr, proc.stderr
    assert (f"--source megatron={repos['megatron'][0]}: the checkout is at commit {repos['megatron'][1]}, but the set"
            " pins a845aa7e12b3a117e24c2352b9e3e60bad2e3a17 (core_v0.12.1)") in proc.stderr
