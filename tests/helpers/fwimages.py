"""The MindSpore + MindSpore Transformers 1.7.0 image of tests/integration/test_framework_images.py.

Built once per session (in the background when tests/helpers/prebuild.py starts it), on the local Debian base,
MindSpore Transformers from a local repository of its v1.7.0 files; removed again by its fixture's teardown.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.helpers import fwrepos
from tests.helpers.engine import ROOT, dangling_ids, provision, remove_images, remove_tags, trusted_ca_file
from tests.helpers.prebuild import BuildFailed

MINDSPORE_WHEEL = "mindspore==2.7.1"


def mindspore_wheelhouse() -> str:
    """MindSpore's x86_64 wheel (790 MB) in a wheelhouse of its own: not the one every other image test sends
    to the engine, and downloaded once, not per build."""
    wheelhouse = Path(os.environ.get("PROVISION_TEST_MINDSPORE_WHEELHOUSE",
                                     ROOT / ".cache" / "wheelhouse-mindspore")).resolve()
    wheelhouse.mkdir(parents=True, exist_ok=True)
    if not list(wheelhouse.glob("mindspore-2.7.1-cp311-*.whl")):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")} | {"PIP_CONFIG_FILE": os.devnull}
        cert = ["--cert", os.environ["PIP_CERT"]] if "PIP_CERT" in os.environ else []
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                               "--only-binary=:all:", "--python-version", "3.11", "--platform", "manylinux1_x86_64",
                               MINDSPORE_WHEEL, "-d", str(wheelhouse), *cert],
                              env=env, timeout=1800, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildFailed(f"pip download {MINDSPORE_WHEEL} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return str(wheelhouse)


def build_mindspore_image(base: str, wheelhouse: str) -> dict:
    """`provision build --json` of the MindSpore image; the result also names its commit and its build stages."""
    import docker

    work = Path(tempfile.mkdtemp(prefix="provision-mindformers-"))
    client = docker.from_env(timeout=900)
    try:
        repo, commit = fwrepos.mindformers_repo(work)
        overlay = fwrepos.mindformers_overlay(work / "overlay.yaml", "1.7.0", commit)
        args = ["build", "--profile", "mindspore-2.7.1-a2", "--recipe", "mindspore", "--arch", "x86_64",
                "--base-image", base, "--matrix", str(overlay), "--source", f"mindformers={repo}",
                "--trusted-ca", trusted_ca_file(), "--network", "host", "--json", "--wheelhouse", wheelhouse]
        before = dangling_ids(client)
        proc = provision(*args, timeout=3600)
        if proc.returncode != 0:
            raise BuildFailed(f"provision build failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
        result = json.loads(proc.stdout)
        result["stderr"], result["commit"] = proc.stderr, commit
        result["stages"] = sorted(dangling_ids(client) - before)
        return result
    finally:
        client.close()
        shutil.rmtree(work, ignore_errors=True)


def remove_mindspore_image(result: dict) -> None:
    """The image (3.7 GB) and the build stages it left untagged (4.4 GB each): no other module uses them, and a
    full run must fit a CI machine's disk. Other untagged images stay: they are other builds' cache."""
    import docker

    remove_tags(*(result.get("tags") or [result["tag"]]))
    client = docker.from_env(timeout=900)
    try:
        remove_images(client, result["stages"])
    finally:
        client.close()
