"""The Docker Engine API over the local socket, without docker-py: the engine `connect` gives for unix:// addresses.

Importing docker-py (requests, urllib3) costs ~0.1 s of CPU before its first request, on the path from
`provision launch` to the container's start. Everything a launch, doctor or the device planner asks (version,
info, image and container inspect, the container list, create, start, logs, wait, stop, kill, remove) is a
plain HTTP/1.1 request with a JSON body here, http.client over an AF_UNIX socket, one connection per request
(the log, wait and main threads never share one). Build, pull, image listing and tag go to docker.py's engine,
made on first use. Another DOCKER_HOST (tcp://, ssh://) gets docker.py's engine for everything.

`create_body` is docker-py's `containers.create` translation for the keywords this project passes (a unit test
compares the two); any other keyword is refused, as docker-py refuses one it does not know. Failures are the
engine errors docker.py raises for the same answers: 404 "No such image" is ImageNotFound, another 404
ContainerNotFound, any other refusal EngineError, a socket that is absent, refuses or drops EngineUnavailable.
"""

from __future__ import annotations

import http.client
import json
import re
import shlex
import socket
from collections.abc import Iterator
from typing import IO
from urllib.parse import quote, urlencode

from provisioner.engine.base import Container, Engine, inspect_all
from provisioner.engine.errors import ContainerNotFound, EngineError, EngineUnavailable, ImageNotFound, short
from provisioner.engine.types import BuildEvent, ContainerInfo, EngineInfo, ImageInfo

UNIX = "unix://"
_DEFAULT = object()  # "the engine's timeout" (None is "no timeout")
_API_VERSION = re.compile(r"^\d+\.\d+$")
# docker-py's answers for "this image is not there" (errors.create_api_error_from_http_exception).
_NO_IMAGE = ("No such image", "not found: does not exist or no pull access", "repository does not exist")
_BYTE_UNITS = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def socket_path(where: str) -> str | None:
    """The socket file of a unix:// address; None for any other kind (docker.py's engine serves those)."""
    return where[len(UNIX):] or None if where.startswith(UNIX) else None


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Api:
    """Requests to one engine socket: JSON in, JSON out, engine errors for every failure."""

    def __init__(self, path: str, timeout: float, where: str):
        self.path, self.timeout, self.where = path, timeout, where
        self.prefix = ""  # /v<api version> once negotiated

    def call(self, method: str, url: str, what: str, *, query: dict | None = None, body: dict | None = None,
             timeout: float | None | object = _DEFAULT) -> tuple[http.client.HTTPResponse, _UnixConnection]:
        """The open response (status < 400) and its connection; the caller reads and closes both."""
        conn = _UnixConnection(self.path, self.timeout if timeout is _DEFAULT else timeout)  # type: ignore[arg-type]
        target = self.prefix + url + (f"?{urlencode(query)}" if query else "")
        headers = {"User-Agent": "provision"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, target, body=data, headers=headers)
            resp = conn.getresponse()
            if resp.status >= 400:
                raw = resp.read()
                conn.close()
                raise _refusal(resp.status, raw, what)
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise self._broken(exc, what) from None
        return resp, conn

    def json(self, method: str, url: str, what: str, **kw) -> dict | list | None:
        resp, conn = self.call(method, url, what, **kw)
        try:
            raw = resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise self._broken(exc, what) from None
        finally:
            conn.close()
        try:
            return json.loads(raw) if raw.strip() else None
        except ValueError:
            raise EngineError(f"{what}: the engine's answer is not JSON ({short(raw.decode('utf-8', 'replace'))})") from None

    def frames(self, url: str, what: str, query: dict, timeout: float | None) -> Iterator[bytes]:
        """A multiplexed log stream (non-TTY container) as its payloads: stdout and stderr as they come."""
        resp, conn = self.call("GET", url, what, query=query, timeout=timeout)
        try:
            while True:
                head = resp.read(8)
                if len(head) < 8:
                    return
                size = int.from_bytes(head[4:8], "big")
                data = resp.read(size) if size else b""
                if data:
                    yield data
        except (OSError, http.client.HTTPException) as exc:
            raise self._broken(exc, what) from None
        finally:
            conn.close()

    def _broken(self, exc: BaseException, what: str) -> EngineError:
        if isinstance(exc, EngineError):
            return exc
        if isinstance(exc, TimeoutError):
            return EngineError(f"{what}: the engine did not answer in time")
        from provisioner.engine.docker import unreachable_reason

        return EngineUnavailable(unreachable_reason(exc), self.where)


