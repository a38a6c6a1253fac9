"""An in-memory engine for unit tests, the demo and benchmarks: no daemon, no root.

Modelled on docker-py's tests/unit/fake_api.py, it fakes at the seam (the Engine interface) and keeps what
a real engine would report as real payloads: a container's inspect document is built from the same
`containers.create` keyword arguments by docker-py's own translation (the body `docker create` sends), with
the defaults the daemon fills in, and read back through the same `ContainerInfo.from_inspect` the Docker
engine uses. Images carry Config.Labels / Config.Env as `docker image inspect` shows them; a build reads the
Dockerfile of the context, prints the classic builder's `Step N/M` lines and keeps its LABEL and ENV values.

What a container does when started is a *program*: a function of a `Process` (command, environment, an
output writer, the stop signal) returning the exit code. Without one, a container prints nothing and exits 0.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import os
import shlex
import tarfile
import threading
from collections.abc import Callable, Iterator
from typing import IO

from provisioner.engine.base import Container, Engine
from provisioner.engine.errors import (
    ContainerNotFound,
    EngineError,
    EngineUnavailable,
    ImageNotFound,
    RegistryUnreachable,
    registry_of,
)
from provisioner.engine.types import BuildEvent, ContainerInfo, EngineInfo, ImageInfo, env_dict

_ids = itertools.count(1)


def _digest(*parts: object) -> str:
    return hashlib.sha256(":".join(map(str, (*parts, next(_ids)))).encode()).hexdigest()


class Process:
    """What a program sees of its container: the command, the environment, where to print, the stop signal."""

    def __init__(self, container: FakeContainer):
        self.container = container
        self.command: list[str] = list(container.payload["Config"]["Cmd"] or [])
        self.env: dict[str, str] = env_dict(container.payload["Config"]["Env"])
        self.stopping = threading.Event()  # SIGTERM arrived (docker stop)

    def print(self, text: str, stream: str = "stdout") -> None:
        self.container._emit((text if text.endswith("\n") else text + "\n").encode(), stream)

    def wait_for_stop(self, timeout: float | None = None) -> bool:
        """Block like a long-running job until docker stop (True) or `timeout` (False)."""
        return self.stopping.wait(timeout)


Program = Callable[[Process], int]


class FakeContainer(Container):
    def __init__(self, engine: FakeEngine, payload: dict, program: Program | None):
        self._engine = engine
        self.payload = payload
        self.id = payload["Id"]
        self.name = payload["Name"].lstrip("/")
        self._program = program
        self._chunks: list[tuple[bytes, str]] = []
        self._changed = threading.Condition()
        self._process: Process | None = None
        self._thread: threading.Thread | None = None
        self.removed = False

    # -- state
    @property
    def _state(self) -> dict:
        return self.payload["State"]

    def _emit(self, data: bytes, stream: str) -> None:
        with self._changed:
            self._chunks.append((data, stream))
            self._changed.notify_all()

    def _finish(self, code: int) -> None:
        with self._changed:
            if self._state["Status"] == "running":
                self._state.update(Status="exited", Running=False, ExitCode=code)
            self._changed.notify_all()

    def _check(self, what: str) -> None:
        self._engine._check()
        if self.removed:
            raise ContainerNotFound(f"container {self.name} {what}: No such container: {self.id[:12]}")

    # -- Container
    def start(self) -> None:
        self._check("start")
        if self._state["Status"] != "created":
            return
        for dev in self.payload["HostConfig"].get("Devices") or []:
            if not os.path.exists(dev["PathOnHost"]):
                raise EngineError(f"container {self.name} start: error gathering device information while adding"
                                  f" custom device \"{dev['PathOnHost']}\": no such file or directory")
        self._state.update(Status="running", Running=True)
        self._process = Process(self)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self._process is not None
        try:
            code = self._program(self._process) if self._program else 0
        except Exception as exc:  # noqa: BLE001 - a crashing program is a crashing container
            self._process.print(f"{type(exc).__name__}: {exc}", "stderr")
            code = 1
        self._finish(int(code))

    def logs(self) -> Iterator[bytes]:
        sent = 0
        while True:
            with self._changed:
                while sent == len(self._chunks) and self._state["Status"] == "running" and not self.removed:
                    self._changed.wait(0.5)
                chunks = self._chunks[sent:]
                done = self._state["Status"] != "running" or self.removed
            for data, _ in chunks:
                yield data
            sent += len(chunks)
            if done and sent == len(self._chunks):
                return

    def output(self, stdout: bool = True, stderr: bool = True) -> bytes:
        with self._changed:
            return b"".join(d for d, s in self._chunks if (s == "stdout" and stdout) or (s == "stderr" and stderr))

    def wait(self, timeout: float | None = None) -> int:
        self._check("wait")
        with self._changed:
            if not self._changed.wait_for(lambda: self._state["Status"] != "running" or self.removed, timeout):
                raise EngineError(f"container {self.name} wait: timed out after {timeout} s")
        if self.removed and self._state["Status"] == "running":
            raise ContainerNotFound(f"container {self.name} wait: removed while running")
        return int(self._state["ExitCode"])

    def stop(self, timeout: int) -> None:
        self._check("stop")
        if self._state["Status"] != "running" or self._process is None:
            return
        self._process.stopping.set()
        with self._changed:
            stopped = self._changed.wait_for(lambda: self._state["Status"] != "running", timeout)
        if not stopped:
            self._finish(137)  # SIGKILL after the grace period

    def kill(self) -> None:
        self._check("kill")
        if self._state["Status"] != "running":
            raise EngineError(f"container {self.name} kill: container {self.id[:12]} is not running")
        if self._process is not None:
            self._process.stopping.set()
        self._finish(137)

    def inspect(self) -> ContainerInfo:
        self._check("inspect")
        return ContainerInfo.from_inspect(self.payload)

    def remove(self, force: bool = True) -> None:
        self._check("remove")
        if self._state["Status"] == "running":
            if not force:
                raise EngineError(f"container {self.name} remove: cannot remove a running container; stop it first")
            self.kill()
        self.removed = True
        self._engine._containers.pop(self.id, None)
        with self._changed:
            self._changed.notify_all()


class FakeEngine(Engine):
    """An engine in memory. `add_image` what the test needs; `programs` say what containers do."""

    def __init__(self, runtimes: tuple[str, ...] = ("runc",), default_runtime: str = "runc",
                 version: str = "fake"):
        from docker.constants import DEFAULT_DOCKER_API_VERSION

        self.where = "fake://engine"
        self._version = {"Version": version, "ApiVersion": DEFAULT_DOCKER_API_VERSION, "Os": "linux"}
        self._info = {"Runtimes": {r: {"path": r} for r in runtimes}, "DefaultRuntime": default_runtime,
                      "CDISpecDirs": ["/etc/cdi", "/var/run/cdi"]}
        self._images: dict[str, dict] = {}  # reference or id -> inspect payload
        self._containers: dict[str, FakeContainer] = {}
        self.programs: dict[str, Program] = {}  # image reference -> what its containers run
        self.pullable: dict[str, dict] = {}  # reference -> labels a pull would bring
        self.unreachable_registries: set[str] = set()  # registry hosts whose names do not resolve
        self.build_failures: dict[str, list[str]] = {}  # instruction substring -> its log before failing
        self.builds: list[dict] = []  # each build's tag and options (nocache, network, platform)
        self.unavailable: str | None = None  # set: every call raises EngineUnavailable with this reason
        # Container names / image references whose inspect after the list fails with this error, as Docker's
        # does: ContainerNotFound / ImageNotFound (it went away in between) is skipped, anything else is raised.
        self.inspect_errors: dict[str, EngineError] = {}
        self.closed = False
        self.calls: list[str] = []

    def _check(self) -> None:
        if self.unavailable is not None:
            raise EngineUnavailable(self.unavailable, self.where)

    # -- images
    def add_image(self, ref: str, labels: dict[str, str] | None = None, env: dict[str, str] | None = None,
                  program: Program | None = None, arch: str | None = None) -> ImageInfo:
        """An image as `docker image inspect` shows it (and what its containers run); `arch` is the engine's
        name for its architecture (amd64, arm64), recorded where given."""
        image_id = f"sha256:{_digest(ref)}"
        from datetime import datetime, timezone

        payload = {"Id": image_id, "RepoTags": [ref], "Created": datetime.now(timezone.utc).isoformat(),
                   "Config": {"Labels": dict(labels or {}), "Env": [f"{k}={v}" for k, v in (env or {}).items()]}}
        if arch:
            payload["Architecture"] = arch
        self._images[ref] = self._images[image_id] = payload
        if program is not None:
            self.programs[ref] = program
        return ImageInfo.from_inspect(ref, payload)

    def info(self) -> EngineInfo:
        self._check()
        self.calls.append("info")
        return EngineInfo.from_payloads(self._version, self._info)

    def image(self, ref: str) -> ImageInfo:
        self._check()
        self.calls.append(f"image {ref}")
        payload = self._images.get(ref) or self._images.get(f"{ref}:latest")
        if payload is None:
            raise ImageNotFound(f"image {ref}: No such image: {ref}")
        return ImageInfo.from_inspect(ref, payload)

    def images(self, repository: str) -> list[ImageInfo]:
        self._check()
        self.calls.append(f"images {repository}")
        seen: dict[str, ImageInfo] = {}
        for ref, payload in self._images.items():
            if ref.rsplit(":", 1)[0] == repository and payload["Id"] not in seen:
                failure = self.inspect_errors.get(ref)
                if isinstance(failure, ImageNotFound):
                    continue
                if failure is not None:
                    raise failure
                seen[payload["Id"]] = ImageInfo.from_inspect(ref, payload)
        return list(seen.values())

    def pull(self, ref: str, *, platform: str | None = None) -> None:
        self._check()
        self.calls.append(f"pull {ref}")
        registry = registry_of(ref)
        if registry in self.unreachable_registries:  # the daemon's words for a name that does not resolve
            host = "registry-1.docker.io" if registry == "docker.io" else registry
            raise RegistryUnreachable(ref, f'Get "https://{host}/v2/": dial tcp: lookup {host} on 127.0.0.53:53:'
                                           " no such host")
        if ref not in self.pullable:
            raise ImageNotFound(f"pull {ref}: pull access denied for {ref.rsplit(':', 1)[0]}, repository does not"
                                " exist or may require 'docker login'")
        self.add_image(ref, self.pullable[ref], arch=platform.split("/")[1] if platform else None)

    def tag(self, image: str, ref: str) -> None:
        self._check()
        payload = self._images.get(image)
        if payload is None:
            raise ImageNotFound(f"tag {ref}: No such image: {image}")
        payload["RepoTags"].append(ref)
        self._images[ref] = payload

    def build(self, context: IO[bytes], tag: str, *, nocache: bool = False,
              network: str | None = None, platform: str | None = None) -> Iterator[BuildEvent]:
        self._check()
        self.calls.append(f"build {tag}")
        self.builds.append({"tag": tag, "nocache": nocache, "network": network, "platform": platform})
        with tarfile.open(fileobj=context, mode="r:*") as tar:
            member = tar.extractfile("Dockerfile") if "Dockerfile" in tar.getnames() else None
            if member is None:
                yield BuildEvent("error", "Cannot locate specified Dockerfile: Dockerfile")
                return
            dockerfile = member.read().decode()
        steps = instructions(dockerfile)
        labels: dict[str, str] = {}
        env: dict[str, str] = {}
        stages: set[str] = set()
        arch = None  # as the classic builder does: the image is of its base's architecture, whatever `platform` says
        for n, (word, rest) in enumerate(steps, 1):
            yield BuildEvent("stream", f"Step {n}/{len(steps)} : {word} {rest}\n")
            failing = next((lines for key, lines in self.build_failures.items() if key in f"{word} {rest}"), None)
            if failing is not None:
                for line in failing:
                    yield BuildEvent("stream", line + "\n")
                yield BuildEvent("error", f"The command '/bin/sh -c {rest}' returned a non-zero code: 1")
                return
            if word == "FROM":
                base, *alias = rest.split()
                if base not in stages and base not in self._images:
                    yield BuildEvent("error", f"pull access denied for {base}, repository does not exist")
                    return
                if base not in stages:  # a later stage FROM an earlier one keeps that one's architecture
                    arch = (self._images.get(base) or {}).get("Architecture")
                stages.update(alias[1:2])
                labels, env = {}, {}  # each stage starts from its base (the fake's bases carry none)
            elif word in ("LABEL", "ENV"):
                (labels if word == "LABEL" else env).update(_pairs(rest))
            yield BuildEvent("stream", f" ---> {_digest(n)[:12]}\n")
        info = self.add_image(tag, labels, env, arch=arch)
        yield BuildEvent("stream", f"Successfully built {info.id[7:19]}\n")
        yield BuildEvent("aux", image_id=info.id)

    # -- containers
    def create(self, kwargs: dict) -> Container:
        self._check()
        kw = dict(kwargs)
        ref = kw.get("image")
        if not ref or (ref not in self._images and f"{ref}:latest" not in self._images):
            raise ImageNotFound(f"create {kw.get('name') or ref}: No such image: {ref}")
        name = kw.get("name") or f"fake_{next(_ids)}"
        if any(c.name == name for c in self._containers.values()):
            raise EngineError(f"create {name}: Conflict. The container name \"/{name}\" is already in use")
        payload = inspect_payload(kw, self._images.get(ref) or self._images[f"{ref}:latest"], name)
        self.calls.append(f"create {name}")
        container = FakeContainer(self, payload, self.programs.get(ref))
        self._containers[container.id] = container
        return container

    def containers(self, *, all: bool = False, label: str | None = None) -> list[ContainerInfo]:
        self._check()
        out = []
        for c in list(self._containers.values()):
            info = ContainerInfo.from_inspect(c.payload)
            if not all and not info.running:
                continue
            if label:
                key, sep, value = label.partition("=")
                if key not in info.labels or (sep and info.labels[key] != value):
                    continue
            failure = self.inspect_errors.get(c.name)  # listed, then inspected
            if isinstance(failure, ContainerNotFound):
                continue
            if failure is not None:
                raise failure
            out.append(info)
        return out

    def container(self, name: str) -> FakeContainer:
        """A container by name (tests look inside)."""
        hit = next((c for c in self._containers.values() if c.name == name), None)
        if hit is None:
            raise ContainerNotFound(f"No such container: {name}")
        return hit

    def close(self) -> None:
        self.closed = True


def inspect_payload(kwargs: dict, image: dict, name: str) -> dict:
    """The `docker container inspect` document of a container created from docker-py `containers.create` kwargs.

    docker-py's own translation gives the create body; the daemon's defaults and the image's Env fill in.
    """
    from docker.constants import DEFAULT_DOCKER_API_VERSION
    from docker.models.containers import _create_container_args
    from docker.types import ContainerConfig

    args = _create_container_args({**kwargs, "version": DEFAULT_DOCKER_API_VERSION})
    image_ref = args.pop("image")
    command = args.pop("command", None)
    args.pop("name", None)
    body = ContainerConfig(DEFAULT_DOCKER_API_VERSION, image_ref, command, **args)
    host = dict(body.get("HostConfig") or {})
    host.setdefault("Runtime", "runc")
    host.setdefault("NetworkMode", "default")
    host.setdefault("Privileged", False)
    host.setdefault("Devices", [])
    host.setdefault("ShmSize", 64 << 20)
    # The daemon keeps the container's variables and appends the image's it does not set.
    given = list(body.get("Env") or [])
    keys = {item.partition("=")[0] for item in given}
    env = given + [item for item in (image.get("Config") or {}).get("Env") or [] if item.partition("=")[0] not in keys]
    labels = {**((image.get("Config") or {}).get("Labels") or {}), **(body.get("Labels") or {})}
    cmd = body.get("Cmd")
    return {
        "Id": _digest(name),
        "Name": f"/{name}",
        "Image": image["Id"],
        "Config": {"Image": image_ref, "Cmd": [cmd] if isinstance(cmd, str) else cmd, "Env": env,
                   "Labels": labels, "User": body.get("User") or "", "WorkingDir": body.get("WorkingDir") or ""},
        "HostConfig": host,
        "State": {"Status": "created", "Running": False, "ExitCode": 0},
    }


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, rest) of each Dockerfile instruction, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in dockerfile.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = (pending + stripped).strip()
        pending = ""
        if text:
            word, _, rest = text.partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
    return out


def _pairs(text: str) -> dict[str, str]:
    """LABEL / ENV arguments (`k=v k2="v 2"`) as a dict."""
    out = {}
    for token in shlex.split(text):
        key, sep, value = token.partition("=")
        if sep:
            out[key] = value.replace("\\$", "$")
    return out


def tar_of(files: dict[str, bytes]) -> IO[bytes]:
    """A build context tar holding `files` (tests build from it)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf
