"""Build a rendered context with a container engine (provisioner.engine; Docker's classic builder).

Build-time inputs never change the rendered Dockerfile: they replace files under
build/ in the context (pip.conf, gitconfig, ca/bundle.pem, wheelhouse/), which
only the builder stages copy. So a corporate CA or a private index never shows
in a layer or in `docker history` of the image, and the same options give the
same cache keys.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.engine.errors import (
    BuildFailed,
    EngineError,
    EngineUnavailable,
    ImageNotFound,
    PullFailed,
    RegistryUnreachable,
    registry_of,
    short,
)
from provisioner.errors import ProvisionError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.engine.base import Engine

BUILD_DIR = "/opt/build"  # where the Dockerfile copies build/ (templates/Dockerfile.j2)
_PEM = b"-----BEGIN CERTIFICATE-----"

@dataclass(frozen=True)
class BuildOptions:
    wheelhouse: str | None = None
    pip_index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    trusted_ca: str | None = None
    network: str | None = None
    offline: bool = False
    no_cache: bool = False
    pull: bool = True
    tags: tuple[str, ...] = ()


@dataclass
class BuildResult:
    tag: str
    tags: list[str]
    image_id: str
    seconds: float
    steps: list[dict] = field(default_factory=list)
    base_pulled: bool = False

    def to_dict(self) -> dict:
        return {"tag": self.tag, "tags": self.tags, "image_id": self.image_id, "seconds": round(self.seconds, 2),
                "base_pulled": self.base_pulled, "steps": self.steps}


# ------------------------------------------------------------ inputs


def check_options(opts: BuildOptions) -> None:
    """Bad build inputs are refused before anything is built or written."""
    if opts.wheelhouse is not None:
        path = Path(opts.wheelhouse)
        if not path.is_dir():
            raise ProvisionError(f"--wheelhouse {opts.wheelhouse}: not a directory")
        if not os.access(path, os.R_OK | os.X_OK):
            raise ProvisionError(f"--wheelhouse {opts.wheelhouse}: not readable")
        for f in _wheelhouse_files(path):
            if not os.access(f, os.R_OK):
                raise ProvisionError(f"--wheelhouse {opts.wheelhouse}: {f.name} is not readable")
    if opts.offline and opts.wheelhouse is None:
        raise ProvisionError("--offline installs only from --wheelhouse DIR; give one")
    if opts.offline and (opts.pip_index_url or opts.extra_index_urls):
        raise ProvisionError("--offline does not go with --pip-index-url or --extra-index-url")
    for url in (opts.pip_index_url, *opts.extra_index_urls):
        if url is not None and not url.startswith(("http://", "https://", "file://")):
            raise ProvisionError(f"index URL {url!r} must start with https://, http:// or file://")
    if opts.trusted_ca is not None:
        _read_ca(opts.trusted_ca)
    if opts.network is not None and opts.network not in ("host", "bridge", "none", "default"):
        raise ProvisionError(f"--network {opts.network!r}: use host, bridge, none or default")


def _wheelhouse_files(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_file() and p.name.endswith((".whl", ".tar.gz", ".zip")))


def _read_ca(path: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ProvisionError(f"--trusted-ca {path}: cannot read: {exc.strerror or exc}") from None
    if _PEM not in data:
        raise ProvisionError(f"--trusted-ca {path}: no PEM certificate in it (expected '-----BEGIN CERTIFICATE-----')")
    return data


def add_inputs(ctx, opts: BuildOptions) -> None:
    """Fill the context's build/ directory from the options (see the module docstring)."""
    from provisioner.image import render, templates

    cert = None
    if opts.trusted_ca is not None:
        import certifi

        # pip's `cert` replaces its roots: keep the public ones and add the user's.
        bundle = Path(certifi.where()).read_bytes().rstrip(b"\n") + b"\n" + _read_ca(opts.trusted_ca)
        ctx.add("build/ca/bundle.pem", bundle)
        cert = f"{BUILD_DIR}/ca/bundle.pem"
    pip_conf = templates.render_template("build/pip.conf.j2", index_url=opts.pip_index_url,
                                         extra_index_urls=list(opts.extra_index_urls), cert=cert,
                                         offline=opts.offline)
    gitconfig = templates.render_template("build/gitconfig.j2", cert=cert)
    for rel, content in render.build_inputs(pip_conf, gitconfig).items():
        ctx.add(f"build/{rel}", content)
    if opts.wheelhouse is not None:
        for f in _wheelhouse_files(Path(opts.wheelhouse)):
            ctx.add(f"build/wheelhouse/{f.name}", f)


# ------------------------------------------------------------- engine


def connect() -> Engine:
    """The local engine, or one clear ProvisionError."""
    from provisioner import engine

    try:
        # Long, quiet build steps (compiling Apex) must not time out the stream.
        return engine.connect(3600)
    except EngineUnavailable as exc:
        raise ProvisionError(f"no Docker engine answers at {exc.where} ({exc.reason}); start dockerd or set"
                             " DOCKER_HOST") from None


def system_ca_bundle() -> str | None:
    """The CA bundle pip on this machine trusts (PIP_CERT, SSL_CERT_FILE, Debian's bundle), for --trusted-ca."""
    for candidate in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and os.path.isfile(candidate):
            return candidate
    return None


