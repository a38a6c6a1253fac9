"""Image recipes (images/*.yaml): what an image adds on top of a resolved Stack.

A recipe is data: its name, the framework it builds for, the extras it needs
in the stack (`requires`, added to the request before resolving), how `--with`
packages install, build tools for the builder stages and the git repositories
it clones. The Dockerfile text lives in templates/.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from provisioner.errors import ProvisionError
from provisioner.paths import data_dir

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

_KEYS = {"name", "title", "description", "framework", "default", "requires", "repository", "template",
         "project_extras", "extras", "build_tools", "repos", "layout", "runtime", "commands", "source", "notes"}
_SAFE_PATH = re.compile(r"^(/[A-Za-z0-9._-]+)+$")
_REQUIRED = ("name", "title", "description", "framework", "repository", "template")


@dataclass(frozen=True)
class Recipe:
    name: str
    title: str
    description: str
    framework: str
    repository: str
    template: str
    default: bool = False
    requires: tuple[str, ...] = ()
    project_extras: tuple[str, ...] = ()
    extras: dict = field(default_factory=dict)
    build_tools: dict = field(default_factory=dict)
    repos: dict = field(default_factory=dict)
    layout: dict = field(default_factory=dict)  # per kind of set: [{copy: CHECKOUT/DIR, into: CHECKOUT}]
    runtime: dict = field(default_factory=dict)  # per kind of set: {packages: {apt, yum}, preload}
    commands: dict = field(default_factory=dict)  # name -> {checkout, script}
    source: tuple[str, ...] = ()
    at: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "title": self.title, "framework": self.framework,
                "repository": self.repository, "requires": list(self.requires),
                "project_extras": list(self.project_extras)}


def _recipe_dir() -> Path:
    return data_dir("images")


def names() -> list[str]:
    return sorted(p.stem for p in _recipe_dir().glob("*.yaml"))


def load(name: str) -> Recipe:
    """Load one recipe by name; unknown names and malformed files are ProvisionErrors."""
    from provisioner.matrix.yamlio import Node
    from provisioner.matrix.yamlio import load as load_yaml

    path = _recipe_dir() / f"{name}.yaml"
    if not path.is_file():
        raise ProvisionError(f"unknown recipe {name!r} (known: {', '.join(names())})")
    label = f"images/{path.name}"
    doc = load_yaml(path, label)
    if not isinstance(doc, Node):
        raise ProvisionError(f"{label}:1: a recipe is a mapping")
    for key in doc:
        if key not in _KEYS:
            raise ProvisionError(f"{doc.where(key)}: unknown recipe key {key!r} (expected one of: {', '.join(sorted(_KEYS))})")
    for key in _REQUIRED:
        if not isinstance(doc.get(key), str) or not doc[key].strip():
            raise ProvisionError(f"{doc.where(key)}: recipe {name!r} needs {key!r} (text)")
    if doc["name"] != name:
        raise ProvisionError(f"{doc.where('name')}: recipe name {doc['name']!r} does not match the file name")
    if doc["framework"] not in ("pytorch", "mindspore"):
        raise ProvisionError(f"{doc.where('framework')}: framework must be pytorch or mindspore")
    if not (data_dir("templates") / doc["template"]).is_file():
        raise ProvisionError(f"{doc.where('template')}: template {doc['template']!r} not found in templates/")
    for key in ("extras", "build_tools", "repos", "layout", "runtime", "commands"):
        if not isinstance(doc.get(key, {}), dict):
            raise ProvisionError(f"{doc.where(key)}: {key} must be a mapping")
    for repo, spec in (doc.get("repos") or {}).items():
        if not isinstance(spec, dict) or not isinstance(spec.get("url"), str):
            raise ProvisionError(f"{doc.where('repos')}: repos.{repo} needs a url")
        if spec.get("dir") is not None and not _SAFE_PATH.match(str(spec["dir"])):
            raise ProvisionError(f"{doc.where('repos')}: repos.{repo}.dir must be an absolute path of plain characters")
    repos = doc.get("repos") or {}
    for kind, ops in (doc.get("layout") or {}).items():
        for op in ops or []:
            src, into = str((op or {}).get("copy", "")), str((op or {}).get("into", ""))
            if src.split("/", 1)[0] not in repos or into not in repos or not _SAFE_PATH.match("/" + src):
                raise ProvisionError(f"{doc.where('layout')}: layout.{kind}: each entry copies CHECKOUT/DIR into a"
                                     f" CHECKOUT of repos (got {op!r})")
    for name, spec in (doc.get("commands") or {}).items():
        if not re.fullmatch(r"[a-z][a-z0-9-]*", str(name)) or not isinstance(spec, dict) \
                or spec.get("checkout") not in repos or not _SAFE_PATH.match("/" + str(spec.get("script", ""))):
            raise ProvisionError(f"{doc.where('commands')}: commands.{name} needs a checkout of repos and a script")
        if not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(m)) for m in spec.get("needs") or []):
            raise ProvisionError(f"{doc.where('commands')}: commands.{name}.needs lists Python module names")
    source = doc.get("source") or []
    return Recipe(
        name=doc["name"],
        title=doc["title"],
        description=" ".join(doc["description"].split()),
        framework=doc["framework"],
        repository=doc["repository"],
        template=doc["template"],
        default=bool(doc.get("default", False)),
        requires=tuple(doc.get("requires") or ()),
        project_extras=tuple(doc.get("project_extras") or ()),
        extras=_plain(doc.get("extras") or {}),
        build_tools=_plain(doc.get("build_tools") or {}),
        repos=_plain(doc.get("repos") or {}),
        layout=_plain(doc.get("layout") or {}),
        runtime=_plain(doc.get("runtime") or {}),
        commands=_plain(doc.get("commands") or {}),
        source=tuple([source] if isinstance(source, str) else source),
        at=doc.where(),
    )


def _plain(value):
    """Nodes (line-tracking dicts) to plain dicts, so recipes compare and serialise simply."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def request_options(name: str | None, options: dict) -> dict:
    """Add what a recipe needs from the resolver (its framework and `requires` extras) to resolve options."""
    if not name:
        return options
    recipe = load(name)
    out = dict(options)
    if recipe.requires:
        out["extras"] = tuple(out.get("extras") or ()) + recipe.requires
    if recipe.framework == "mindspore" and not out.get("framework"):
        out["framework"] = "mindspore"
    return out