def _refusal(status: int, raw: bytes, what: str) -> EngineError:
    text = raw.decode("utf-8", "replace")
    try:
        message = str(json.loads(text).get("message") or text)
    except (ValueError, AttributeError):
        message = text
    line = f"{what}: {short(message or f'HTTP {status}')}"
    if status == 404:
        return ImageNotFound(line) if any(p in message for p in _NO_IMAGE) else ContainerNotFound(line)
    return EngineError(line)


def connect(where: str, timeout: float) -> WireEngine:
    """The engine at unix:// address `where`, its API version negotiated (GET /version), or EngineUnavailable."""
    path = socket_path(where)
    if path is None:
        raise EngineUnavailable(f"not a unix:// address: {short(where)}", where)
    api = Api(path, timeout, where)
    version = api.json("GET", "/version", "version")
    found = str((version or {}).get("ApiVersion") or "") if isinstance(version, dict) else ""
    if not _API_VERSION.match(found):
        raise EngineUnavailable(f"the engine at {short(where)} gave no API version", where)
    api.prefix = f"/v{found}"
    return WireEngine(api, version if isinstance(version, dict) else {})


# -- create ---------------------------------------------------------------------------------


def create_body(kwargs: dict) -> tuple[dict, str | None]:
    """(the POST /containers/create body, the name) from docker-py `containers.create` keywords."""
    kw = dict(kwargs)
    name = kw.pop("name", None)
    config: dict = {"Image": kw.pop("image"), "Tty": False, "OpenStdin": False, "StdinOnce": False,
                    "AttachStdin": False, "AttachStdout": True, "AttachStderr": True, "NetworkDisabled": False}
    host: dict = {"NetworkMode": kw.pop("network_mode", None) or "default"}
    for key, field in (("command", "Cmd"), ("entrypoint", "Entrypoint")):
        value = kw.pop(key, None)
        if value is not None:
            config[field] = shlex.split(value) if isinstance(value, str) else list(value)
    env = kw.pop("environment", None)
    if env is not None:
        config["Env"] = [k if v is None else f"{k}={v}" for k, v in env.items()] if isinstance(env, dict) else list(env)
    for key, field in (("user", "User"), ("working_dir", "WorkingDir"), ("labels", "Labels")):
        if kw.get(key) is not None:
            config[field] = kw.pop(key)
        kw.pop(key, None)
    volumes = kw.pop("volumes", None)
    if volumes:
        host["Binds"] = [f"{src}:{v['bind']}:{v.get('mode', 'rw')}" for src, v in volumes.items()]
        config["Volumes"] = {v["bind"]: {} for v in volumes.values()}
    devices = kw.pop("devices", None)
    if devices:
        host["Devices"] = [_device(d) for d in devices]
    if kw.get("group_add"):
        host["GroupAdd"] = [str(g) for g in kw["group_add"]]
    kw.pop("group_add", None)
    for key, field in (("ipc_mode", "IpcMode"), ("init", "Init"), ("runtime", "Runtime")):
        if kw.get(key) is not None:
            host[field] = kw[key]
        kw.pop(key, None)
    shm = kw.pop("shm_size", None)
    if shm is not None:
        host["ShmSize"] = _bytes(shm)
    if kw:
        raise EngineError(f"create {name or config['Image']}: unexpected keyword(s) {', '.join(sorted(kw))}")
    config["HostConfig"] = host
    return config, name


def _device(spec: str) -> dict:
    parts = spec.split(":")
    return {"PathOnHost": parts[0], "PathInContainer": parts[1] if len(parts) > 1 else parts[0],
            "CgroupPermissions": parts[2] if len(parts) > 2 else "rwm"}


def _bytes(value: int | str) -> int:
    """docker-py's parse_bytes: an int, or digits with b/k/m/g (a trailing b after a unit is dropped)."""
    if isinstance(value, int):
        return value
    text = value[:-1] if len(value) > 1 and value[-2:-1].isalpha() and value[-1] in "bB" else value
    unit = text[-1:].lower()
    digits, unit = (text, "b") if unit.isdigit() else (text[:-1], unit)
    try:
        return int(float(digits) * _BYTE_UNITS[unit])
    except (KeyError, ValueError):
        raise EngineError(f"shm_size {value!r}: digits with b, k, m or g") from None


# -- the engine -----------------------------------------------------------------------------


