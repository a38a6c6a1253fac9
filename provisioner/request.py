"""What the user asks `provision resolve` for, from options and/or a profile."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field, fields, replace

from provisioner.errors import ProvisionError

EXTRAS = ("apex", "mindspeed-llm", "deepspeed")
EXTRA_ALIASES = {"mindspeed": "mindspeed-llm", "mindspeed-rl": "mindspeed-llm", "megatron": "mindspeed-llm"}
ARCH_ALIASES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}


@dataclass(frozen=True)
class Request:
    card: str | None = None
    task: str | None = None
    framework: str | None = None
    cann: str | None = None
    torch: str | None = None
    torch_npu: str | None = None
    mindspore: str | None = None
    python: str | None = None
    arch: str | None = None
    os: str | None = None
    driver: str | None = None
    dtype: str | None = None
    extras: tuple[str, ...] = ()
    pins: tuple[tuple[str, str], ...] = ()
    base_image: str | None = None
    registry: str | None = None
    profile: str | None = None
    host_os: str | None = None
    arch_from_host: bool = field(default=False, compare=False)

    def to_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if v not in (None, (), False)}
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


def host_arch() -> str | None:
    return ARCH_ALIASES.get(os.uname().machine.lower())


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
    known = {f.name for f in fields(Request)}
    for key, value in options.items():
        if key not in known:
            raise ProvisionError(f"unknown option {key!r}")
        if value in (None, (), []):
            continue
        if key == "extras":
            value = tuple(dict.fromkeys([*base.get("extras", ()), *parse_extras(value)]))
        base[key] = value
    if base.get("arch"):
        arch = ARCH_ALIASES.get(str(base["arch"]).lower())
        if arch is None:
            raise ProvisionError(f"unknown --arch {base['arch']!r} (x86_64 or aarch64)")
        base["arch"] = arch
    else:
        base["arch"] = host_arch() or "x86_64"
        base["arch_from_host"] = True
    if not base.get("card"):
        raise ProvisionError("--card is required (or a --profile that names one)")
    req = Request(**base)
    if req.framework == "mindspore":
        bad = [f"--{n.replace('_', '-')}" for n in ("torch", "torch_npu") if getattr(req, n)]
        bad += [f"--with {e}" for e in req.extras if e in ("apex", "mindspeed-llm", "deepspeed")]
        if bad:
            raise ProvisionError(f"{', '.join(bad)} do not apply to --framework mindspore")
    if req.mindspore and req.framework is None:
        req = replace(req, framework="mindspore")
    return req
