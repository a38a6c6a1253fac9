"""Stack + recipe -> a complete, byte-stable Docker build context.

The context holds the Dockerfile (templates/), the requirement files and
requirements.lock (provisioner/image/packages.py), a manifest (stack.json), the small
files the image copies (entrypoint, CANN environment script, lock check), this
project's source (provisioner/image/project.py) and defaults for the build-time
inputs under build/ (pip settings, CA bundle, wheelhouse), which
`provision build` replaces from its options. The same inputs give the same bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from provisioner import validate
from provisioner.errors import ProvisionError
from provisioner.image.labels import (
    APEX_LABEL,
    CHECKOUTS_LABEL,
    FRAMEWORK_ENV_LABEL,
    FRAMEWORK_KIND_LABEL,
    FRAMEWORK_SET_LABEL,
    LAUNCHER_LABEL,
    LAUNCHER_MODULE,
    STACK_ID_LABEL,
    STACK_LABEL,
)
from provisioner.image.templates import raw, render_template
from provisioner.resolve.stack import apex_left_out
from provisioner.resolve.stack import summary as stack_summary

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

CONTEXT_SCHEMA = "provision.context/1"
MANIFEST = "stack.json"
# Files in a build context get this modification time (2020-01-01 UTC): fixed, so
# that Docker's cache keys and the bytes of the context do not depend on when the
# files were checked out, and late enough for the zip timestamps of a wheel.
FIXED_MTIME = 1577836800
EXECUTABLE = 0o755
REGULAR = 0o644


@dataclass(frozen=True)
class User:
    uid: int
    gid: int


@dataclass
class Context:
    """A rendered build context, in memory: relative path -> bytes (or a host file to copy)."""

    files: dict[str, bytes | Path]
    modes: dict[str, int]
    tag: str
    manifest: dict
    dockerfile: str
    steps: list[str] = field(default_factory=list)

    def add(self, rel: str, content: bytes | Path, mode: int = REGULAR) -> None:
        self.files[rel] = content
        self.modes[rel] = mode

    def read(self, rel: str) -> bytes:
        value = self.files[rel]
        return value.read_bytes() if isinstance(value, Path) else value


# ------------------------------------------------------------------ naming


def _tag_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.").lower()


def image_tag(stack: Mapping[str, Any], recipe, user: User | None = None) -> str:
    """`<repository>:<cann>-<chip>-<framework><ver>-py<ver>-<stack id[:8]>` (the recipe names the repository)."""
    if stack["framework"] == "mindspore":
        fw = f"mindspore{stack['mindspore']['version']}"
    else:
        fw = f"torch{stack['torch']['version']}"
    chip = stack["chip"].get("image_chip") or stack["chip"]["family"]
    parts = [stack["cann"]["version"], chip, fw, f"py{stack['python']}", stack["id"][:8]]
    if user is not None:
        parts.append(f"u{user.uid}g{user.gid}")
    return f"{recipe.repository}:{_tag_part('-'.join(parts))}"


def labels(stack: Mapping[str, Any], recipe, tag: str, project, lock_sha: str, package_set: str,
           fw: dict | None = None) -> dict[str, str]:
    """OCI labels plus the whole Stack as compact JSON (the contract audit and launch read back).

    A framework image also says which framework set it carries, the locked environment and every checkout
    (commit, ref label, path in the image): what `launch --job` needs to run MindSpeed-LLM/RL or MindFormers.
    """
    summary = stack_summary(stack)
    extra = {}
    if fw:
        plan = fw["plan"]
        extra = {
            FRAMEWORK_SET_LABEL: plan.set_id,
            FRAMEWORK_KIND_LABEL: plan.kind,
            FRAMEWORK_ENV_LABEL: plan.env["id"],
            CHECKOUTS_LABEL: json.dumps({c.name: c.to_dict() for c in fw["checkouts"]}, separators=(",", ":"),
                                        sort_keys=True),
        }
    apex = stack.get("apex")
    if apex:
        extra[APEX_LABEL] = json.dumps({"commit": apex["commit"], "ref": apex["ref"], "from": apex["repo"]},
                                       separators=(",", ":"), sort_keys=True)
    return {
        "org.opencontainers.image.title": recipe.repository,
        "org.opencontainers.image.description": f"{recipe.title}: {summary}",
        "org.opencontainers.image.version": tag.split(":", 1)[1],
        "org.opencontainers.image.base.name": stack["base_image"]["ref"],
        "org.opencontainers.image.vendor": project.name,
        "org.provision.recipe": recipe.name,
        "org.provision.version": project.version,
        "org.provision.package-set": package_set,
        "org.provision.lock.sha256": lock_sha,
        LAUNCHER_LABEL: LAUNCHER_MODULE,
        **extra,
        STACK_ID_LABEL: stack["id"],
        STACK_LABEL: json.dumps(stack, separators=(",", ":"), ensure_ascii=True),
    }


# ------------------------------------------------------------------ render


def render(matrix, stack: Mapping[str, Any], recipe, user: User | None = None, project_root: str | Path | None = None,
           sources: dict[str, str] | None = None) -> Context:
    """Render the build context for `stack` with `recipe` (see the module docstring).

    `sources` maps checkout names to a local repository or a URL (`--source`).
    """
    from provisioner.image import frameworks, packages, project

    # The stack may come from a profile, an overlay or a file: its base image and tag are checked again here,
    # where they become a FROM line and labels (and templates.py refuses any value that could end a line).
    validate.image_ref((stack.get("base_image") or {}).get("ref"), "the stack's base image")
    if stack.get("apex"):
        # The commit becomes a `git checkout` word and the build's check, the ref a label and a comment (never an
        # option), the setuptools pin a pip word. A stack written before Apex was pinned has no commit.
        validate.git_ref(stack["apex"].get("ref"), "the stack's apex.ref")
        if not stack["apex"].get("commit"):
            raise ProvisionError("the stack's apex names no commit (a stack from before Apex was pinned to one):"
                                 " resolve it again, or add apex.commit")
        validate.git_commit(stack["apex"].get("commit"), "the stack's apex.commit")
        validate.version_text(stack["apex"].get("setuptools"), "the stack's apex.setuptools")
    root = project.source_root(project_root)
    _check_python(stack, root)
    proj = project.describe(root)
    row = packages.select(matrix, stack)
    fw = _framework(matrix, stack, recipe, sources or {})
    if fw is None:
        if sources:
            raise ProvisionError(f"--source {next(iter(sources))}: recipe {recipe.name!r} makes no checkouts")
        packages.check_project(row, stack, list(proj.requirements), recipe.project_extras)
        layers = packages.layers(matrix, stack, recipe, row)
        lock = packages.lock_text(layers, stack, row)
    else:
        plan = fw["plan"]
        lock_row = {"id": plan.env["id"], "pins": {}, "lock": [x for layer in plan.layers for x in layer.lines],
                    "_at": plan.env.get("_at", "frameworks")}
        packages.check_project(lock_row, stack, list(proj.requirements), recipe.project_extras)
        layers = [packages.layers(matrix, stack, recipe, row)[0], *plan.layers]
        lock = packages.lock_text(layers, stack, {**row, "pins": {}}, extra_head=frameworks.lock_header(plan))
    lock_sha = hashlib.sha256(lock.encode()).hexdigest()
    tag = validate.image_ref(image_tag(stack, recipe, user), "image tag")
    label_map = labels(stack, recipe, tag, proj, lock_sha, row["id"], fw)
    ds_ops = _deepspeed_ops(stack, recipe)

    values = dict(
        stack=stack, recipe=recipe, layers=layers, labels=label_map, user=user,
        apex=stack.get("apex"), project_extras=recipe.project_extras, project=proj,
        build_tools=recipe.build_tools, summary=stack_summary(stack), package_set=row["id"],
        allow=_unlocked_allowed(stack, fw), strict=True, framework=fw and fw["plan"],
        checkouts=fw["checkouts"] if fw else [], layout=fw["layout"] if fw else [],
        runtime=fw["runtime"] if fw else None, commands=recipe.commands if fw else {},
        accept=[f"{c['package']}:{c['requires']}" for c in fw["plan"].accepted] if fw else [],
        deepspeed_ops=ds_ops,
        apex_left_out=apex_left_out(matrix, fw["plan"].set_id, bool(stack.get("apex"))) if fw else None,
    )
    dockerfile = render_template(recipe.template, **values)
    ctx = Context(files={}, modes={}, tag=tag, manifest={}, dockerfile=dockerfile)
    ctx.add("Dockerfile", dockerfile.encode())
    ctx.add("requirements.lock", lock.encode())
    for layer in layers:
        ctx.add(layer.file, packages.file_text(layer).encode())
    if fw:
        for rel, blob in fw["files"].items():
            ctx.add(rel, blob)
        for pkg in fw["plan"].packages:
            if pkg.sdist:
                ctx.add(f"requirements/sdist-{pkg.name}.txt",
                        f"{pkg.name}=={pkg.sdist['version']} --hash=sha256:{pkg.sdist['sha256']}\n".encode())
        for name, spec in (recipe.commands or {}).items():
            keep = recipe.repos[spec["checkout"]].get("dir")
            text = render_template("files/command.sh.j2", command=name, path=f"{keep}/{spec['script']}",
                           python=f"{_VENV}/bin/python", needs=list(spec.get("needs") or []))
            ctx.add(f"files/commands/{name}", text.encode(), EXECUTABLE)
    ctx.add("files/lock-check.py", raw("files/lock-check.py"))
    ctx.add("files/rootfs/etc/provision/cann-env.sh", raw("files/cann-env.sh"))
    ctx.add("files/rootfs/etc/profile.d/provision-cann.sh", raw("files/profile-cann.sh"))
    ctx.add("files/rootfs/usr/local/bin/provision-entrypoint", raw("files/entrypoint.sh"), EXECUTABLE)
    if ds_ops:
        ctx.add("files/ds-prebuild.sh", raw("files/ds-prebuild.sh"), EXECUTABLE)
    # `provision doctor` inside the image checks what it finds against this (the labels carry the same).
    ctx.add("files/rootfs/etc/provision/stack.json", (json.dumps(stack, indent=2, ensure_ascii=False) + "\n").encode())
    for rel, content in build_inputs().items():
        ctx.add(f"build/{rel}", content)
    for rel, src in project.files(root).items():
        ctx.add(f"project/{rel}", src)
    ctx.manifest = _manifest(stack, recipe, tag, row, layers, proj, user, label_map, ctx)
    if fw:
        plan = fw["plan"]
        ctx.manifest["framework"] = {
            "set": plan.set_id, "kind": plan.kind, "env": plan.env["id"],
            "checkouts": {c.name: c.to_dict() for c in fw["checkouts"]},
            "built_from_source": [p.name for p in plan.packages],
            "accepted_conflicts": plan.accepted,
        }
    ctx.add(MANIFEST, (json.dumps(ctx.manifest, indent=2, ensure_ascii=False) + "\n").encode())
    return ctx


def _check_python(stack: Mapping[str, Any], root: Path | None) -> None:
    """The image installs this project: the stack's Python must meet the Requires-Python of the source that goes
    in (the resolver holds every stack it makes to provision's own; a stack made elsewhere is held here)."""
    from provisioner import version
    from provisioner.resolve.candidates import floor_ok
    from provisioner.versions import VersionError

    floor = version.requires_python_at(str(root)) if root is not None else None
    if floor is None:
        floor = version.requires_python()
    python = str(stack.get("python") or "")
    try:
        ok = not floor or floor_ok(floor, python)
    except VersionError:
        raise ProvisionError(f"the stack's Python {python!r} is not a Python version") from None
    if not ok:
        raise ProvisionError(f"the stack's Python {python} is below the Python this project needs ({floor}, its"
                             " Requires-Python), which every image installs: resolve again (`provision resolve`"
                             " picks a base image with such a Python) or pass --base-image with one")


def build_inputs(pip_conf: str | None = None, gitconfig: str | None = None) -> dict[str, bytes]:
    """Defaults of the files `provision build` fills in (pip settings, git settings, placeholders)."""
    return {
        "pip.conf": (pip_conf if pip_conf is not None else render_template("build/pip.conf.j2", index_url=None,
                                                                      extra_index_urls=[], cert=None,
                                                                      offline=False)).encode(),
        "gitconfig": (gitconfig if gitconfig is not None else render_template("build/gitconfig.j2", cert=None)).encode(),
        "ca/README": raw("build/ca-README"),
        "wheelhouse/README": raw("build/wheelhouse-README"),
    }


_OP = re.compile(r"^[a-z][a-z0-9_]*$")


def _deepspeed_ops(stack: Mapping[str, Any], recipe) -> list[str]:
    """DeepSpeed operators the recipe pre-builds when the stack has --with deepspeed (recipe extras.deepspeed.
    prebuild_ops, e.g. [cpu_adam]); names are checked, since they reach a RUN line."""
    if "deepspeed" not in (stack.get("extras") or {}):
        return []
    ops = ((recipe.extras or {}).get("deepspeed") or {}).get("prebuild_ops") or []
    if not isinstance(ops, list) or not all(isinstance(op, str) and _OP.match(op) for op in ops):
        raise ProvisionError(f"{recipe.at}: extras.deepspeed.prebuild_ops must list DeepSpeed op names such as"
                             f" cpu_adam (got {ops!r})")
    return list(ops)


_VENV = "/opt/venv"  # the template's venv path: the command wrappers call its Python


def _framework(matrix, stack: Mapping[str, Any], recipe, given: dict[str, str]) -> dict | None:
    """The framework set's plan, checkouts (verified --source archives included) and layout, or None."""
    from provisioner.image import frameworks, sources

    found = frameworks.set_of(stack)
    if not recipe.repos:
        return None
    if found is None:
        raise ProvisionError(f"recipe {recipe.name!r} needs a stack resolved --with {', '.join(recipe.requires)}")
    extra = sorted(n.replace("_", "-") for n in (stack.get("extras") or {}) if n not in ("mindspeed_llm", "mindformers"))
    if extra:
        raise ProvisionError(f"--with {extra[0]} is not part of the {found[0]} environment (recipe {recipe.name!r});"
                             " leave it out, or use --recipe pytorch")
    plan = frameworks.plan(matrix, stack)
    ms = (stack.get("extras") or {}).get("mindspeed_llm") or {}
    labels = {k: str(ms.get(k) or "") for k in plan.commits}
    labels.update({"mindformers": (stack.get("extras") or {}).get("mindformers", {}).get("ref", "")})
    checkouts, files = sources.checkouts(recipe.repos, plan.commits, labels, given)
    layout = (recipe.layout or {}).get(plan.kind)
    if layout is None:
        raise ProvisionError(f"recipe {recipe.name!r} has no layout for a {plan.kind} set")
    runtime = (recipe.runtime or {}).get(plan.kind)
    if runtime is not None:
        preload = runtime.get("preload") or []
        runtime = {"packages": runtime.get("packages") or {"apt": [], "yum": []},
                   "preload": [preload] if isinstance(preload, str) else list(preload)}
    return {"plan": plan, "checkouts": checkouts, "files": files, "layout": layout, "runtime": runtime}


def _unlocked_allowed(stack: Mapping[str, Any], fw: dict | None) -> list[str]:
    """Packages that rightly are not in the lock (installed from source in the builder stages)."""
    allowed = ["pip"]
    if stack.get("apex"):
        allowed.append("apex")
    if fw:
        allowed += fw["plan"].allowed_unlocked()
    return allowed


def _manifest(stack, recipe, tag, row, layers, proj, user, label_map, ctx: Context) -> dict:
    digests = {rel: hashlib.sha256(ctx.read(rel)).hexdigest()
               for rel in sorted(ctx.files) if not rel.startswith(("project/", "build/"))}
    project_digest = hashlib.sha256()
    for rel in sorted(r for r in ctx.files if r.startswith("project/")):
        project_digest.update(rel.encode() + b"\0" + hashlib.sha256(ctx.read(rel)).digest())
    return {
        "schema": CONTEXT_SCHEMA,
        "tag": tag,
        "recipe": recipe.to_dict(),
        "stack_id": stack["id"],
        "base_image": stack["base_image"]["ref"],
        "package_set": {"id": row["id"], "pins": dict(row["pins"])},
        "layers": [{"name": layer.name, "file": layer.file, "title": layer.title,
                    "requirements": len([x for x in layer.lines if not x.startswith("-")])} for layer in layers],
        "project": {"name": proj.name, "version": proj.version, "extras": list(recipe.project_extras),
                    "sha256": project_digest.hexdigest()},
        "user": None if user is None else {"uid": user.uid, "gid": user.gid},
        "labels": {k: v for k, v in label_map.items() if k != STACK_LABEL},
        "files": digests,
        "stack": stack,
    }


# ------------------------------------------------------------ write / tar


def write(ctx: Context, out: str | Path) -> Path:
    """Write the context to `out` atomically: a complete new directory or nothing.

    An existing `out` is replaced only when it is empty or a context rendered
    before (it has stack.json with our schema); anything else is refused.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ProvisionError(f"{out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not _is_context(out):
        raise ProvisionError(f"{out}: not empty and not a build context rendered by provision; choose a new directory")
    parent = out.resolve().parent
    # The directories this call creates (deepest last): a failure removes them again, so nothing is left
    # behind, wherever a symlink on the way pointed.
    created = [p for p in (parent, *parent.parents) if not p.exists()][::-1]
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=parent))
    except OSError as exc:
        _remove_dirs(created)
        raise ProvisionError(f"{out}: cannot create: {exc.strerror or exc}") from None
    try:
        for rel in sorted(ctx.files):
            dest = tmp / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            value = ctx.files[rel]
            if isinstance(value, Path):
                shutil.copyfile(value, dest)
            else:
                dest.write_bytes(value)
            os.chmod(dest, ctx.modes.get(rel, REGULAR))
            os.utime(dest, (FIXED_MTIME, FIXED_MTIME))
        old = None
        if out.exists():
            old = parent / f".{out.name}.old.{os.getpid()}"
            os.rename(out, old)
        os.rename(tmp, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_dirs(created)
        raise ProvisionError(f"{out}: cannot write the build context: {exc.strerror or exc}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        _remove_dirs(created)
        raise
    return out


def _remove_dirs(created: list[Path]) -> None:
    """Remove the (empty) directories a failed write created, deepest first."""
    for path in reversed(created):
        try:
            path.rmdir()
        except OSError:
            break


def _is_context(path: Path) -> bool:
    try:
        return json.loads((path / MANIFEST).read_text(encoding="utf-8")).get("schema") == CONTEXT_SCHEMA
    except (OSError, ValueError, AttributeError):
        return False


def write_tar(ctx: Context, fileobj) -> None:
    """The context as an uncompressed tar with fixed owners, modes and times (stable cache keys)."""
    with tarfile.open(fileobj=fileobj, mode="w", format=tarfile.PAX_FORMAT) as tar:
        dirs: set[str] = set()
        for rel in sorted(ctx.files):
            parts = rel.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    tar.addfile(_info(d, tarfile.DIRTYPE, 0, EXECUTABLE))
            value = ctx.files[rel]
            mode = ctx.modes.get(rel, REGULAR)
            if isinstance(value, Path):
                with value.open("rb") as fh:
                    tar.addfile(_info(rel, tarfile.REGTYPE, value.stat().st_size, mode), fh)
            else:
                import io

                tar.addfile(_info(rel, tarfile.REGTYPE, len(value), mode), io.BytesIO(value))


def _info(name: str, kind: bytes, size: int, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.mode = mode
    info.mtime = FIXED_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