def choose(stack: Mapping[str, Any], name: str | None = None) -> Recipe:
    """The recipe to build `stack` with: the one named, else the first whose needs the stack meets."""
    if name:
        recipe = load(name)
        _check_fit(recipe, stack)
        return recipe
    candidates = [load(n) for n in names()]
    fitting = [r for r in candidates if r.framework == stack["framework"] and _meets(r, stack)]
    # The most specific recipe first (most required extras), the default recipe last.
    fitting.sort(key=lambda r: (-len(r.requires), not r.default, r.name))
    if not fitting:
        close = [r for r in candidates if r.framework == stack["framework"]]
        if close:
            raise ProvisionError(f"recipe {close[0].name!r} needs a stack resolved --with {', '.join(close[0].requires)}")
        raise ProvisionError(f"no recipe in images/ builds a {stack['framework']} stack")
    return fitting[0]


def _meets(recipe: Recipe, stack: Mapping[str, Any]) -> bool:
    have = set(stack.get("extras") or {}) | ({"apex"} if stack.get("apex") else set())
    return all(req.replace("-", "_") in have for req in recipe.requires)


def _check_fit(recipe: Recipe, stack: Mapping[str, Any]) -> None:
    if recipe.framework != stack["framework"]:
        raise ProvisionError(f"recipe {recipe.name!r} builds {recipe.framework} images, but the stack is"
                             f" {stack['framework']} (choose --recipe {'mindspore' if stack['framework'] == 'mindspore' else 'pytorch'})")
    if not _meets(recipe, stack):
        missing = ", ".join(recipe.requires)
        raise ProvisionError(f"recipe {recipe.name!r} needs a stack resolved --with {missing}")
