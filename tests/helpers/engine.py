"""Fixtures for tests against a real Docker engine (session scope; the image is built once per session).

Registered for the whole suite by tests/conftest.py (pytest_plugins), so every area
(integration, devices, audit, launch) shares one engine client and one test image.

Contract other areas rely on (keep names and meaning):
- `docker_client`: a docker-py client of a running engine (started by scripts/engine.sh if needed).
- `base_image`: tag of the local Debian bookworm base (python3, pip, venv; scripts/base-image.sh).
- `wheelhouse`: directory holding the CPU torch wheel the image installs offline (scripts/wheelhouse.sh).
- `provision_image`: tag of the 300T-A2 image built by `provision build` with torch 2.13.0+cpu, torch_npu
  2.13.0 and this project with its train extra, on `base_image`.
- `session_image`: the same image under a tag of this session only (other checkouts rebuild the shared tag).
Set PROVISION_TEST_BASE / PROVISION_TEST_WHEELHOUSE to reuse what `make test` prepared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.helpers import prebuild
from tests.helpers.prebuild import BuildFailed

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "scripts"
OVERLAY = ROOT / "examples" / "overlays" / "torch-2.13.yaml"  # the overlay `make demo` uses
TORCH = os.environ.get("PROVISION_TEST_TORCH", "2.13.0")
CARD = "300T-A2"
T = TypeVar("T")


def _script(name: str, *args: str, timeout: int = 900) -> str:
    proc = subprocess.run([str(SCRIPTS / name), *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise BuildFailed(f"scripts/{name} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def system_ca() -> str:
    """The CA bundle pip trusts on this machine (it holds the PyPI proxy's CA)."""
    from provisioner.image.build import system_ca_bundle

    found = system_ca_bundle()
    if not found:
        pytest.fail("no system CA bundle found (PIP_CERT, SSL_CERT_FILE, /etc/ssl/certs/ca-certificates.crt)")
    return found


CANARY = ROOT / "tests" / "fixtures" / "ca" / "canary.pem"


def trusted_ca_file() -> str:
    """What the tests pass as --trusted-ca: the system bundle plus a canary certificate.

    The canary (tests/fixtures/ca/canary.pem, whose key was thrown away) exists nowhere
    else, so finding its bytes in an image proves the CA leaked. The file's content is
    stable, so the build cache holds across sessions.
    """
    path = ROOT / ".cache" / "trusted-ca.pem"
    content = Path(system_ca()).read_bytes().rstrip(b"\n") + b"\n" + CANARY.read_bytes()
    if not path.is_file() or path.read_bytes() != content:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return str(path)


def edited_project_copy(dest: Path, note: str) -> Path:
    """A copy of this project's source with one trainer file edited: a code-only change."""
    import shutil

    from provisioner.image import project

    for rel, src in project.files(project.source_root()).items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, target)
    edited = dest / "provisioner" / "train" / "__init__.py"
    edited.write_text(edited.read_text() + f"# {note}\n")
    return dest


def provision(*args: str, env: dict | None = None, timeout: int = 1800) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess."""
    return subprocess.run([sys.executable, "-m", "provisioner.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


def build_args(base: str, wheelhouse: str, *extra: str) -> list[str]:
    """`provision build` arguments for the 300T-A2 test image (see the module docstring)."""
    return ["build", "--card", CARD, "--torch", TORCH, "--base-image", base, "--matrix", str(OVERLAY),
            "--wheelhouse", wheelhouse, "--trusted-ca", trusted_ca_file(), "--network", "host", *extra]


def _or_fail(step: Callable[[], T]) -> T:
    try:
        return step()
    except BuildFailed as exc:
        pytest.fail(str(exc), pytrace=False)


_prep_lock = threading.RLock()  # prepared_base asks for the engine inside its own step
_prepared: dict[str, str] = {}


def _prepare(key: str, make: Callable[[], str]) -> str:
    """Once per session, whichever thread asks first (the background builds of tests/helpers/prebuild.py too)."""
    with _prep_lock:
        if key not in _prepared:
            _prepared[key] = make()
        return _prepared[key]


def prepared_engine() -> str:
    """A running engine (scripts/engine.sh starts one if needed): once, however many threads ask."""
    return _prepare("engine", lambda: _script("engine.sh", timeout=600))


def prepared_base() -> str:
    """The local Debian base's tag, the engine started and the image made if needed."""

    def make() -> str:
        prepared_engine()
        tag = os.environ.get("PROVISION_TEST_BASE", "provision-local/debian-python:bookworm")
        _script("base-image.sh", tag, timeout=1200)
        return tag

    return _prepare("base", make)


