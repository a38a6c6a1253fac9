"""The engine interface: what this package asks of a container engine, and nothing more.

`Engine` is implemented by the Docker engine (docker.py, over docker-py) and by the in-memory fake
(fake.py). Every answer is a typed result (types.py) and every failure an engine error (errors.py), so no
caller sees an SDK object or matches an SDK exception. Containers are created from the docker-py
`containers.create` keyword arguments that `devices.runline.docker_kwargs` renders from a device plan: the
same plain, JSON-able dict `provision run-cmd --json` prints.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import IO

from provisioner.engine.errors import ContainerNotFound
from provisioner.engine.types import BuildEvent, ContainerInfo, EngineInfo, ImageInfo


class Container(ABC):
    """A created container: start it, follow its output, wait for it, stop, kill and remove it."""

    id: str
    name: str

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def logs(self) -> Iterator[bytes]:
        """stdout and stderr as they come, until the container exits (chunks, not lines)."""

    @abstractmethod
    def output(self, stdout: bool = True, stderr: bool = True) -> bytes:
        """What the container printed so far (does not follow)."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> int:
        """Block until the container exits; its exit code."""

    @abstractmethod
    def stop(self, timeout: int) -> None:
        """SIGTERM to its init, SIGKILL after `timeout` seconds (docker stop)."""

    @abstractmethod
    def kill(self) -> None: ...

    @abstractmethod
    def inspect(self) -> ContainerInfo: ...

    @abstractmethod
    def remove(self, force: bool = True) -> None: ...


class Engine(ABC):
    """One connection to a container engine."""

    #: the address it answers at (DOCKER_HOST or the default socket), for messages
    where: str = ""

    @abstractmethod
    def info(self) -> EngineInfo: ...

    @abstractmethod
    def image(self, ref: str) -> ImageInfo:
        """The local image `ref`; ImageNotFound when the engine does not have it."""

    @abstractmethod
    def images(self, repository: str) -> list[ImageInfo]:
        """The local images of `repository` (every tag), inspected; `ref` of each is its first tag there."""

    @abstractmethod
    def pull(self, ref: str, *, platform: str | None = None) -> None:
        """Pull `ref` (for `platform`, e.g. linux/arm64, where given): ImageNotFound when its registry answers
        that it has no such image, RegistryUnreachable when the registry does not answer (name, connection,
        TLS), PullFailed for any other refusal."""

    @abstractmethod
    def build(self, context: IO[bytes], tag: str, *, nocache: bool = False,
              network: str | None = None, platform: str | None = None) -> Iterator[BuildEvent]:
        """Build the tar `context` (Dockerfile at its top) as `tag` with the classic builder: its log stream.
        `platform` (linux/amd64, linux/arm64) is passed to the engine where given; the classic builder still
        builds on a local base image of another architecture, so callers check the base's first.

        The stream ends with an "aux" event naming the image, or an "error" event; a connection lost
        mid-build raises EngineError.
        """

    @abstractmethod
    def tag(self, image: str, ref: str) -> None:
        """Give image `image` (id or reference) the reference `ref` (repo[:tag])."""

    @abstractmethod
    def containers(self, *, all: bool = False, label: str | None = None) -> list[ContainerInfo]:
        """Running containers (every container with `all`), inspected; `label` is KEY or KEY=VALUE."""

    @abstractmethod
    def create(self, kwargs: dict) -> Container:
        """A container from docker-py `containers.create` keyword arguments (image, command, devices, ...)."""

    @abstractmethod
    def close(self) -> None: ...

    def run(self, image: str, command: list[str], *, environment: dict[str, str] | None = None,
            network: str | None = None, user: str | None = None, entrypoint: list[str] | None = None,
            timeout: float | None = None) -> tuple[int, bytes, bytes]:
        """Run `command` in a fresh container of `image` to the end: (exit code, stdout, stderr); always removed.

        `entrypoint` replaces the image's ([] runs the command without it).
        """
        kw: dict = {"image": image, "command": list(command), "environment": dict(environment or {})}
        if network:
            kw["network_mode"] = network
        if user:
            kw["user"] = user
        if entrypoint is not None:
            kw["entrypoint"] = list(entrypoint)
        container = self.create(kw)
        try:
            container.start()
            code = container.wait(timeout)
            return code, container.output(stderr=False), container.output(stdout=False)
        finally:
            container.remove(force=True)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def inspect_all(ids: list[str], inspect: Callable[[str], ContainerInfo],
                width: int = 8) -> list[ContainerInfo | None]:
    """`inspect` each of `ids` side by side (`width` at a time): on a busy host, one round trip instead of one each.

    None for a container that went away between the list and its inspect (ContainerNotFound); any other failure
    (the engine went away, refused, a payload that does not read) is raised after the batch, the first in list
    order: an engine that fails must not read as "no containers"."""
    import threading

    found: list[ContainerInfo | None] = [None] * len(ids)
    failed: list[tuple[int, BaseException]] = []

    def one(i: int) -> None:
        try:
            found[i] = inspect(ids[i])
        except ContainerNotFound:
            pass
        except Exception as exc:  # noqa: BLE001 - kept, raised after the batch
            failed.append((i, exc))

    for start in range(0, len(ids), width):
        batch = [threading.Thread(target=one, args=(i,), daemon=True)
                 for i in range(start + 1, min(start + width, len(ids)))]
        for t in batch:
            t.start()
        one(start)
        for t in batch:
            t.join()
        if failed:
            raise min(failed, key=lambda f: f[0])[1]
    return found
