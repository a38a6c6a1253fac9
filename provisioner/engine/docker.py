"""The Docker engine through docker-py: the only module of this package that imports the Docker SDK.

docker-py is imported when an engine is connected, never at start-up. Every SDK and transport exception
becomes an engine error (errors.py) here, by its class, with one short message; callers never see SDK
objects.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import IO

from provisioner.engine.base import Container, Engine, inspect_all
from provisioner.engine.errors import (
    ContainerNotFound,
    EngineError,
    EngineUnavailable,
    ImageNotFound,
    PullFailed,
    RegistryUnreachable,
    short,
)
from provisioner.engine.types import BuildEvent, ContainerInfo, EngineInfo, ImageInfo

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
# Causes worth naming alone when the engine cannot be reached (the SDK wraps them in long chains).
_CAUSES = ("No such file or directory", "Connection refused", "Permission denied")
# How the daemon words "the registry did not answer" (it gives no code for it: a 500 with Go's net/http text).
_REGISTRY_SILENT = ("no such host", "dial tcp", "i/o timeout", "connection refused", "tls handshake", "x509:",
                    "network is unreachable", "client.timeout", "context deadline exceeded", "server misbehaving",
                    "connection reset by peer")
# ... and "the registry has no such image" (a 404 from Docker Hub, a 500 "manifest unknown" from others).
_REGISTRY_HAS_NOT = ("manifest unknown", "not found", "repository does not exist", "name unknown")


def where() -> str:
    return os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET


def unreachable_reason(exc: BaseException) -> str:
    """Why no engine answered, in a few words."""
    text = " ".join(str(exc).split())
    return next((cause for cause in _CAUSES if cause in text), None) or short(text)


def connect(timeout: float, ping: bool = True) -> DockerEngine:
    """The engine at DOCKER_HOST (or the default socket) that answers, or EngineUnavailable."""
    try:
        import docker
    except ImportError:
        raise EngineUnavailable("the docker Python SDK is not installed (pip install docker)", where()) from None
    try:
        # from_env negotiates the API version (GET /version): that round trip already proves the engine
        # answers, so a separate ping would only cost another one (`ping` is kept for the callers' intent).
        client = docker.from_env(timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - docker-py and requests raise many kinds for "no engine"
        raise EngineUnavailable(unreachable_reason(exc), where()) from None
    return DockerEngine(client)


def _translate(exc: BaseException, what: str) -> EngineError:
    """An SDK exception as the engine error it means (by class, never by name)."""
    from docker import errors as sdk
    from requests.exceptions import ConnectionError as RequestsConnectionError

    if isinstance(exc, EngineError):
        return exc
    if isinstance(exc, sdk.ImageNotFound):
        return ImageNotFound(f"{what}: {short(getattr(exc, 'explanation', None) or exc)}")
    if isinstance(exc, sdk.NotFound):
        return ContainerNotFound(f"{what}: {short(getattr(exc, 'explanation', None) or exc)}")
    if isinstance(exc, (RequestsConnectionError, ConnectionError)):
        return EngineUnavailable(unreachable_reason(exc), where())
    if isinstance(exc, sdk.APIError):
        return EngineError(f"{what}: {short(exc.explanation or exc)}")
    return EngineError(f"{what}: {short(exc)}")


def _pull_error(ref: str, text: str) -> EngineError:
    """A failed pull as RegistryUnreachable (the registry never answered), ImageNotFound (it answered that it
    has no such image) or PullFailed (it refused otherwise: access denied, rate limit, server error)."""
    low = text.lower()
    if any(p in low for p in _REGISTRY_SILENT):
        return RegistryUnreachable(ref, short(text, 200))
    if any(p in low for p in _REGISTRY_HAS_NOT):
        return ImageNotFound(f"pull {ref}: {short(text, 200)}")
    return PullFailed(ref, short(text, 200))


class DockerContainer(Container):
    def __init__(self, engine: DockerEngine, sdk_container):
        self._engine = engine
        self._c = sdk_container
        self.id = sdk_container.id
        self.name = sdk_container.name

    def _call(self, what: str, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except Exception as exc:  # noqa: BLE001 - translated by class in _translate
            raise _translate(exc, f"container {self.name} {what}") from None

    def start(self) -> None:
        self._call("start", self._c.start)

    def logs(self) -> Iterator[bytes]:
        stream = self._call("logs", self._c.logs, stream=True, follow=True)
        try:
            yield from stream
        except Exception as exc:  # noqa: BLE001 - the container was removed under the stream
            raise _translate(exc, f"container {self.name} logs") from None

    def output(self, stdout: bool = True, stderr: bool = True) -> bytes:
        return self._call("logs", self._c.logs, stdout=stdout, stderr=stderr)

    def wait(self, timeout: float | None = None) -> int:
        kw = {"timeout": timeout} if timeout is not None else {}
        status = self._call("wait", self._c.wait, **kw)
        return int(status.get("StatusCode", 1))

    def stop(self, timeout: int) -> None:
        self._call("stop", self._c.stop, timeout=timeout)

    def kill(self) -> None:
        self._call("kill", self._c.kill)

    def inspect(self) -> ContainerInfo:
        return ContainerInfo.from_inspect(self._call("inspect", self._engine.api.inspect_container, self.id))

    def remove(self, force: bool = True) -> None:
        self._call("remove", self._c.remove, force=force)


class DockerEngine(Engine):
    def __init__(self, client):
        self._client = client
        self.api = client.api
        self.where = where()

    def _call(self, what: str, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except Exception as exc:  # noqa: BLE001 - translated by class in _translate
            raise _translate(exc, what) from None

    def info(self) -> EngineInfo:
        return EngineInfo.from_payloads(self._call("version", self._client.version),
                                        self._call("info", self._client.info))

    def image(self, ref: str) -> ImageInfo:
        return ImageInfo.from_inspect(ref, self._call(f"image {ref}", self.api.inspect_image, ref))

    def images(self, repository: str) -> list[ImageInfo]:
        from docker.errors import NotFound

        out = []
        for summary in self._call(f"list images {repository}", self.api.images, name=repository):
            tags = [t for t in summary.get("RepoTags") or () if t.rsplit(":", 1)[0] == repository]
            try:
                payload = self.api.inspect_image(summary["Id"])
            except NotFound:  # removed between list and inspect
                continue
            except Exception as exc:  # noqa: BLE001 - translated by class: an engine that fails is not "no image"
                raise _translate(exc, f"image {summary.get('Id', '?')}") from None
            try:
                out.append(ImageInfo.from_inspect(tags[0] if tags else summary["Id"], payload))
            except Exception as exc:  # noqa: BLE001 - a payload that does not read is the engine's error
                raise _translate(exc, f"image {summary.get('Id', '?')}") from None
        return out

    def pull(self, ref: str, *, platform: str | None = None) -> None:
        # The low-level stream, not images.pull(): that one drops the errors the stream carries.
        from docker.utils import parse_repository_tag

        repo, tag = parse_repository_tag(ref)
        try:
            extra = {"platform": platform} if platform else {}
            for message in self.api.pull(repo, tag=tag or "latest", stream=True, decode=True, **extra):
                if isinstance(message, dict) and message.get("error"):
                    raise _pull_error(ref, str(message["error"]))
        except EngineError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated by class, then by the daemon's wording
            from docker import errors as sdk

            if isinstance(exc, sdk.APIError) and not isinstance(exc, sdk.NotFound):
                raise _pull_error(ref, str(exc.explanation or exc)) from None
            raise _translate(exc, f"pull {ref}") from None

    def build(self, context: IO[bytes], tag: str, *, nocache: bool = False,
              network: str | None = None, platform: str | None = None) -> Iterator[BuildEvent]:
        extra = {"platform": platform} if platform else {}
        stream = self._call("build", self.api.build, fileobj=context, custom_context=True, tag=tag, rm=True,
                            forcerm=True, pull=False, nocache=nocache, network_mode=network, decode=True, **extra)
        try:
            for message in stream:
                yield BuildEvent.from_message(message)
        except Exception as exc:  # noqa: BLE001 - the engine went away mid-build
            raise EngineError(f"the build stream broke: {unreachable_reason(exc)}") from None

    def tag(self, image: str, ref: str) -> None:
        repo, _, tag = ref.rpartition(":") if ":" in ref.split("/")[-1] else (ref, "", "latest")
        self._call(f"tag {ref}", self.api.tag, image, repo, tag)

    def containers(self, *, all: bool = False, label: str | None = None) -> list[ContainerInfo]:
        filters: dict = {} if all else {"status": "running"}
        if label:
            filters["label"] = label
        ids = [summary["Id"] for summary in self._call("list containers", self.api.containers, all=all,
                                                          filters=filters)]
        return [info for info in self._inspect_all(ids) if info is not None]

    def _inspect_all(self, ids: list[str]) -> list[ContainerInfo | None]:
        from docker.errors import NotFound

        def inspect(cid: str) -> ContainerInfo:
            try:
                return ContainerInfo.from_inspect(self.api.inspect_container(cid))
            except NotFound:  # it went away between list and inspect
                raise ContainerNotFound(cid) from None
            except Exception as exc:  # noqa: BLE001 - translated by class
                raise _translate(exc, f"inspect container {cid[:12]}") from None

        return inspect_all(ids, inspect)

    def create(self, kwargs: dict) -> Container:
        name = kwargs.get("name") or kwargs.get("image")
        return DockerContainer(self, self._call(f"create {name}", self._client.containers.create, **kwargs))

    def close(self) -> None:
        try:
            self._client.close()
        except Exception:  # noqa: BLE001 - closing a dead connection
            pass
