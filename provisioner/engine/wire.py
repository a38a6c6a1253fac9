"""The Docker Engine API over the local socket, without docker-py: the engine `connect` gives for unix:// addresses.

Importing docker-py (requests, urllib3) costs ~0.1 s of CPU before its first request, on the path from
`provision launch` to the container's start. Everything a launch, doctor or the device planner asks (version,
info, image and container inspect, the container list, create, start, logs, wait, stop, kill, remove) is a
plain HTTP/1.1 request with a JSON body here, over an AF_UNIX socket, one connection per request (the log,
wait and main threads never share one). The HTTP is written here too (a request line, headers, and a body read
sized, chunked or to the close): http.client would bring email and ssl, ~0.02 s more on the same path.
Build, pull, image listing and tag go to docker.py's engine, made on first use. Another DOCKER_HOST (tcp://, ssh://) gets docker.py's engine for everything.

`create_body` is docker-py's `containers.create` translation for the keywords this project passes (a unit test
compares the two); any other keyword is refused, as docker-py refuses one it does not know. Failures are the
engine errors docker.py raises for the same answers: 404 "No such image" is ImageNotFound, another 404
ContainerNotFound, any other refusal EngineError, a socket that is absent, refuses or drops EngineUnavailable.
"""

from __future__ import annotations

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


class BadAnswer(Exception):
    """The engine's answer is not the HTTP/1.1 this module reads."""


def _open(path: str, timeout: float | None) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


class Response:
    """One HTTP/1.1 answer on its own connection: the status, the headers (names lower-cased), and the body
    through read(), whether it comes sized (Content-Length), chunked, or up to the connection's close."""

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._file = sock.makefile("rb")
        words = self._line().split(None, 2)
        if len(words) < 2 or not words[0].startswith(b"HTTP/1.") or not words[1].isdigit():
            raise BadAnswer(f"not an HTTP status line: {short(b' '.join(words).decode('latin-1'))}")
        self.status = int(words[1])
        self.headers: dict[str, str] = {}
        while (line := self._line()) not in (b"\r\n", b"\n"):
            name, colon, value = line.partition(b":")
            if not colon:
                raise BadAnswer(f"not an HTTP header line: {short(line.decode('latin-1'))}")
            self.headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        self._chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self._chunk = 0  # bytes left in the current chunk
        length = self.headers.get("content-length")
        if self._chunked:
            self._left: int | None = None
        elif self.status in (204, 304) or 100 <= self.status < 200:
            self._left = 0
        elif length is not None:
            if not length.isdigit():
                raise BadAnswer(f"Content-Length {short(length)!r} is not a number")
            self._left = int(length)
        else:
            self._left = None  # the body runs to the close
        self._done = self._left == 0

    def _line(self) -> bytes:
        line = self._file.readline(65537)
        if len(line) > 65536:
            raise BadAnswer("a line of the answer is longer than 64 KiB")
        if not line.endswith(b"\n"):
            raise ConnectionResetError("the engine closed the connection before its answer ended")
        return line

    def _exact(self, n: int) -> bytes:
        data = self._file.read(n)
        if len(data) < n:
            raise ConnectionResetError("the engine closed the connection before its answer ended")
        return data

    def read(self, n: int = -1) -> bytes:
        """n bytes of the body (fewer only at its end); the whole rest for n < 0."""
        out = bytearray()
        while not self._done and (n < 0 or len(out) < n):
            want = n - len(out) if n >= 0 else 1 << 20
            if self._chunked:
                if self._chunk == 0:
                    size = self._line().split(b";", 1)[0].strip()
                    try:
                        self._chunk = int(size, 16)
                    except ValueError:
                        raise BadAnswer(f"not a chunk size: {short(size.decode('latin-1'))}") from None
                    if self._chunk == 0:
                        while self._line() not in (b"\r\n", b"\n"):  # trailers
                            pass
                        self._done = True
                        break
                take = min(want, self._chunk)
                out += self._exact(take)
                self._chunk -= take
                if self._chunk == 0:
                    self._exact(2)  # the CRLF after the chunk's data
            elif self._left is not None:
                take = min(want, self._left)
                out += self._exact(take)
                self._left -= take
                self._done = self._left == 0
            else:
                data = self._file.read(want) if n >= 0 else self._file.read()
                out += data
                self._done = not data or n < 0
        return bytes(out)

    def close(self) -> None:
        self._file.close()
        self._sock.close()


