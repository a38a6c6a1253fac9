"""Every framework lock, checked with real pip for its Python on x86_64 and aarch64 (network to the index).

For each environment of matrices/frameworks.yaml and each architecture:

1. every locked line (and the stack's framework) has a distribution for that Python and CPU on the index;
2. the requirements those distributions declare (their real metadata, as pip reports it), with the declared
   requirements of the packages built from source, leave exactly the recorded `conflicts` unmet - upstream's
   own, and no other (what `pip check` reports in the image);
3. pip's resolver, given the lock (without the packages whose conflicts are recorded) and the source packages'
   requirements, installs exactly the lock: nothing added, nothing at another version.

Slow on a first run (pip downloads what it reads: this index serves no PEP 658 metadata and no cache headers);
pip's answers are kept in .cache/provision/lock-checks by the exact question, so a later run asks pip again
only for a lock, target or pip that changed (PROVISION_LOCK_CHECK_REFRESH=1 asks again anyway).
"""

from __future__ import annotations

import hashlib
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from provisioner.image import fwlock
from provisioner.image.pipreport import Pip, Target, norm
from provisioner.matrix import loader

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
M = loader.load(use_cache=False)
ENVS = {r["id"]: r for r in M.rows("framework_envs")}
TARGETS = {r["arch"]: tuple(r["platforms"]) for r in M.rows("lock_targets")}
CACHE = ROOT / ".cache" / "provision" / "lock-checks"
PIP = Pip(index_url=os.environ.get("PROVISION_TEST_INDEX_URL", "https://pypi.org/simple"),
          cert=os.environ.get("PIP_CERT"), wheels=ROOT / ".cache" / "provision" / "sdist-wheels")


def _hard(env: dict) -> dict[str, str]:
    if env.get("mindspore"):
        return {"mindspore": env["mindspore"]}
    base = next(r for r in M.rows("packages") if r["id"] == env["base_set"])
    npu = next(r for r in base["resolved_with"] if r.startswith("torch-npu=="))
    return {"torch": env["torch"], "torch-npu": env.get("torch_npu") or npu.split("==", 1)[1]}  # as the lock was made


def _lines(env: dict, target: Target) -> dict[str, str]:
    from packaging.requirements import Requirement

    out = {}
    for lines in env["layers"].values():
        for line in lines:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate(target.markers()):
                out[norm(req.name)] = next(iter(req.specifier)).version
    return out


def _ask(target: Target, requirements: list[str], no_deps: bool = False):
    """pip's report, kept by the exact question: the index here serves no cache headers and no PEP 658
    metadata, so pip itself caches nothing and downloads every wheel it considers (range requests help). A
    changed lock, target or pip asks pip again; PROVISION_LOCK_CHECK_REFRESH=1 always does."""
    from importlib import metadata

    from provisioner.image.pipreport import Item

    key = hashlib.sha256(json.dumps([target.python, target.arch, target.platforms, sorted(requirements), no_deps,
                                     PIP.index_url, metadata.version("pip")]).encode()).hexdigest()
    path = CACHE / f"{key}.json"
    if path.is_file() and not os.environ.get("PROVISION_LOCK_CHECK_REFRESH"):
        return [Item(i["name"], i["version"], tuple(i["requires"]), i["url"]) for i in json.loads(path.read_text())]
    items = PIP.report(target, requirements, no_deps=no_deps)
    CACHE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([{"name": i.name, "version": i.version, "requires": list(i.requires), "url": i.url}
                                for i in items]))
    return items