def ensure_base(engine: Engine, ref: str, pull: bool, arch: str | None = None,
                base_image: dict | None = None) -> bool:
    """The base image must be local or pullable, and of the stack's architecture `arch` (x86_64, aarch64) where the
    engine records one: the classic builder builds on a local base of another architecture without a word, and the
    image would carry the stack's arch label over the base's binaries. Returns True when it was pulled.

    `base_image` is the stack's (its official mirrors); a failed pull names the ways forward.
    """
    from provisioner import arch as arches

    platform = arches.platform(arch)
    try:
        _same_arch(engine.image(ref), arch, platform)
        return False
    except ImageNotFound:
        pass
    except EngineError as exc:
        raise ProvisionError(f"base image {ref}: {short(exc)}") from None
    if not pull:
        raise ProvisionError(f"base image {ref} does not exist locally (and --no-pull was given);"
                             f" {ways_forward(ref, base_image)}")
    try:
        engine.pull(ref, platform=platform)
    except RegistryUnreachable as exc:
        why = f"its registry {exc.registry} cannot be reached ({_cause(exc.reason)})"
    except PullFailed as exc:
        why = f"{exc.registry} refused the pull ({_cause(exc.reason)})"
    except ImageNotFound as exc:
        why = f"{registry_of(ref)} does not have it ({_cause(str(exc).removeprefix(f'pull {ref}: '))})"
    except EngineError as exc:
        why = f"it cannot be pulled ({short(exc, 200)})"
    else:
        _same_arch(engine.image(ref), arch, platform)
        return True
    raise ProvisionError(f"base image {ref} is not in the local engine and {why}; {ways_forward(ref, base_image)}")


def _same_arch(image, arch: str | None, platform: str | None) -> None:
    from provisioner import arch as arches

    have = arches.normalize(image.arch)
    if arch and have and have != arches.normalize(arch):
        raise ProvisionError(f"base image {image.ref} is {have} ({image.arch}), but the stack is for {arch}: use a"
                             f" {platform} base image (pull that variant, or name one with --base-image), or resolve"
                             f" for {have} (--arch {have})")


def _cause(reason: str) -> str:
    """The engine's reason without the URL it tried (`Get "https://host/v2/": `): the registry is named already."""
    head, sep, tail = reason.partition('": ')
    return short(tail if sep and head.startswith(("Get ", "Head ")) else reason, 160)


def ways_forward(ref: str, base_image: dict | None) -> str:
    """What a person can do when the base image cannot be pulled: the same image from another registry the
    matrix knows (--registry ID), a site mirror (--base-image), or a saved copy (docker load)."""
    options = []
    for mirror in (base_image or {}).get("mirrors") or ():
        reg = _registry_id(mirror)
        options.append(f"--registry {reg} ({mirror})" if reg else f"--base-image {mirror}")
    options.append("--base-image REF of a site mirror of it")
    options.append(f"`docker load -i FILE` of it saved with `docker save {ref}` on a machine that can pull it")
    return "ways forward: " + ", ".join(options[:-1]) + ", or " + options[-1]


def _registry_id(image_ref: str) -> str | None:
    """The id of the shipped registry whose image `image_ref` is (--registry takes it)."""
    from provisioner.matrix import loader

    try:
        regs = loader.load().registries()
    except ProvisionError:
        return None
    repo = image_ref.rsplit(":", 1)[0]
    return next((r["id"] for r in regs if r["image"] == repo), None)


def build(ctx, opts: BuildOptions, out=None, live: bool | None = None, verbose: bool = False,
          engine: Engine | None = None) -> BuildResult:
    """Build `ctx` (a rendered Context) and tag it; progress goes to `out` (stderr by default).

    `engine`: the engine to build with (default: the local Docker engine, connected here).
    """
    out = out or sys.stderr
    live = out.isatty() if live is None else live
    check_options(opts)
    own = engine is None
    eng = engine if engine is not None else connect()
    try:
        return _build(eng, ctx, opts, out, live, verbose)
    finally:
        if own:
            eng.close()


def _build(eng: Engine, ctx, opts: BuildOptions, out, live: bool, verbose: bool) -> BuildResult:
    from provisioner import arch as arches
    from provisioner.image import render
    from provisioner.image.progress import Progress

    base = ctx.manifest["base_image"]
    stack = ctx.manifest.get("stack") or {}
    pulled = ensure_base(eng, base, opts.pull, stack.get("arch"), stack.get("base_image"))
    out.write(f"building {ctx.tag} (recipe {ctx.manifest['recipe']['name']}, base {base}"
              f"{', pulled' if pulled else ''})\n")
    out.flush()
    add_inputs(ctx, opts)
    tags = [ctx.tag, *[t for t in opts.tags if t != ctx.tag]]
    network = None if opts.network in (None, "default") else opts.network
    started = time.monotonic()
    image_id = None
    error = None
    with tempfile.TemporaryFile(prefix="provision-context-") as tar, Progress(out, live, verbose) as progress:
        render.write_tar(ctx, tar)
        tar.seek(0)
        try:
            for event in eng.build(tar, tags[0], nocache=opts.no_cache, network=network,
                                   platform=arches.platform(stack.get("arch"))):
                progress.feed(event)
                if event.kind == "error":
                    error = event.text
                elif event.kind == "aux":
                    image_id = event.image_id
        except EngineError as exc:  # the engine went away mid-build
            error = str(exc)
    if error:
        report = progress.failure_report()
        if report:
            out.write(report + "\n")
        raise BuildFailed(" ".join(str(error).split()))
    if image_id is None:
        image_id = eng.image(tags[0]).id
    for extra in tags[1:]:
        eng.tag(image_id, extra)
    return BuildResult(tag=opts.tags[0] if opts.tags else ctx.tag, tags=tags, image_id=image_id,
                       seconds=time.monotonic() - started, steps=progress.summary(), base_pulled=pulled)
