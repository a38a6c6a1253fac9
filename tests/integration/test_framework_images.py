"""Framework images against a real engine, on the local Debian base (no CANN), checkouts from local repositories.

* MindSpore + MindSpore Transformers 1.7.0 (Python 3.11, x86_64: what this machine runs): the whole image, from
  the real locked environment of matrices/frameworks.yaml, MindSpore Transformers built from a local repository
  of its v1.7.0 files; the lock check and `pip check` pass, `provision doctor` runs its MindSpore checks (on the
  CPU), the conversion command is on PATH.
* MindSpeed-RL 2.0.0 (GRPO): its environment is for Python 3.10 with torch 2.5.1, which this machine cannot
  install (no Python 3.10 base image, no torch 2.5.1 CPU wheel reachable); the `checkouts` stage is built for
  real - every checkout from a local repository, verified against its commit in the build, laid out as the
  install guide does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import fwrepos
from tests.helpers.engine import ROOT, dangling_ids, provision, remove_images, trusted_ca_file

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def mindspore_build(docker_client, base_image, tmp_path_factory):
    work = tmp_path_factory.mktemp("mindformers")
    repo, commit = fwrepos.mindformers_repo(work)
    overlay = fwrepos.mindformers_overlay(work / "overlay.yaml", "1.7.0", commit)
    # MindSpore's x86_64 wheel is 790 MB: kept in a wheelhouse of its own (not the one every other image test
    # sends to the engine), so it is downloaded once, not per build.
    wheelhouse = Path(os.environ.get("PROVISION_TEST_MINDSPORE_WHEELHOUSE",
                                     ROOT / ".cache" / "wheelhouse-mindspore")).resolve()
    wheelhouse.mkdir(parents=True, exist_ok=True)
    if not list(wheelhouse.glob("mindspore-2.7.1-cp311-*.whl")):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                        "--python-version", "3.11", "--platform", "manylinux1_x86_64", "mindspore==2.7.1",
                        "-d", str(wheelhouse), *(["--cert", os.environ["PIP_CERT"]] if "PIP_CERT" in os.environ
                                                  else [])], check=True, env=env, timeout=1800)
    args = ["build", "--profile", "mindspore-2.7.1-a2", "--recipe", "mindspore", "--arch", "x86_64",
            "--base-image", base_image, "--matrix", str(overlay), "--source", f"mindformers={repo}",
            "--trusted-ca", trusted_ca_file(), "--network", "host", "--json"]
    args += ["--wheelhouse", str(wheelhouse)]
    before = dangling_ids(docker_client)
    proc = provision(*args, timeout=3600)
    if proc.returncode != 0:
        pytest.fail(f"provision build failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    result = json.loads(proc.stdout)
    result["stderr"], result["commit"] = proc.stderr, commit
    stages = dangling_ids(docker_client) - before
    yield result
    # The image (3.7 GB) and the build stages it left untagged (4.4 GB each): no other module uses them, and a
    # full run must fit a CI machine's disk. Other untagged images stay: they are other builds' cache.
    for tag in result.get("tags") or [result["tag"]]:
        docker_client.images.remove(tag, force=True)
    remove_images(docker_client, stages)


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


# ----------------------------------------------------------------- MindSpeed-RL 2.0.0: the checkouts stage


def test_rl_checkouts_stage_from_local_repositories(docker_client, base_image, tmp_path):
    from provisioner.image import recipes, render
    from provisioner.matrix import loader
    from provisioner.resolve import request, solve

    repos = fwrepos.rl_repos(tmp_path / "repos")
    overlay = fwrepos.bundle_overlay(tmp_path / "overlay.yaml", "mindspeed-rl-2.0.0",
                                     {name: commit for name, (_, commit) in repos.items()})
    m = loader.load([str(overlay)], use_cache=False)
    stack = solve.resolve(m, request.build(m, profile="mindspeed-rl-2.0.0-grpo", base_image=base_image))
    ctx = render.render(m, stack, recipes.choose(stack, "mindspeed-llm"),
                        sources={name: str(path) for name, (path, _) in repos.items()})
    out = render.write(ctx, tmp_path / "ctx")
    image, _ = docker_client.images.build(path=str(out), target="checkouts", rm=True, forcerm=True,
                                          network_mode="host", tag="provision-fwimg-test/rl-checkouts:latest")
    try:
        listing = docker_client.containers.run(image.id, ["sh", "-c", (
            "cd /opt/src && ls mindspeed_rl && cat mindspeed_rl/requirements.txt | head -3"
            " && test -f mindspeed_rl/mindspeed/__init__.py && test -f mindspeed_rl/megatron/core/__init__.py"
            " && test -f mindspeed_rl/mindspeed_llm/__init__.py && test -f mindspeed_llm/megatron/core/__init__.py"
            " && test ! -e mindspeed_rl/.git && echo LAYOUT-OK")], remove=True).decode()
    finally:
        docker_client.images.remove("provision-fwimg-test/rl-checkouts:latest", force=True)
    assert "LAYOUT-OK" in listing, listing
    assert "codetiming" in listing  # MindSpeed-RL's own requirements file, byte for byte


def test_rl_checkout_archive_with_another_commit_fails_the_build(docker_client, base_image, tmp_path):
    import subprocess

    import docker.errors

    from provisioner.image import recipes, render
    from provisioner.matrix import loader
    from provisioner.resolve import request, solve

    repos = fwrepos.rl_repos(tmp_path / "repos")
    overlay = fwrepos.bundle_overlay(tmp_path / "overlay.yaml", "mindspeed-rl-2.0.0",
                                     {name: commit for name, (_, commit) in repos.items()})
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
