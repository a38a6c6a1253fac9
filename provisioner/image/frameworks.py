"""What a framework image (MindSpeed-LLM, MindSpeed-RL, MindSpore Transformers) installs, from the matrix.

A stack resolved `--with mindspeed-llm` or `--with mindformers` names a
framework set; matrices/frameworks.yaml holds its environment, locked by
scripts/lock_frameworks.py for the set's Python and both CPU architectures. This
module picks the environment for a stack and turns it into:

* requirement layers, one per upstream install step (the packages whose final
  version that step set), each installed with `pip install --no-deps`;
* the packages built from source after them (MindSpeed, vllm, vllm-ascend,
  MindSpore Transformers), with their build environment;
* the conflicts upstream's own install order leaves, which the image's lock
  check accepts by name (and no others);
* the checkouts at their pinned commits (provisioner/image/sources.py fetches
  them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provisioner.errors import ProvisionError
from provisioner.image.packages import Layer, active_lines

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any


@dataclass(frozen=True)
class SourcePackage:
    """A package a step installs from a checkout or a pinned sdist (wheel built in the sources stage)."""

    name: str
    step: str
    checkout: str | None = None
    sdist: dict | None = None  # {name, version, sha256, url}
    env: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    env: dict  # the matrix row
    set_id: str
    kind: str  # mindspeed-llm | mindspeed-rl | mindformers
    layers: list[Layer]
    packages: list[SourcePackage]
    accepted: list[dict]  # conflicts upstream leaves, active for this stack
    commits: dict[str, str]

    def allowed_unlocked(self) -> list[str]:
        return [p.name for p in self.packages]


def set_of(stack: Mapping[str, Any]) -> tuple[str, str, dict] | None:
    """(set id, kind, commits) of the framework set a stack carries, or None."""
    extras = stack.get("extras") or {}
    if extras.get("mindspeed_llm"):
        ms = extras["mindspeed_llm"]
        return ms["set"], ms["kind"], dict(ms.get("commits") or {})
    if extras.get("mindformers"):
        mf = extras["mindformers"]
        return mf["set"], "mindformers", dict(mf["commits"])
    return None


def select(matrix, stack: Mapping[str, Any]) -> dict:
    """The environment row for the stack's set, framework version and Python."""
    found = set_of(stack)
    assert found is not None
    set_id = found[0]
    rows = [r for r in matrix.rows("framework_envs") if r["set"] == set_id] if "framework_envs" in matrix.data else []
    if stack["framework"] == "mindspore":
        fw, version = "mindspore", stack["mindspore"]["version"]
    else:
        fw, version = "torch", stack["torch"]["version"]
    hits = [r for r in rows if str(r.get(fw)) == version and r["python"] == stack["python"]]
    if not hits:
        have = ", ".join(f"{fw} {r.get(fw)} on Python {r['python']}" for r in rows) or "none"
        raise ProvisionError(f"no locked environment for {set_id} with {fw} {version} on Python {stack['python']} in"
                             f" matrices/frameworks.yaml (locked: {have}); add the row's steps and run"
                             " scripts/lock_frameworks.py, or choose --python / --torch to match")
    row = hits[-1]
    if not row.get("layers"):
        raise ProvisionError(f"{row.get('_at', 'frameworks')}: environment {row['id']!r} has steps but no lock;"
                             " run scripts/lock_frameworks.py for it")
    return row


def plan(matrix, stack: Mapping[str, Any]) -> Plan:
    found = set_of(stack)
    if found is None:
        raise ProvisionError("the stack carries no framework set (resolve it --with mindspeed-llm or --with mindformers)")
    set_id, kind, commits = found
    env = select(matrix, stack)
    steps = {s["name"]: s for s in env["steps"]}
    layers = []
    for name, lines in env["layers"].items():
        active = tuple(line for line, _ in active_lines(lines, stack))
        if not active:
            continue
        title = "the stack's framework needs and provision's requirements" if name == "base" else steps[name]["title"]
        layers.append(Layer(f"{name}", f"{title} [{env['id']}]", active))
    packages = []
    for step in env["steps"]:
        pkg = step.get("package")
        if not pkg:
            continue
        sdist = None
        if pkg.get("sdist"):
            spec = (env.get("sdists") or {}).get(pkg["sdist"])
            if not spec:
                raise ProvisionError(f"{env['id']}: step {step['name']!r} builds sdist {pkg['sdist']!r}, which the"
                                     " row's sdists do not pin")
            sdist = {"name": pkg["sdist"], **spec}
        elif pkg["checkout"] not in commits:
            raise ProvisionError(f"{env['id']}: step {step['name']!r} builds checkout {pkg['checkout']!r}, for which"
                                 f" the set {set_id} pins no commit")
        packages.append(SourcePackage(pkg["name"], step["name"], pkg.get("checkout"), sdist,
                                      {str(k): str(v) for k, v in (pkg.get("env") or {}).items()}))
    accepted = [c for c in env.get("conflicts") or [] if not c.get("archs") or stack["arch"] in c["archs"]]
    return Plan(env, set_id, kind, layers, packages, accepted, commits)


def lock_header(plan_: Plan) -> list[str]:
    """Lines for requirements.lock that say where the framework layers come from."""
    env = plan_.env
    out = [f"# Framework environment {env['id']}: the upstream install order of {plan_.set_id}, replayed with pip"
           f" {env['resolved']['pip']} on {env['resolved']['on']} (matrices/frameworks.yaml)."]
    for o in env.get("overrides") or []:
        out.append(f"#   {o['package']} {o['torch_line']} (torch line) -> {o['lock']} by {o['step']}: {o['by'][0]}")
    for c in plan_.accepted:
        out.append(f"#   accepted upstream conflict: {c['package']} {c['version']} requires {c['requires']},"
                   f" has {c['installed']}")
    return out
