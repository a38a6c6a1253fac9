"""Read the Stack an image built by `provision build` carries in its labels.

Label contract (shared with the image build and launch): `org.provision.stack`
holds the Stack as compact JSON, `org.provision.stack.id` its id. The engine
is reached through provisioner.engine, and a missing engine is one clear error.
"""

from __future__ import annotations

from provisioner import validate
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
# An image built with --with apex: the Ascend Apex commit it compiled, the ref it was read from, the repository.
APEX_LABEL = "org.provision.apex"
# Every image this project builds carries provisioner, and with it the module that starts torchrun with a
# quicker log tail (provisioner/launch/teerun.py): the label says so, and launch uses that module only then.
LAUNCHER_LABEL = "org.provision.launcher"
LAUNCHER_MODULE = "provisioner.launch.teerun"


def framework_from_labels(labels: dict | None) -> dict | None:
    """{set, kind, env, checkouts, notes} of a framework image, or None for an image that carries no framework set.

    Labels come from whoever built the image: set, kind and env must be plain names, the checkouts label a
    bounded JSON object of {name: {commit, ref, from, path}} with text (or null) values. A label that is not is
    left out (None, or checkouts {}) and `notes` says which and why; never a traceback."""
    labels = labels if isinstance(labels, dict) else {}
    if FRAMEWORK_SET_LABEL not in labels:
        return None
    notes: list[str] = []
    out: dict = {"notes": notes}
    for key, label in (("set", FRAMEWORK_SET_LABEL), ("kind", FRAMEWORK_KIND_LABEL), ("env", FRAMEWORK_ENV_LABEL)):
        value = labels.get(label)
        try:
            out[key] = None if value is None else validate.name(value, f"label {label}")
        except validate.Invalid as exc:
            out[key] = None
            notes.append(f"{exc}; not used")
    try:
        out["checkouts"] = _checkouts(labels.get(CHECKOUTS_LABEL), f"label {CHECKOUTS_LABEL}")
    except validate.Invalid as exc:
        out["checkouts"] = {}
        notes.append(f"{exc}; the image's checkouts are not used")
    return {"set": out["set"], "kind": out["kind"], "env": out["env"], "checkouts": out["checkouts"], "notes": notes}


_CHECKOUT_KEYS = ("commit", "ref", "from", "path")


def _checkouts(raw: object, what: str) -> dict:
    """The checkouts label as {name: {commit, ref, from, path}}: a JSON object of objects with text or null."""
    if raw is None or raw == "":
        return {}
    if not isinstance(raw, str):
        raise validate.Invalid(f"{what}: not text")
    doc = validate.json_doc(raw, what)
    if not isinstance(doc, dict):
        raise validate.Invalid(f"{what}: not a JSON object of checkouts")
    for name, entry in doc.items():
        validate.name(name, f"{what}: checkout name")
        if not isinstance(entry, dict):
            raise validate.Invalid(f"{what}: {name} is not an object")
        for key, value in entry.items():
            if key not in _CHECKOUT_KEYS:
                raise validate.Invalid(f"{what}: {name}: unknown key {key[:40]!r}")
            if value is not None:
                validate.single_line(value, f"{what}: {name}.{key}", 1024)
    return doc


def stack_from_labels(labels: dict | None, ref: str = "the image") -> dict:
    """The Stack dict from an image's labels; ProvisionError when it has none or it is not JSON."""
    text = (labels or {}).get(STACK_LABEL)
    if not text:
        raise ProvisionError(f"{ref} has no {STACK_LABEL} label: it was not built by `provision build`")
    # Labels come from whoever built the image: parsed bounded, every field code reads checked.
    return validate.stack_doc(validate.json_doc(text, f"{ref}: label {STACK_LABEL}"), f"{ref}: label {STACK_LABEL}")


def label_stack(labels: dict | None, ref: str) -> tuple[dict | None, str | None]:
    """Like stack_from_labels, but tolerant: (stack, None), or (None, why the driver check is skipped)."""
    raw = (labels or {}).get(STACK_LABEL)
    if not raw:
        return None, f"image {ref} has no {STACK_LABEL} label; driver check skipped"
    if not isinstance(raw, str):
        return None, f"image {ref}: {STACK_LABEL} label is not text; driver check skipped"
    try:
        return stack_from_labels(labels, ref), None
    except validate.Invalid as exc:
        return None, f"{exc}; driver check skipped"


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