def request(path: str, timeout: float | None, method: str, target: str, body: bytes | None = None) -> Response:
    """Send one request on a new connection to the socket at `path`; the answer's status and headers are read."""
    head = [f"{method} {target} HTTP/1.1", "Host: localhost", "User-Agent: provision", "Connection: close"]
    if body is not None:
        head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    sock = _open(path, timeout)
    try:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (body or b""))
        return Response(sock)
    except BaseException:
        sock.close()
        raise


class Api:
    """Requests to one engine socket: JSON in, JSON out, engine errors for every failure."""

    def __init__(self, path: str, timeout: float, where: str):
        self.path, self.timeout, self.where = path, timeout, where
        self.prefix = ""  # /v<api version> once negotiated

    def call(self, method: str, url: str, what: str, *, query: dict | None = None, body: dict | None = None,
             timeout: float | None | object = _DEFAULT) -> Response:
        """The open response (status < 400); the caller reads and closes it."""
        target = self.prefix + url + (f"?{urlencode(query)}" if query else "")
        data = None if body is None else json.dumps(body).encode()
        resp = None
        try:
            resp = request(self.path, self.timeout if timeout is _DEFAULT else timeout, method, target,  # type: ignore[arg-type]
                           data)
            if resp.status >= 400:
                raw = resp.read()
                resp.close()
                raise _refusal(resp.status, raw, what)
        except (OSError, BadAnswer) as exc:
            if resp is not None:
                resp.close()
            raise self._broken(exc, what) from None
        return resp

    def json(self, method: str, url: str, what: str, **kw) -> dict | list | None:
        resp = self.call(method, url, what, **kw)
        try:
            raw = resp.read()
        except (OSError, BadAnswer) as exc:
            raise self._broken(exc, what) from None
        finally:
            resp.close()
        try:
            return json.loads(raw) if raw.strip() else None
        except ValueError:
            raise EngineError(f"{what}: the engine's answer is not JSON ({short(raw.decode('utf-8', 'replace'))})") from None

    def frames(self, url: str, what: str, query: dict, timeout: float | None) -> Iterator[bytes]:
        """A multiplexed log stream (non-TTY container) as its payloads: stdout and stderr as they come."""
        resp = self.call("GET", url, what, query=query, timeout=timeout)
        try:
            while True:
                head = resp.read(8)
                if len(head) < 8:
                    return
                size = int.from_bytes(head[4:8], "big")
                data = resp.read(size) if size else b""
                if data:
                    yield data
        except (OSError, BadAnswer) as exc:
            raise self._broken(exc, what) from None
        finally:
            resp.close()

    def _broken(self, exc: BaseException, what: str) -> EngineError:
        if isinstance(exc, EngineError):
            return exc
        if isinstance(exc, TimeoutError):
            return EngineError(f"{what}: the engine did not answer in time")
        if isinstance(exc, BadAnswer):
            return EngineError(f"{what}: the engine's answer is not HTTP/1.1 ({exc})")
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
        self._info: EngineInfo | None = None  # runtimes and CDI directories do not change under a command
        self._sdk: Engine | None = None

    def sdk(self) -> Engine:
        """docker.py's engine at the same address, for what this module does not speak (build, pull, listing)."""
        if self._sdk is None:
            from provisioner.engine import docker

            self._sdk = docker.connect(self.api.timeout)
        return self._sdk

    def info(self) -> EngineInfo:
        if self._info is None:
            info = self.api.json("GET", "/info", "info")
            self._info = EngineInfo.from_payloads(self._version, info if isinstance(info, dict) else {})
        return self._info

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
