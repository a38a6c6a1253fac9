"""The one owner of the container engine: every other module reaches Docker through this package.

    base.py    the Engine / Container interface the rest of the package uses
    types.py   typed results: ImageInfo, ContainerInfo, EngineInfo, BuildEvent (read from the engine's JSON)
    errors.py  EngineError, EngineUnavailable, ImageNotFound, PullFailed, RegistryUnreachable, ContainerNotFound,
               BuildFailed; `short`
    wire.py    the Docker engine at a unix:// address: the Engine API over the socket itself (http.client), and
               docker.py's engine for build, pull and image listing (what `connect` gives for unix://)
    docker.py  the Docker engine over docker-py (the only importer of the SDK, lazily): any other DOCKER_HOST
    fake.py    an in-memory engine with real-shaped payloads, for unit tests, the demo and benchmarks

`connect` gives the engine at DOCKER_HOST (or the default socket); functions that talk to an engine take
one as an argument, so a caller can hand them the fake. `connect_early` starts that connection in the
background for a command that will need it first thing (`provision launch`).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.engine.base import Engine


DEFAULT_TIMEOUT = 30.0
_early: dict = {}  # the attempt connect_early() started: "key", "thread", "result" (its own dict)


def connect(timeout: float = DEFAULT_TIMEOUT, ping: bool = True) -> Engine:
    """The Docker engine that answers at DOCKER_HOST (or the default socket), or EngineUnavailable.

    The first call after connect_early() with the same timeout and DOCKER_HOST takes that connection (waiting
    for it if needed); any other call drops it.
    """
    import os

    early = dict(_early)
    _early.clear()
    if early and early["key"] == (timeout, os.environ.get("DOCKER_HOST")):
        early["thread"].join()
        result = early["result"]
        if "error" in result:
            raise result["error"]
        return result["engine"]
    return _connect(timeout, ping)


def _connect(timeout: float, ping: bool = True) -> Engine:
    from provisioner.engine import docker

    where = docker.where()
    if where.startswith("unix://"):
        from provisioner.engine import wire

        return wire.connect(where, timeout)
    return docker.connect(timeout, ping)


def connect_early(timeout: float = DEFAULT_TIMEOUT) -> None:
    """Start connecting in the background: the engine's imports and first round trips (the API version; on the
    socket engine also its info, which it keeps) then overlap the command's own start-up (click, the matrix,
    planning).
    The next connect() with the same timeout takes the connection; nothing else changes."""
    import os
    import threading

    result: dict = {}  # this attempt's own: a dropped attempt that ends late writes only here

    def work() -> None:
        try:
            result["engine"] = _connect(timeout)
        except BaseException as exc:  # noqa: BLE001 - handed to connect(), which raises it in the caller
            result["error"] = exc
            return
        from provisioner.engine import wire

        if isinstance(result["engine"], wire.WireEngine):
            try:  # the engine's info (runtimes, for the device plan) is asked next: ask it here, it is kept
                result["engine"].info()
            except Exception:  # noqa: BLE001 - asked again when needed, and its error told then
                pass

    thread = threading.Thread(target=work, name="engine-connect", daemon=True)
    _early.clear()
    _early.update(key=(timeout, os.environ.get("DOCKER_HOST")), thread=thread, result=result)
    thread.start()
