"""The one way this package reaches the Docker engine.

docker-py is imported here, lazily, so no command pays for it at start-up;
every failure to connect (SDK missing, socket absent, refused, a dead daemon)
becomes EngineUnavailable with one short reason that each caller puts in its
own message.
"""

from __future__ import annotations


class EngineUnavailable(Exception):
    """No engine answered; str(exc) is a one-line reason."""


def short(exc: BaseException, limit: int = 160) -> str:
    """An exception as one line of at most `limit` characters."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def connect(timeout: float, ping: bool = True):
    """A docker-py client of an engine that answers (`ping`), or EngineUnavailable."""
    try:
        import docker
    except ImportError:
        raise EngineUnavailable("the docker Python SDK is not installed (pip install docker)") from None
    try:
        client = docker.from_env(timeout=timeout)
        if ping:
            client.ping()
    except Exception as exc:  # noqa: BLE001 - docker-py and requests raise many kinds for "no engine"
        raise EngineUnavailable(short(exc)) from None
    return client
