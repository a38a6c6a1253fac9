"""The engine over the socket itself (engine/wire.py): the create body is docker-py's, answers become the same engine
errors as through docker-py, the multiplexed log stream is read frame by frame however the HTTP chunks cut it,
and on the real engine it does what docker.py's engine does."""

from __future__ import annotations

import json
import socketserver
import threading
import uuid
from http.server import BaseHTTPRequestHandler

import pytest

from provisioner.engine import docker as docker_engine
from provisioner.engine import wire
from provisioner.engine.errors import ContainerNotFound, EngineError, EngineUnavailable, ImageNotFound
from tests.unit.test_engine import KWARGS


def docker_py_body(kwargs: dict) -> dict:
    """What docker-py POSTs for `containers.create(**kwargs)`, without the keys it sends as null."""
    from docker.constants import DEFAULT_DOCKER_API_VERSION
    from docker.models.containers import _create_container_args
    from docker.types import ContainerConfig

    args = _create_container_args({**kwargs, "version": DEFAULT_DOCKER_API_VERSION})
    image, command = args.pop("image"), args.pop("command", None)
    args.pop("name", None)
    body = ContainerConfig(DEFAULT_DOCKER_API_VERSION, image, command, **args)
    return {k: v for k, v in body.items() if v is not None}


def plan_kwargs() -> list[dict]:
    """The keyword sets the project passes: a device plan's (devices and runtime modes), a launch's additions,
    Engine.run's, and the shm sizes a plan may carry."""
    import tempfile
    from pathlib import Path

    from provisioner.devices import plan as devices
    from provisioner.devices import runline
    from provisioner.matrix import loader
    from tests.helpers import hosts

    m = loader.load()
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        host = hosts.materialize("plan-300ta2-4", Path(tmp))
        plans = [devices.plan(m, devices.Options(card="300T-A2", devices="0-1", mode=mode, root=str(host.root),
                                                 dev_root=str(host.dev_root), engine_skipped="test"))
                 for mode in ("devices", "runtime")]
    for p in plans:
        out.append(runline.docker_kwargs(p, "img:1", ["torchrun", "--standalone", "x.py"], "job-1"))
    out.append({**out[0], "labels": {"org.provision.launch": "r1"}, "init": True, "working_dir": "/w",
                "network_mode": "host", "user": "1000:1000"})
    out.append({"image": "img:1", "command": ["true"], "environment": {}, "entrypoint": []})
    out.append({"image": "img:1", "command": "sh -c 'echo a b'", "entrypoint": "/bin/sh -c"})
    out += [{"image": "img:1", "shm_size": size} for size in ("16g", "64m", "1gb", "512k", "100", 2 << 30)]
    out.append({"image": "img:1", "environment": {"A": None, "B": "x=y"}, "devices": ["/dev/a", "/dev/b:/dev/c"]})
    return out


@pytest.mark.parametrize("kwargs", plan_kwargs(), ids=lambda kw: ",".join(sorted(kw)))
def test_create_body_is_what_docker_py_sends(kwargs):
    body, name = wire.create_body(dict(kwargs))
    assert body == docker_py_body(dict(kwargs))
    assert name == kwargs.get("name")


def test_create_refuses_a_keyword_it_does_not_speak():
    with pytest.raises(EngineError, match="unexpected keyword.*privileged"):
        wire.create_body({"image": "img:1", "privileged": True})
    with pytest.raises(EngineError, match="shm_size"):
        wire.create_body({"image": "img:1", "shm_size": "12x"})


def test_only_unix_addresses_are_spoken_here():
    assert wire.socket_path("unix:///var/run/docker.sock") == "/var/run/docker.sock"
    assert wire.socket_path("unix://relative.sock") == "relative.sock"
    assert wire.socket_path("unix://") is None
    assert wire.socket_path("tcp://10.0.0.1:2375") is None and wire.socket_path("ssh://h") is None


def test_a_dead_socket_is_engine_unavailable(tmp_path):
    where = f"unix://{tmp_path}/none.sock"
    with pytest.raises(EngineUnavailable) as err:
        wire.connect(where, 2)
    assert err.value.where == where and err.value.reason == "No such file or directory"


# -- a fake daemon at the socket: the HTTP the real one speaks ------------------------------------------------

