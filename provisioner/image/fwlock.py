"""A framework set's environment, reproduced step by step as its upstream install guide builds it.

MindSpeed-LLM, MindSpeed-RL and MindSpore Transformers are installed upstream by
a sequence of `pip install` calls (torch and torch_npu, then MindSpeed's
requirements, then MindSpeed-LLM's, ...), each resolved on its own and each
allowed to replace what an earlier one installed: the later install wins. Their
pins contradict each other, so one pip call over all the files fails; the
sequence does not. This module replays the sequence with real pip
(provisioner.image.pipreport) for one target (Python, CPU):

* step `base`: the framework (torch + torch_npu's own requirements, or MindSpore)
  and this project's requirements, at the versions of the torch line's lock
  (matrices/packages.yaml) - what the plain image of the stack has;
* each upstream step: its requirements resolved with everything installed so far
  preferred (a constraint), and a preference dropped only where the step's own
  requirements exclude it - as pip keeps a satisfying installed version and
  replaces one that is not;
* `no_deps` steps (MindSpeed-RL's `pip install antlr4-python3-runtime==4.7.2
  --no-deps`) install exactly what they name.

The result is the environment upstream ends with: every package at its final
version, attributed to the step that set it (an image layer each), every
version that differs from the torch line's lock with the requirement that moved
it, and the requirements the sequence leaves unmet (upstream's own conflicts,
such as antlr4 4.7.2 under hydra-core's `==4.9.*`), which the image's lock check
then accepts by name and no others. scripts/lock_frameworks.py writes it all
into matrices/frameworks.yaml.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from provisioner.errors import ProvisionError
from provisioner.image.pipreport import Item, Pip, PipFailed, Target, applies, norm

# Packages the stack installs itself (framework layer), never from a framework lock.
FRAMEWORK = ("torch", "torch-npu", "mindspore")
# On x86_64 the stack installs torch's +cpu build from PyTorch's CPU index, which has none of the CUDA
# packages PyPI's torch metadata asks for; pip here can only see PyPI's torch, so they are left out.
_CUDA_PREFIXES = ("nvidia-", "cuda-", "triton")


def cuda_only(name: str) -> bool:
    return norm(name).startswith(_CUDA_PREFIXES) and not norm(name).startswith("triton-ascend")


def parse_requirements(text: str, origin: str, include=None) -> list[str]:
    """Requirement lines of a requirements file (comments, blank lines and pip options dropped)."""
    from packaging.requirements import InvalidRequirement, Requirement

    out = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].split("\t#", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            if include is None:
                raise ProvisionError(f"{origin}: includes {line.split()[1]}, which cannot be read here")
            out += parse_requirements(include(line.split()[1]), f"{origin} -> {line.split()[1]}", include)
            continue
        if line.startswith("-"):
            continue  # index options and the like: the lock's index settings apply instead
        try:
            Requirement(line)
        except InvalidRequirement as exc:
            raise ProvisionError(f"{origin}: bad requirement {line!r}: {exc}") from None
        out.append(line)
    return out


def substitute(reqs: list[str], subs: dict[str, str] | None) -> tuple[list[str], list[str]]:
    """`reqs` with each requirement on a package of `subs` replaced by the one `subs` gives (a step's `substitute`:
    an upstream pin no index serves any more); (requirements, ["OLD -> NEW", ...]). A name `subs` gives that the
    requirements do not hold is an error: the substitution would be stale."""
    from packaging.requirements import Requirement

    wanted = {norm(k): v for k, v in (subs or {}).items()}
    out, done = [], []
    for text in reqs:
        new = wanted.get(norm(Requirement(text).name))
        if new is None:
            out.append(text)
            continue
        out.append(new)
        done.append(f"{text} -> {new}")
    seen = {norm(Requirement(d.split(" -> ", 1)[0]).name) for d in done}
    missing = sorted(set(wanted) - seen)
    if missing:
        raise ProvisionError(f"substitute names {', '.join(missing)}, which the step's requirements do not hold")
    return out, done


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    requirements: tuple[str, ...]
    origin: str  # where the requirements come from (repository, commit, path)
    no_deps: bool = False


@dataclass
class Entry:
    version: str
    step: str
    requires: tuple[str, ...]
    why: tuple[str, ...] = ()  # the requirements on it in the tree of the step that installed it


@dataclass
class Result:
    """The environment for one target."""

    target: Target
    state: dict[str, Entry]
    changes: list[dict] = field(default_factory=list)  # every version a step replaced, in order
    conflicts: list[dict] = field(default_factory=list)
    framework_requires: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _requirement(text: str):
    from packaging.requirements import Requirement

    return Requirement(text)


def _demands(step: Step, items: list[Item], target: Target) -> dict[str, list[str]]:
    """Requirement texts, per package, that the step's tree places on it (top level and transitive)."""
    out: dict[str, list[str]] = {}
    for text in step.requirements:
        req = _requirement(text)
        if applies(req, target):
            out.setdefault(norm(req.name), []).append(f"{text} ({step.origin})")
    for item in items:
        for text in item.requires:
            req = _requirement(text)
            if applies(req, target):
                out.setdefault(norm(req.name), []).append(f"{text} (required by {item.name} {item.version})")
    return out


def _excluded(name: str, version: str, demands: dict[str, list[str]]) -> list[str]:
    """The demands on `name` that `version` does not meet."""
    bad = []
    for text in demands.get(name, []):
        req = _requirement(text.split(" (", 1)[0])
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            bad.append(text)
    return bad