class WireContainer(Container):
    def __init__(self, engine: WireEngine, cid: str, name: str):
        self._api = engine.api
        self.id, self.name = cid, name
        self._url = f"/containers/{cid}"

    def _what(self, action: str) -> str:
        return f"container {self.name} {action}"

    def start(self) -> None:
        self._api.json("POST", self._url + "/start", self._what("start"))

    def logs(self) -> Iterator[bytes]:
        yield from self._api.frames(self._url + "/logs", self._what("logs"),
                                    {"stdout": 1, "stderr": 1, "follow": 1, "timestamps": 0, "tail": "all"}, None)

    def output(self, stdout: bool = True, stderr: bool = True) -> bytes:
        query = {"stdout": int(stdout), "stderr": int(stderr), "follow": 0, "timestamps": 0, "tail": "all"}
        return b"".join(self._api.frames(self._url + "/logs", self._what("logs"), query, self._api.timeout))

    def wait(self, timeout: float | None = None) -> int:
        status = self._api.json("POST", self._url + "/wait", self._what("wait"), timeout=timeout)
        return int((status or {}).get("StatusCode", 1)) if isinstance(status, dict) else 1

    def stop(self, timeout: int) -> None:
        self._api.json("POST", self._url + "/stop", self._what("stop"), query={"t": timeout},
                       timeout=self._api.timeout + timeout)

    def kill(self) -> None:
        self._api.json("POST", self._url + "/kill", self._what("kill"))

    def inspect(self) -> ContainerInfo:
        return _container_info(self._api.json("GET", self._url + "/json", self._what("inspect")), self._what("inspect"))

    def remove(self, force: bool = True) -> None:
        self._api.json("DELETE", self._url, self._what("remove"), query={"v": 0, "link": 0, "force": int(force)})


class WireEngine(Engine):
    def __init__(self, api: Api, version: dict):
        self.api = api
        self.where = api.where
        self._version = version  # the negotiation's answer: info() needs no second round trip
        self._sdk: Engine | None = None

    def sdk(self) -> Engine:
        """docker.py's engine at the same address, for what this module does not speak (build, pull, listing)."""
        if self._sdk is None:
            from provisioner.engine import docker

            self._sdk = docker.connect(self.api.timeout)
        return self._sdk

    def info(self) -> EngineInfo:
        info = self.api.json("GET", "/info", "info")
        return EngineInfo.from_payloads(self._version, info if isinstance(info, dict) else {})

    def image(self, ref: str) -> ImageInfo:
        what = f"image {ref}"
        payload = self.api.json("GET", f"/images/{quote(ref, safe='/:')}/json", what)
        try:
            return ImageInfo.from_inspect(ref, payload)  # type: ignore[arg-type]
        except Exception as exc:  # noqa: BLE001 - a payload that does not read is the engine's error
            raise EngineError(f"{what}: {short(exc)}") from None

    def images(self, repository: str) -> list[ImageInfo]:
        return self.sdk().images(repository)

    def pull(self, ref: str, *, platform: str | None = None) -> None:
        self.sdk().pull(ref, platform=platform)

    def build(self, context: IO[bytes], tag: str, *, nocache: bool = False,
              network: str | None = None, platform: str | None = None) -> Iterator[BuildEvent]:
        return self.sdk().build(context, tag, nocache=nocache, network=network, platform=platform)

    def tag(self, image: str, ref: str) -> None:
        self.sdk().tag(image, ref)

    def containers(self, *, all: bool = False, label: str | None = None) -> list[ContainerInfo]:
        filters: dict = {} if all else {"status": ["running"]}
        if label:
            filters["label"] = [label]
        query: dict[str, int | str] = {"limit": -1, "all": int(all), "size": 0, "trunc_cmd": 0}
        if filters:
            query["filters"] = json.dumps(filters)
        listed = self.api.json("GET", "/containers/json", "list containers", query=query)
        ids = [str(c.get("Id")) for c in listed or [] if isinstance(c, dict)] if isinstance(listed, list) else []

        def one(cid: str) -> ContainerInfo:
            what = f"inspect container {cid[:12]}"
            return _container_info(self.api.json("GET", f"/containers/{cid}/json", what), what)

        return [info for info in inspect_all(ids, one) if info is not None]

    def create(self, kwargs: dict) -> Container:
        body, name = create_body(kwargs)
        what = f"create {name or body['Image']}"
        made = self.api.json("POST", "/containers/create", what, query={"name": name} if name else None, body=body)
        cid = str((made or {}).get("Id") or "") if isinstance(made, dict) else ""
        if not cid:
            raise EngineError(f"{what}: the engine returned no container id")
        return WireContainer(self, cid, name or cid[:12])

    def close(self) -> None:
        if self._sdk is not None:
            self._sdk.close()
            self._sdk = None


def _container_info(payload, what: str) -> ContainerInfo:
    try:
        return ContainerInfo.from_inspect(payload)
    except Exception as exc:  # noqa: BLE001 - a payload that does not read is the engine's error
        raise EngineError(f"{what}: {short(exc)}") from None