def prepared_wheelhouse() -> str:
    def make() -> str:
        path = Path(os.environ.get("PROVISION_TEST_WHEELHOUSE", ROOT / ".cache" / "wheelhouse")).resolve()
        _script("wheelhouse.sh", str(path), TORCH, timeout=600)
        if not any(path.glob(f"torch-{TORCH}+cpu-*.whl")):
            raise BuildFailed(f"no torch {TORCH} CPU wheel in {path}")
        return str(path)

    return _prepare("wheelhouse", make)


def build_test_image(base: str, wheelhouse: str) -> dict:
    """`provision build --json` of the test image (see the module docstring)."""
    proc = provision(*build_args(base, wheelhouse, "--json"))
    if proc.returncode != 0:
        raise BuildFailed(f"provision build failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    result = json.loads(proc.stdout)
    result["stderr"] = proc.stderr
    return result


def build_session_image(base: str, wheelhouse: str) -> str:
    """The test image under a tag of this session only (see `session_image`)."""
    import uuid

    tag = f"provision-test/session-{uuid.uuid4().hex[:12]}:1"
    proc = provision(*build_args(base, wheelhouse, "--tag", tag))
    if proc.returncode != 0:
        raise BuildFailed(f"provision build failed ({proc.returncode}):\n{proc.stderr[-6000:]}")
    return tag


@pytest.fixture(scope="session")
def docker_client():
    if os.environ.get("PROVISION_SKIP_DOCKER"):
        pytest.skip("PROVISION_SKIP_DOCKER is set")
    _or_fail(prepared_engine)
    import docker

    client = docker.from_env(timeout=900)
    client.ping()
    yield client
    client.close()


@pytest.fixture(scope="session")
def base_image(docker_client) -> str:
    tag = _or_fail(prepared_base)
    docker_client.images.get(tag)
    return tag


@pytest.fixture(scope="session")
def wheelhouse() -> str:
    return _or_fail(prepared_wheelhouse)


@pytest.fixture(scope="session")
def provision_build_result(docker_client, base_image, wheelhouse) -> dict:
    """The `provision build --json` document of the test image (built once per session, in the background)."""
    result: dict = prebuild.result("provision", lambda: build_test_image(base_image, wheelhouse))
    return result


@pytest.fixture(scope="session")
def provision_image(provision_build_result) -> str:
    return provision_build_result["tag"]


@pytest.fixture(scope="session")
def session_image(docker_client, base_image, wheelhouse) -> str:
    """The test image of `provision_image`, under a tag no other session uses.

    Sessions of other checkouts on the shared engine build `provision_image`'s tag from their own code; a test
    that needs this checkout's code in the image (a new module, an entrypoint change) uses this one. Only the
    tag is removed at the end; the build cache stays.
    """
    tag: str = prebuild.result("session", lambda: build_session_image(base_image, wheelhouse))
    prebuild.consumed("session")
    yield tag
    remove_tags(tag)


@pytest.fixture(scope="session")
def run_in_image(docker_client):
    """run_in_image(tag, command, **kwargs) -> (exit code, stdout, stderr); the container is always removed."""

    def run(tag: str, command, env: dict | None = None, user: str | None = None, entrypoint=None):
        container = docker_client.containers.create(tag, command=command, environment=env or {}, user=user or "",
                                                    network_mode="host", entrypoint=entrypoint)
        try:
            container.start()
            code = container.wait(timeout=600)["StatusCode"]
            out = container.logs(stdout=True, stderr=False).decode()
            err = container.logs(stdout=False, stderr=True).decode()
            return code, out, err
        finally:
            container.remove(force=True)

    return run


def remove_tags(*tags: str) -> None:
    """Remove these tags (their images too, unless another tag holds one); a tag already gone is no error."""
    import docker

    client = docker.from_env(timeout=900)
    try:
        for tag in tags:
            try:
                client.images.remove(tag, force=True)
            except docker.errors.ImageNotFound:
                pass
    finally:
        client.close()


# -- disk ------------------------------------------------------------------------------------------------------


def dangling_ids(client) -> set[str]:
    """The untagged top-level images (stages of multi-stage builds, images a rebuild replaced)."""
    return {img.id for img in client.images.list(filters={"dangling": True})}


def remove_images(client, ids) -> None:
    """Remove these images (what one fixture's build left untagged); one still in use stays."""
    import docker

    for image_id in ids:
        try:
            client.images.remove(image_id, force=False)
        except docker.errors.APIError:
            pass