def _check(env_id: str, arch: str) -> list[str]:
    env = ENVS[env_id]
    target = Target(env["python"], arch, TARGETS[arch])
    hard = _hard(env)
    lock = _lines(env, target)
    recorded = {(c["package"], c["requires"], c["installed"]) for c in env.get("conflicts") or []
                if arch in c.get("archs", [arch])}
    requirers = {c[0] for c in recorded}
    problems = []
    # 3. pip's resolver, given the lock (less the packages whose unmet requirements are recorded) and what the
    #    packages built from source declare, installs exactly the lock
    reqs = [f"{n}=={v}" for n, v in lock.items() if n not in requirers]
    # (less their pins on the stack's framework, which the framework layer holds and check 2 checks, as the lock
    # was made: fwlock.own_requirements; vllm-ascend's torch-npu==2.5.1.post1 would pull in torch==2.5.1+cpu)
    step = fwlock.Step("sources", "", tuple(r for name, rs in (env.get("sources") or {}).items()
                                            if norm(name) not in requirers for r in rs), "sources")
    reqs += fwlock.own_requirements(step, hard)
    reqs += [f"torch=={hard['torch']}"] if "torch" in hard else [f"mindspore=={hard['mindspore']}"]
    resolved = _ask(target, reqs)
    for item in resolved:
        if item.name in hard or fwlock.cuda_only(item.name) or item.name in requirers:
            continue
        if lock.get(item.name) != item.version:
            problems.append(f"the resolver takes {item.name}=={item.version}, the lock has {lock.get(item.name)}")
    # 1. every line (and the framework) has a distribution for this Python and CPU
    have = {i.name: i for i in resolved if lock.get(i.name) == i.version or hard.get(i.name) == i.version}
    rest = [f"{n}=={v}" for n, v in {**lock, **hard}.items() if n not in have]
    items = list(have.values()) + (_ask(target, rest, no_deps=True) if rest else [])
    got = {i.name: i.version for i in items}
    for name, version in {**lock, **hard}.items():
        if got.get(name) != version:
            problems.append(f"{name}=={version}: pip found {got.get(name)}")
    # 2. what stays unmet (pip check, from the metadata pip read) is exactly what is recorded
    state = {i.name: fwlock.Entry(i.version, "lock", i.requires) for i in items if i.name not in hard}
    extra = {i.name: i.requires for i in items if i.name in hard}
    extra.update({norm(k): tuple(v) for k, v in (env.get("sources") or {}).items()})
    found = {(c["package"], c["requires"], c["installed"]) for c in fwlock.unmet(state, target, hard, extra)}
    if found != recorded:
        problems.append(f"unmet requirements {sorted(found)} != recorded conflicts {sorted(recorded)}")
    return problems


# `make test` checks one lock on one architecture (the newest MindSpeed-LLM set's, x86_64: the real-pip path end to
# end); every other lock and architecture is in the `full` tier (`make test-all`), to run when a lock changes.
_NEWEST_LLM = [e for e in ENVS if e.startswith("mindspeed-llm-")][-1]
CASES = [pytest.param(env_id, arch, id=f"{env_id}-{arch}",
                      marks=() if (env_id, arch) == (_NEWEST_LLM, "x86_64") else pytest.mark.full)
         for env_id in ENVS for arch in ("x86_64", "aarch64")]


_POOL: ThreadPoolExecutor | None = None
_STARTED: dict[tuple[str, str], Future] = {}


def background(items: list[pytest.Item]) -> None:
    """Called by tests/helpers/prebuild.py once collection is done: the selected cases start now, six at a time
    (pip waits on the network more than on the CPU), while the rest of the suite runs."""
    global _POOL
    _POOL = ThreadPoolExecutor(max_workers=6)
    for item in items:
        if hasattr(item, "callspec"):
            case = tuple(item.callspec.params[k] for k in ("env_id", "arch"))
            _STARTED.setdefault(case, _POOL.submit(_check, *case))


@pytest.fixture(scope="module")
def results(request):
    """The checks of the selected cases (started in the background at collection unless prebuild is off)."""
    if not _STARTED:
        background([item for item in request.session.items if item.module.__name__ == __name__])
    outcomes = {case: f.exception() or f.result() for case, f in _STARTED.items()}
    assert _POOL is not None
    _POOL.shutdown()
    # pip reports an index page it failed to fetch (a proxy hiccup under six parallel resolutions) as "No matching
    # distribution"; a case that raised is asked once more, alone: a lock that is really wrong fails again.
    for case, outcome in outcomes.items():
        if isinstance(outcome, BaseException):
            try:
                outcomes[case] = _check(*case)
            except Exception as exc:  # noqa: BLE001 - reported by the test of that case
                outcomes[case] = exc
    return outcomes


@pytest.mark.parametrize("env_id, arch", CASES)
def test_lock_resolves_with_real_pip(results, env_id, arch):
    outcome = results[(env_id, arch)]
    if isinstance(outcome, BaseException):
        raise outcome
    assert outcome == [], "\n".join(outcome)