def frame(stream: int, data: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


class Daemon(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, routes: dict):
        self.routes, self.seen = routes, []
        super().__init__(path, Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        self.server.seen.append(f"{self.command} {self.path}")
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        route = self.path.split("?", 1)[0]
        status, answer = self.server.routes.get(f"{self.command} {route}", (404, {"message": "page not found"}))
        if callable(answer):
            answer = answer(body)
        if isinstance(answer, list) and answer and isinstance(answer[0], bytes):  # chunked stream pieces
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.docker.raw-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for piece in answer:
                self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
            return
        data = json.dumps(answer).encode() if answer is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def daemon(tmp_path):
    made = {}

    def start(routes: dict) -> tuple[wire.WireEngine, Daemon]:
        routes = {"GET /version": (200, {"Version": "20.10.24", "ApiVersion": "1.41"}), **routes}
        server = Daemon(str(tmp_path / "d.sock"), routes)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        made["server"] = server
        return wire.connect(f"unix://{tmp_path}/d.sock", 5), server

    yield start
    if "server" in made:
        made["server"].shutdown()
        made["server"].server_close()


def test_log_frames_are_read_whole_however_the_chunks_cut_them(daemon):
    stream = frame(1, b"[rank0]:hello\n") + frame(2, b"warning\n") + frame(1, b"") + frame(1, b"x" * 70000)
    pieces = [stream[:3], stream[3:11], stream[11:30], stream[30:31], stream[31:]]
    cid = "c" * 64
    eng, server = daemon({"POST /v1.41/containers/create": (201, lambda body: {"Id": cid, "Warnings": []}),
                          f"GET /v1.41/containers/{cid}/logs": (200, pieces)})
    c = eng.create({"image": "img:1", "name": "job"})
    assert list(c.logs()) == [b"[rank0]:hello\n", b"warning\n", b"x" * 70000]
    assert c.output() == b"[rank0]:hello\nwarning\n" + b"x" * 70000
    assert server.seen[1] == "POST /v1.41/containers/create?name=job"
    assert server.seen[2].startswith(f"GET /v1.41/containers/{cid}/logs?stdout=1&stderr=1&follow=1")


def test_answers_become_the_engine_errors_docker_py_gives(daemon):
    eng, _ = daemon({
        "GET /v1.41/images/gone:1/json": (404, {"message": "No such image: gone:1"}),
        "POST /v1.41/containers/create": (404, {"message": "No such image: gone:1"}),
        "GET /v1.41/containers/json": (200, [{"Id": "a" * 64}, {"Id": "b" * 64}]),
        f"GET /v1.41/containers/{'a' * 64}/json": (200, {"Id": "a" * 64, "Name": "/a", "State": {"Status": "running"}}),
        f"GET /v1.41/containers/{'b' * 64}/json": (404, {"message": "No such container: b"}),
        "GET /v1.41/info": (500, {"message": "boom"}),
    })
    with pytest.raises(ImageNotFound, match="^image gone:1: No such image: gone:1$"):
        eng.image("gone:1")
    with pytest.raises(ImageNotFound, match="^create c1: No such image"):
        eng.create({"image": "gone:1", "name": "c1"})
    assert [c.name for c in eng.containers()] == ["a"]  # b went away between the list and its inspect
    with pytest.raises(EngineError, match="^info: boom$"):
        eng.info()
    c = wire.WireContainer(eng, "z" * 64, "z")
    with pytest.raises(ContainerNotFound, match="^container z inspect: page not found$"):
        c.inspect()


def test_a_daemon_that_fails_an_inspect_is_not_no_containers(daemon):
    eng, _ = daemon({
        "GET /v1.41/containers/json": (200, [{"Id": "a" * 64}, {"Id": "b" * 64}]),
        f"GET /v1.41/containers/{'a' * 64}/json": (200, {"Id": "a" * 64, "Name": "/a", "State": {"Status": "running"}}),
        f"GET /v1.41/containers/{'b' * 64}/json": (500, {"message": "the daemon is ill"}),
    })
    with pytest.raises(EngineError, match="inspect container bbbbbbbbbbbb: the daemon is ill"):
        eng.containers()


def test_an_engine_without_an_api_version_is_refused(daemon):
    with pytest.raises(EngineUnavailable, match="no API version"):
        daemon({"GET /version": (200, {"Version": "x"})})


@pytest.mark.parametrize("info", [(200, {"Runtimes": {"runc": {}, "ascend": {}}}), (500, {"message": "ill"})])
def test_the_early_connection_asks_the_info_once_and_keeps_it(daemon, monkeypatch, tmp_path, info):
    from provisioner import engine as engines

    _, server = daemon({"GET /v1.41/info": info})
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/d.sock")
    server.seen.clear()
    engines.connect_early()
    eng = engines.connect()
    assert server.seen == ["GET /version", "GET /v1.41/info"]  # both asked before the caller needed them
    if info[0] == 200:
        assert eng.info().runtimes == ("ascend", "runc") and eng.info() is eng.info()
        assert len(server.seen) == 2  # kept: no second round trip
    else:  # the early failure is not hidden: the caller's own ask is made again and fails
        with pytest.raises(EngineError, match="^info: ill$"):
            eng.info()
        assert server.seen[-1] == "GET /v1.41/info" and len(server.seen) == 3


def raw_answer(tmp_path, answer: bytes) -> tuple[str, list[bytes]]:
    """A socket that reads one request and writes `answer` byte for byte, then closes: the HTTP a daemon may send
    that http.server would not write (sized, to the close, chunk extensions, broken)."""
    import socket

    path = str(tmp_path / "raw.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    got: list[bytes] = []

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(4096)
            got.append(data)
            for i in range(0, len(answer), 7):  # in small pieces, as a slow daemon would
                conn.sendall(answer[i:i + 7])
        server.close()

    threading.Thread(target=serve, daemon=True).start()
    return path, got


@pytest.mark.parametrize("answer, body", [
    (b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"a\": 1}   ", {"a": 1}),
    (b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n[1, 2]", [1, 2]),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\n[1,\r\n2\r\n 2\r\n1\r\n]\r\n"
     b"0\r\nTrailer: t\r\n\r\n", [1, 2]),
    (b"HTTP/1.1 204 No Content\r\n\r\n", None),
])
def test_bodies_sized_to_the_close_or_chunked_are_read_whole(tmp_path, answer, body):
    path, got = raw_answer(tmp_path, answer)
    assert wire.Api(path, 5, f"unix://{path}").json("POST", "/x", "x", body={"k": "v"}) == body
    head, _, sent = got[0].partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /x HTTP/1.1" and b"Content-Length: 10" in head.split(b"\r\n")


@pytest.mark.parametrize("answer, error, match", [
    (b"SSH-2.0-OpenSSH\r\n\r\n", EngineError, "^x: the engine's answer is not HTTP/1.1 \\(not an HTTP status line"),
    (b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", EngineError, "not an HTTP header line"),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", EngineError, "not a chunk size: zz"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{\"a\"", EngineUnavailable, "closed the connection"),
    (b"HTTP/1.1 200 OK\r\nContent-Le", EngineUnavailable, "closed the connection"),
])
def test_a_broken_answer_is_an_engine_error_not_a_traceback(tmp_path, answer, error, match):
    path, _ = raw_answer(tmp_path, answer)
    with pytest.raises(error, match=match):
        wire.Api(path, 5, f"unix://{path}").json("GET", "/x", "x")


# -- the real engine ---------------------------------------------------------------------------------------

@pytest.mark.docker
def test_real_engine_through_the_socket_does_what_docker_py_does(docker_client, base_image):
    """The same create keywords through both engines: the same container (inspect fields), the same output, exit
    codes, stop and errors."""
    from provisioner import engine as engines

    assert isinstance(engines.connect(30), wire.WireEngine)
    run = uuid.uuid4().hex[:8]
    kw = {**KWARGS, "image": base_image, "volumes": {"/tmp": {"bind": "/x", "mode": "ro"}}, "shm_size": "70m",
          "command": ["sh", "-c", "echo out; echo err >&2; exit 3"], "labels": {"org.provision.test.wire": run}}
    del kw["ipc_mode"]
    fast, sdk = wire.connect(docker_engine.where(), 30), docker_engine.connect(30)
    payloads = []
    try:
        for eng in (fast, sdk):
            c = eng.create({**kw, "name": f"provision-wire-{run}-{type(eng).__name__}"})
            c.start()
            assert c.wait() == 3
            assert (c.output(stderr=False), c.output(stdout=False)) == (b"out\n", b"err\n")
            assert sorted(b"".join(c.logs()).splitlines()) == [b"err", b"out"]
            payloads.append(docker_client.api.inspect_container(c.id))
            assert c.inspect().exit_code == 3
        keys = ("Devices", "Binds", "GroupAdd", "Init", "Runtime", "NetworkMode", "ShmSize")
        assert [{k: p["HostConfig"].get(k) for k in keys} for p in payloads][0] == \
            [{k: p["HostConfig"].get(k) for k in keys} for p in payloads][1]
        for k in ("Env", "Labels", "WorkingDir", "Cmd", "Image"):
            assert payloads[0]["Config"][k] == payloads[1]["Config"][k], k
        found = fast.containers(all=True, label=f"org.provision.test.wire={run}")
        assert sorted(c.name for c in found) == sorted(c.name for c in sdk.containers(
            all=True, label=f"org.provision.test.wire={run}"))
        assert fast.info() == sdk.info()
        assert fast.image(base_image) == sdk.image(base_image)
        # a long runner: stopped (SIGTERM to its init, then SIGKILL), then removed; then it is gone
        c = fast.create({"image": base_image, "command": ["sleep", "600"], "init": True,
                         "name": f"provision-wire-{run}-sleep", "labels": {"org.provision.test.wire": run}})
        c.start()
        assert c.inspect().running
        c.stop(timeout=1)
        assert not c.inspect().running
        c.remove(force=True)
        with pytest.raises(ContainerNotFound):
            c.inspect()
        with pytest.raises(ImageNotFound):
            fast.create({"image": f"provision-wire-none:{run}"})
    finally:
        for c in sdk.containers(all=True, label=f"org.provision.test.wire={run}"):
            docker_client.api.remove_container(c.id, force=True)
        fast.close()
        sdk.close()
