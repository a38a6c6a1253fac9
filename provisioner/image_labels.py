"""Read the Stack an image built by `provision build` carries in its labels.

Label contract (shared with the image build and launch): `org.provision.stack`
holds the Stack as compact JSON, `org.provision.stack.id` its id. The docker
SDK is imported here only, and a missing engine is one clear error.
"""

from __future__ import annotations

import json

from provisioner.errors import ProvisionError

STACK_LABEL = "org.provision.stack"
STACK_ID_LABEL = "org.provision.stack.id"


def stack_from_labels(labels: dict | None, ref: str = "the image") -> dict:
    """The Stack dict from an image's labels; ProvisionError when it has none or it is not JSON."""
    text = (labels or {}).get(STACK_LABEL)
    if not text:
        raise ProvisionError(f"{ref} has no {STACK_LABEL} label: it was not built by `provision build`")
    try:
        stack = json.loads(text)
    except ValueError as exc:
        raise ProvisionError(f"{ref}: label {STACK_LABEL} is not valid JSON ({exc})") from None
    if not isinstance(stack, dict):
        raise ProvisionError(f"{ref}: label {STACK_LABEL} is not a JSON object")
    return stack


def read_stack(ref: str, timeout: float = 5.0) -> dict:
    """Ask the local Docker engine for image `ref`'s labels and return its Stack."""
    try:
        import docker
        from docker.errors import DockerException, ImageNotFound
    except ImportError:
        raise ProvisionError("--image needs the docker Python SDK (pip install docker)") from None
    try:
        client = docker.from_env(timeout=timeout)
    except DockerException as exc:
        raise ProvisionError(f"--image {ref}: Docker engine not reachable ({_short(exc)})") from None
    try:
        image = client.images.get(ref)
    except ImageNotFound:
        raise ProvisionError(f"--image {ref}: no such image in the local engine (build it or docker load it)") from None
    except DockerException as exc:
        raise ProvisionError(f"--image {ref}: Docker engine not reachable ({_short(exc)})") from None
    finally:
        client.close()
    return stack_from_labels(image.labels, ref)


def _short(exc: Exception) -> str:
    text = " ".join(str(exc).split())
    return text[:160] or type(exc).__name__
