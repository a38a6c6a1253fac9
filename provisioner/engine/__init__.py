"""The one owner of the container engine: every other module reaches Docker through this package.

    base.py    the Engine / Container interface the rest of the package uses
    types.py   typed results: ImageInfo, ContainerInfo, EngineInfo, BuildEvent (read from the engine's JSON)
    errors.py  EngineError, EngineUnavailable, ImageNotFound, ContainerNotFound, BuildFailed; `short`
    docker.py  the Docker engine over docker-py (the only importer of the SDK, lazily)
    fake.py    an in-memory engine with real-shaped payloads, for unit tests, the demo and benchmarks

`connect` gives the engine at DOCKER_HOST (or the default socket); functions that talk to an engine take
one as an argument, so a caller can hand them the fake.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.engine.base import Engine


def connect(timeout: float = 30.0, ping: bool = True) -> Engine:
    """The Docker engine that answers at DOCKER_HOST (or the default socket), or EngineUnavailable."""
    from provisioner.engine import docker

    return docker.connect(timeout, ping)