def _wanted(items: list[Item], hard: dict[str, str]) -> list[Item]:
    return [i for i in items if i.name not in hard and not cuda_only(i.name)]


def own_requirements(step: Step, hard: dict[str, str]) -> list[str]:
    """The step's requirements less those on the stack's framework (torch, torch-npu, MindSpore): the framework
    layer installs those, so pip is not asked for them (a torch-npu pin of vllm-ascend's requirements.txt would
    pull in its own torch build); whether the framework meets the step's pin is checked as the package's
    requirement (unmet), like any other."""
    return [r for r in step.requirements if norm(_requirement(r).name) not in hard]


def resolve_step(pip: Pip, target: Target, step: Step, state: dict[str, Entry], hard: dict[str, str]) -> list[Item]:
    """What `pip install <step>` installs into an environment that holds `state`."""
    hard_pins = [f"{n}=={v}" for n, v in hard.items()]
    reqs = own_requirements(step, hard)
    if step.no_deps:
        return _wanted(pip.report(target, reqs, no_deps=True), hard)
    prefer = {n: e.version for n, e in state.items() if n not in hard}

    def attempt(keep: dict[str, str]) -> list[Item]:
        cons = hard_pins + [f"{n}=={v}" for n, v in sorted(keep.items())]
        return pip.report(target, reqs, cons)

    try:
        return _wanted(attempt(prefer), hard)
    except PipFailed:
        pass
    try:
        free = attempt({})
    except PipFailed as exc:
        raise ProvisionError(f"step {step.name!r} ({step.origin}) cannot be installed on {target.label()} with the"
                             f" stack's framework ({', '.join(hard_pins)}): {exc}") from None
    demands = _demands(step, free, target)
    keep = {n: v for n, v in prefer.items() if not _excluded(n, v, demands)}
    try:
        return _wanted(attempt(keep), hard)
    except PipFailed:
        pass
    moved = {i.name for i in free if i.name in keep and keep[i.name] != i.version}
    try:
        return _wanted(attempt({n: v for n, v in keep.items() if n not in moved}), hard)
    except PipFailed:
        return _wanted(free, hard)


def replay(pip: Pip, target: Target, hard: dict[str, str], base: Step, base_constraints: list[str],
           steps: list[Step], extra_requires: dict[str, tuple[str, ...]]) -> Result:
    """Replay `base` then `steps` for one target (see the module docstring)."""
    hard = {norm(k): v for k, v in hard.items()}
    try:
        items = pip.report(target, list(base.requirements), [f"{n}=={v}" for n, v in hard.items()] + base_constraints)
    except PipFailed as exc:
        raise ProvisionError(f"the base of the environment ({base.origin}) does not resolve on {target.label()}:"
                             f" {exc}") from None
    result = Result(target, {})
    result.framework_requires = {i.name: i.requires for i in items if i.name in hard}
    demands = _demands(base, items, target)
    for item in _wanted(items, hard):
        result.state[item.name] = Entry(item.version, base.name, item.requires, tuple(demands.get(item.name, ())))
    for step in steps:
        items = resolve_step(pip, target, step, result.state, hard)
        demands = _demands(step, items, target)
        for item in items:
            old = result.state.get(item.name)
            if old is not None and old.version != item.version:
                why = _excluded(item.name, old.version, demands)
                result.changes.append({"package": item.name, "was": old.version, "was_step": old.step,
                                       "now": item.version, "step": step.name,
                                       "by": why or [f"{step.name}: resolved with the step's own requirements"]})
            if old is None or old.version != item.version or step.no_deps:
                result.state[item.name] = Entry(item.version, step.name, item.requires,
                                                tuple(demands.get(item.name, ())))
    result.conflicts = unmet(result.state, target, hard, {**result.framework_requires, **extra_requires})
    return result


def unmet(state: dict[str, Entry], target: Target, hard: dict[str, str],
          extra_requires: dict[str, tuple[str, ...]]) -> list[dict]:
    """What `pip check` would report for the environment: every requirement it leaves unmet.

    `extra_requires` are the requirements of packages installed from source
    (vllm, vllm-ascend, MindSpeed, MindSpore Transformers), as their upstream
    files declare them; torch's CUDA requirements do not count (see cuda_only).
    """
    have = {n: e.version for n, e in state.items()} | dict(hard)
    who = {n: (e.version, e.requires) for n, e in state.items()}
    who.update({n: ("source", reqs) for n, reqs in extra_requires.items()})
    out = []
    for name, (version, requires) in sorted(who.items()):
        for text in requires:
            req = _requirement(text)
            if not applies(req, target) or cuda_only(req.name):
                continue
            dep = norm(req.name)
            got = have.get(dep)
            if dep in FRAMEWORK and got is not None:
                got = got.split("+", 1)[0]
                if req.specifier.contains(got, prereleases=True) or any(
                        s.version.split("+", 1)[0] == got for s in req.specifier if s.operator == "=="):
                    continue
            if got is None:
                out.append({"package": name, "version": version, "requires": str(req), "installed": None,
                            "arch": target.arch})
            elif req.specifier and not req.specifier.contains(got, prereleases=True):
                out.append({"package": name, "version": version, "requires": str(req), "installed": got,
                            "arch": target.arch})
    return out
