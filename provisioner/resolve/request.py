"""What the user asks `provision resolve` for, from options and/or a profile."""

from __future__ import annotations

from provisioner import validate
from provisioner.arch import machine as machine_arch
from provisioner.arch import normalize as normalize_arch
from provisioner.errors import ProvisionError

EXTRAS = ("apex", "mindspeed-llm", "deepspeed", "mindformers")
EXTRA_ALIASES = {"mindspeed": "mindspeed-llm", "mindspeed-rl": "mindspeed-llm", "megatron": "mindspeed-llm",
                 "mindspore-transformers": "mindformers"}


class Request:
    """An immutable set of constraints (a plain class: dataclasses would cost
    `provision resolve` several milliseconds of imports at every start)."""

    FIELDS = ("card", "task", "framework", "cann", "torch", "torch_npu", "mindspore", "python", "arch", "os",
              "driver", "dtype", "extras", "pins", "base_image", "registry", "profile", "host_os", "arch_from_host")
    _DEFAULTS = {"extras": (), "pins": (), "arch_from_host": False}
    __slots__ = FIELDS

    # The fields (annotations only: the slots hold the values).
    card: str
    task: str | None
    framework: str | None
    cann: str | None
    torch: str | None
    torch_npu: str | None
    mindspore: str | None
    python: str | None
    arch: str
    os: str | None
    driver: str | None
    dtype: str | None
    extras: tuple[str, ...]
    pins: tuple[tuple[str, str], ...]
    base_image: str | None
    registry: str | None
    profile: str | None
    host_os: str | None
    arch_from_host: bool

    def __init__(self, **values):
        unknown = set(values) - set(self.FIELDS)
        if unknown:
            raise TypeError(f"unknown request fields: {', '.join(sorted(unknown))}")
        for name in self.FIELDS:
            object.__setattr__(self, name, values.get(name, self._DEFAULTS.get(name)))

    def __setattr__(self, name, value):
        raise AttributeError("Request is immutable; use replace()")

    def replace(self, **changes) -> Request:
        return Request(**{**self.as_dict(), **changes})

    def as_dict(self) -> dict:
        """Every field, as given (the cache key)."""
        return {name: getattr(self, name) for name in self.FIELDS}

    def _key(self) -> tuple:
        # arch_from_host only changes an explanation, not the request itself.
        return tuple(getattr(self, n) for n in self.FIELDS if n != "arch_from_host")

    def __eq__(self, other) -> bool:
        return isinstance(other, Request) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Request({', '.join(f'{k}={v!r}' for k, v in self.as_dict().items() if v not in (None, (), False))})"

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.as_dict().items() if v not in (None, (), False)}
        out.pop("arch_from_host", None)
        if self.extras:
            out["extras"] = list(self.extras)
        if self.pins:
            out["pins"] = dict(self.pins)
        return out


def parse_extras(items) -> tuple[str, ...]:
    out: list[str] = []
    for item in items or ():
        for name in str(item).replace(" ", ",").split(","):
            name = name.strip().lower()
            if not name:
                continue
            name = EXTRA_ALIASES.get(name, name)
            if name not in EXTRAS:
                raise ProvisionError(f"unknown --with {name!r} (known: {', '.join(EXTRAS)})")
            if name not in out:
                out.append(name)
    return tuple(out)


# The version fields and the flag each comes from; they must parse (one line, exit 2) before the solver sees them.
VERSION_FIELDS = ("cann", "torch", "torch_npu", "mindspore", "python", "driver")
TEXT_FIELDS = ("card", "os", "host_os", "task", "framework", "dtype", "registry")


def _check(values: dict, profile: str | None) -> None:
    """Every value of the request against its grammar (options and a profile's constraints alike)."""
    from provisioner.versions import VersionError, parse

    def where(key: str) -> str:
        flag = f"--{key.replace('_', '-')}"
        return f"{flag} (or profile {profile}'s {key})" if profile else flag

    for key in VERSION_FIELDS:
        value = values.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise ProvisionError(f"{where(key)}: expected a version string, got {value!r}")
        validate.version_text(value, where(key))
        try:
            parse(value)
        except VersionError:
            raise ProvisionError(f"{where(key)}: not a version: {value!r}") from None
    for key in TEXT_FIELDS:
        if values.get(key) is not None:
            validate.single_line(values[key], where(key), 128)
    if values.get("base_image") is not None:
        validate.image_ref(values["base_image"], where("base_image"))
    for key, value in values.get("pins") or ():
        validate.single_line(key, "pins", 128)
        validate.version_text(value, f"pins: {key}")


def build(matrix, profile: str | None = None, **options) -> Request:
    """Combine a profile's constraints with command-line options (options win)."""
    base: dict = {}
    if profile:
        prof = matrix.profile(profile)
        cons = dict(prof["constraints"])
        base = {k: v for k, v in cons.items() if k not in ("with", "pins")}
        base["extras"] = parse_extras(cons.get("with", ()))
        base["pins"] = tuple(sorted((cons.get("pins") or {}).items()))
        base["profile"] = prof["name"]
    known = set(Request.FIELDS)
    for key, value in options.items():
        if key not in known:
            raise ProvisionError(f"unknown option {key!r}")
        if value in (None, (), []):
            continue
        if key == "extras":
            value = tuple(dict.fromkeys([*base.get("extras", ()), *parse_extras(value)]))
        base[key] = value
    if base.get("arch"):
        arch = normalize_arch(base["arch"])
        if arch is None:
            raise ProvisionError(f"unknown --arch {base['arch']!r} (x86_64 or aarch64)")
        base["arch"] = arch
    else:
        base["arch"] = machine_arch() or "x86_64"
        base["arch_from_host"] = True
    if not base.get("card"):
        raise ProvisionError("--card is required (or a --profile that names one)")
    _check(base, profile)
    req = Request(**base)
    if req.framework == "mindspore":
        bad = [f"--{n.replace('_', '-')}" for n in ("torch", "torch_npu") if getattr(req, n)]
        bad += [f"--with {e}" for e in req.extras if e in ("apex", "mindspeed-llm", "deepspeed")]
        if bad:
            raise ProvisionError(f"{', '.join(bad)} do not apply to --framework mindspore")
    if "mindformers" in req.extras and req.framework == "pytorch":
        raise ProvisionError("--with mindformers (MindSpore Transformers) needs --framework mindspore")
    if (req.mindspore or "mindformers" in req.extras) and req.framework is None:
        req = req.replace(framework="mindspore")
    return req
