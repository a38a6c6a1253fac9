"""Read the Stack an image built by `provision build` carries in its labels.

Label contract (shared with the image build and launch): `org.provision.stack`
holds the Stack as compact JSON, `org.provision.stack.id` its id. The engine
is reached through provisioner.engine, and a missing engine is one clear error.
"""

from __future__ import annotations

import json

from provisioner.errors import ProvisionError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.engine.base import Engine

STACK_LABEL = "org.provision.stack"
STACK_ID_LABEL = "org.provision.stack.id"
# A framework image (recipe mindspeed-llm or mindspore) also carries: the framework set (a llm_bundles id of
# matrices/mindspeed.yaml, or mindformers-<version>), its kind (mindspeed-llm, mindspeed-rl, mindformers), the
# locked environment (matrices/frameworks.yaml id) and its checkouts as JSON
# {name: {commit, ref, from, path}}: `path` is where the image keeps a tree it runs from (null: built and dropped).
FRAMEWORK_SET_LABEL = "org.provision.framework.set"
FRAMEWORK_KIND_LABEL = "org.provision.framework.kind"
FRAMEWORK_ENV_LABEL = "org.provision.framework.env"
CHECKOUTS_LABEL = "org.provision.framework.checkouts"


def framework_from_labels(labels: dict | None) -> dict | None:
    """{set, kind, env, checkouts} of a framework image, or None for an image that carries no framework set."""
    labels = labels or {}
    if FRAMEWORK_SET_LABEL not in labels:
        return None
    try:
        checkouts = json.loads(labels.get(CHECKOUTS_LABEL) or "{}")
    except ValueError:
        checkouts = {}
    return {"set": labels[FRAMEWORK_SET_LABEL], "kind": labels.get(FRAMEWORK_KIND_LABEL),
            "env": labels.get(FRAMEWORK_ENV_LABEL), "checkouts": checkouts}


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


def label_stack(labels: dict | None, ref: str) -> tuple[dict | None, str | None]:
    """Like stack_from_labels, but tolerant: (stack, None), or (None, why the driver check is skipped)."""
    raw = (labels or {}).get(STACK_LABEL)
    if not raw:
        return None, f"image {ref} has no {STACK_LABEL} label; driver check skipped"
    try:
        stack = json.loads(raw)
    except ValueError:
        stack = None
    if not isinstance(stack, dict):
        return None, f"image {ref}: {STACK_LABEL} label is not JSON; driver check skipped"
    return stack, None


def read_stack(ref: str, timeout: float = 5.0, engine: Engine | None = None) -> dict:
    """Ask the engine (`engine`, else the local one) for image `ref`'s labels and return its Stack."""
    from provisioner import engine as engines
    from provisioner.engine.errors import EngineError, ImageNotFound, short

    try:
        eng = engine if engine is not None else engines.connect(timeout, ping=False)
    except EngineError as exc:
        raise ProvisionError(f"--image {ref}: Docker engine not reachable ({exc})") from None
    try:
        labels = eng.image(ref).labels
    except ImageNotFound:
        raise ProvisionError(f"--image {ref}: no such image in the local engine (build it or docker load it)") from None
    except EngineError as exc:
        raise ProvisionError(f"--image {ref}: Docker engine not reachable ({short(exc)})") from None
    finally:
        if engine is None:
            eng.close()
    return stack_from_labels(labels, ref)
