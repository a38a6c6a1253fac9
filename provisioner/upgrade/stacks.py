"""Where a stack to compare comes from, and the package lock it installs.

A side of `provision diff` is a stack JSON file (`provision resolve --json` output or an image's label text), an
image the local engine has (its org.provision.stack label), or resolve options written ``card=800T-A2,cann=8.5.0``
(the keys of `provision resolve`'s options, dashes or underscores). Files and labels are someone else's data: they
pass validate.stack_doc before any field is read. The lock is the one the image build installs
(provisioner/image/packages.py, or a framework set's environment in provisioner/image/frameworks.py).
"""

from __future__ import annotations

import os
import re

from provisioner.errors import ProvisionError

# The resolve options a side may name (request.Request fields users set), and their spellings.
OPTION_KEYS = ("card", "profile", "task", "framework", "cann", "torch", "torch_npu", "mindspore", "python", "arch",
               "os", "driver", "dtype", "base_image", "registry", "with")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def looks_like_options(text: str) -> bool:
    return "=" in text and not os.path.exists(text)


def parse_options(text: str, what: str) -> dict:
    """'card=800T-A2,cann=8.5.0,with=apex+deepspeed' -> resolve options (values are checked by request.build)."""
    from provisioner import validate

    validate.single_line(text, what, 1024)
    out: dict = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ProvisionError(f"{what}: {item.strip()[:40]!r} is not KEY=VALUE (keys: {', '.join(OPTION_KEYS)})")
        if key not in OPTION_KEYS:
            raise ProvisionError(f"{what}: unknown key {key[:40]!r} (keys: {', '.join(OPTION_KEYS)})")
        if key in out or (key == "with" and "extras" in out):
            raise ProvisionError(f"{what}: {key} given twice")
        if key == "with":
            out["extras"] = tuple(v for v in value.replace("+", " ").split() if v)
        else:
            out[key] = value.strip() or None
    return out


def load_file(path: str, what: str) -> dict:
    """A stack JSON file, validated (the shape run-cmd --stack reads)."""
    from provisioner import validate
    from provisioner.hostfile import read_bytes

    doc = validate.json_doc(read_bytes(path, f"{what} {path}"), f"{what} {path}")
    if isinstance(doc, dict) and isinstance(doc.get("stack"), dict):
        doc = doc["stack"]  # `provision resolve --json` output
    if not isinstance(doc, dict) or not isinstance(doc.get("cann"), dict):
        raise ProvisionError(f"{what} {path}: not a provision stack (expected `provision resolve --json` output or"
                             " the image label)")
    return _checked(validate.stack_doc(doc, f"{what} {path}"), f"{what} {path}")


def _checked(stack: dict, what: str) -> dict:
    """The fields this package reads beyond validate.stack_doc's: names and versions, or one line."""
    from provisioner import validate

    if not isinstance(stack.get("card"), dict) or not stack["card"].get("id"):
        raise ProvisionError(f"{what}: the stack names no card")
    if not stack.get("python"):
        raise ProvisionError(f"{what}: the stack names no Python")
    for key, fields in (("apex", ("ref", "setuptools")), ("torch_npu", ("released_with_cann",))):
        item = stack.get(key)
        if item is not None and not isinstance(item, dict):
            raise ProvisionError(f"{what}: {key} must be an object")
        for field in fields:
            if item and item.get(field) is not None:
                validate.single_line(item[field], f"{what}: {key}.{field}", 256)
    for key in ("extras",):
        if stack.get(key) is not None and not isinstance(stack[key], dict):
            raise ProvisionError(f"{what}: {key} must be an object")
    for name, extra in (stack.get("extras") or {}).items():
        validate.name(name, f"{what}: extras")
        if not isinstance(extra, dict):
            raise ProvisionError(f"{what}: extras.{name} must be an object")
        for field in ("set", "requirement", "release", "version"):
            if extra.get(field) is not None:
                validate.single_line(extra[field], f"{what}: extras.{name}.{field}", 256)
    return stack


def resolve_side(matrix, options: dict, defaults: dict) -> dict:
    """The stack resolve options give (no host: a diff compares stacks, not a machine)."""
    from provisioner.resolve import cached, request

    opts = {k: v for k, v in defaults.items() if v not in (None, (), [])}
    opts.update({k: v for k, v in options.items() if v not in (None, (), [])})
    profile = opts.pop("profile", None)
    return dict(cached.cached_resolve(matrix, request.build(matrix, profile=profile, **opts)))


def load_side(matrix, text: str, what: str, defaults: dict, engine=None) -> tuple[dict, str]:
    """(stack, how it was read) for one side of a diff: options, a file, or an image of the local engine."""
    if looks_like_options(text):
        opts = parse_options(text, what)
        return resolve_side(matrix, opts, defaults), "resolved from " + ",".join(
            f"{k}={v if k != 'extras' else '+'.join(v)}" for k, v in opts.items())
    if os.path.exists(text):
        return load_file(text, what), "stack file"
    from provisioner import validate
    from provisioner.image import labels

    validate.image_ref(text, what)
    return _checked(labels.read_stack(text, engine=engine), f"{what} {text}"), "image label"


def lock_of(matrix, stack: dict) -> tuple[dict[str, str], str | None, str | None]:
    """({package: version} the image installs besides the framework, where the lock is from, why none)."""
    from packaging.requirements import Requirement

    from provisioner.image import frameworks, packages

    try:
        if frameworks.set_of(stack) is not None:
            plan = frameworks.plan(matrix, stack)
            lines = [line for layer in plan.layers for line in layer.lines]
            origin = f"framework environment {plan.env['id']}"
        else:
            row = packages.select(matrix, stack)
            lines = [line for line, _ in packages.active_lines(row["lock"], stack)]
            for name in sorted(stack.get("extras") or {}):
                extra = (row.get("extras") or {}).get(name.replace("_", "-")) or (row.get("extras") or {}).get(name)
                if extra:
                    lines += [line for line, _ in packages.active_lines(extra["lock"], stack)]
            origin = f"package set {row['id']}"
    except (ProvisionError, KeyError, TypeError) as exc:
        return {}, None, str(exc) if isinstance(exc, ProvisionError) else f"its lock cannot be read ({exc!r})"
    out: dict[str, str] = {}
    for line in lines:
        if line.startswith("-"):
            continue  # an index option (--extra-index-url), not a package
        req = Requirement(line)
        pins = [s.version for s in req.specifier if s.operator in ("==", "===")]
        if pins:
            out[re.sub(r"[-_.]+", "-", req.name).lower()] = pins[0]
    return out, origin, None
