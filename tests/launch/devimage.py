"""A small development image for the launch tests and benchmark, built without a registry.

REPLACED BY THE SHARED `provision_image` FIXTURE (tests/integration/conftest.py) AT MERGE.

Two cached layers, each tagged by a hash of its inputs so reruns build nothing:
  provision-test/launch-dev:torch-<hash>  the local Debian base image + the venv's torch (CPU build) and its
                                          dependencies, installed offline from a wheelhouse this machine's pip
                                          fills (served to the build over 127.0.0.1, so no wheel enters a layer)
  provision-test/launch-dev:<hash>        + this project's source (`pip install --no-deps .`)
Older tags of the repository are removed when a new one is built.
"""

from __future__ import annotations

import hashlib
import http.server
import importlib.metadata
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

BASE = "provision-local/debian-python:bookworm"
REPO = "provision-test/launch-dev"
LABEL = "org.provision.test"
ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "README.md", "provisioner", "matrices", "templates", "images")

TORCH_DOCKERFILE = """\
FROM {base}
ARG WHEELS
# Offline: every wheel comes from the wheelhouse the test serves on 127.0.0.1.
RUN python3 -m pip install --no-cache-dir --no-index --find-links "$WHEELS" --break-system-packages {requirements} \\
 && ln -sf /usr/bin/python3 /usr/local/bin/python
LABEL {label}=launch-dev
"""

PROJECT_DOCKERFILE = """\
FROM {torch_tag}
COPY src /tmp/provision-src
RUN python -m pip install --no-cache-dir --no-deps --no-build-isolation --break-system-packages /tmp/provision-src \\
 && rm -rf /tmp/provision-src
LABEL {label}=launch-dev
"""


class BaseImageMissing(RuntimeError):
    pass


def requirements() -> list[str]:
    """The same torch build as the venv running the tests (the Makefile pins it), and numpy, which
    torch warns about at import when it is missing (the shared image has it through the train extra)."""
    return [f"torch=={importlib.metadata.version('torch')}", "numpy"]


def _hash(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:16]


def source_files() -> list[Path]:
    out = []
    for name in SOURCES:
        p = ROOT / name
        if p.is_file():
            out.append(p)
        elif p.is_dir():
            out.extend(f for f in sorted(p.rglob("*")) if f.is_file() and "__pycache__" not in f.parts
                       and not f.name.endswith(".pyc") and ".egg-info" not in str(f))
    return out


def _exists(client, tag: str) -> bool:
    try:
        client.images.get(tag)
        return True
    except Exception:  # noqa: BLE001
        return False


def _build(client, context: Path, tag: str, buildargs: dict | None = None, log=print) -> None:
    from docker.errors import BuildError

    log(f"building {tag} ...")
    try:
        client.images.build(path=str(context), tag=tag, network_mode="host", rm=True, forcerm=True,
                            buildargs=buildargs or {})
    except BuildError as exc:
        tail = "".join(str(c.get("stream", c.get("error", ""))) for c in list(exc.build_log)[-30:])
        raise RuntimeError(f"building {tag} failed: {exc}\n{tail}") from None


def _python_tag(client) -> str:
    out = client.containers.run(BASE, ["python3", "-c", "import sys; print('%d%d' % sys.version_info[:2])"],
                                remove=True, network_mode="none")
    return out.decode().strip()


def _wheelhouse(client, dest: Path, reqs: list[str]) -> None:
    """pip download the requirements with their dependencies, for the base image's Python."""
    cmd = [sys.executable, "-m", "pip", "download", "-q", "-d", str(dest), *reqs]
    pyver = _python_tag(client)
    if pyver != f"{sys.version_info[0]}{sys.version_info[1]}":
        cmd += ["--python-version", pyver, "--only-binary=:all:"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _serve(directory: Path) -> tuple[socketserver.TCPServer, str]:
    handler = lambda *a, **kw: _Quiet(*a, directory=str(directory), **kw)  # noqa: E731
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def ensure(client, log=print) -> str:
    """The tag of the dev image for the current source, building what is missing."""
    try:
        base = client.images.get(BASE)
    except Exception:  # noqa: BLE001
        raise BaseImageMissing(f"base image {BASE} is not in the local engine (no registry here to pull it)") from None
    reqs = requirements()
    torch_file = TORCH_DOCKERFILE.format(base=BASE, requirements=" ".join(f'"{r}"' for r in reqs), label=LABEL)
    torch_tag = f"{REPO}:torch-{_hash(base.id, torch_file)}"
    src = source_files()
    project_file = PROJECT_DOCKERFILE.format(torch_tag=torch_tag, label=LABEL)
    digest = _hash(project_file, *(str(p.relative_to(ROOT)) for p in src), *(p.read_bytes() for p in src))
    tag = f"{REPO}:{digest}"
    if _exists(client, tag):
        return tag
    with tempfile.TemporaryDirectory(prefix="launch-dev-") as tmp:
        work = Path(tmp)
        if not _exists(client, torch_tag):
            wheels = work / "wheels"
            _wheelhouse(client, wheels, reqs)
            ctx = work / "torch"
            ctx.mkdir()
            (ctx / "Dockerfile").write_text(torch_file)
            server, url = _serve(wheels)
            try:
                _build(client, ctx, torch_tag, {"WHEELS": url}, log)
            finally:
                server.shutdown()
                server.server_close()
        ctx = work / "project"
        for p in src:
            dest = ctx / "src" / p.relative_to(ROOT)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dest)
        (ctx / "Dockerfile").write_text(project_file)
        _build(client, ctx, tag, None, log)
    _prune(client, keep={tag, torch_tag}, log=log)
    return tag


def _prune(client, keep: set[str], log=print) -> None:
    """Remove older dev builds (other tags of REPO)."""
    for image in client.images.list(name=REPO):
        tags = [t for t in image.tags if t.startswith(REPO + ":")]
        if tags and not set(tags) & keep:
            for t in tags:
                try:
                    client.images.remove(t, noprune=False)
                    log(f"removed old dev image {t}")
                except Exception:  # noqa: BLE001 - in use by a container, or gone
                    pass


if __name__ == "__main__":  # pragma: no cover - `python -m tests.launch.devimage` builds it by hand
    import docker

    print(ensure(docker.from_env(timeout=600)))
