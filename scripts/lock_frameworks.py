#!/usr/bin/env python3
"""Maintainer tool: lock the environments of matrices/frameworks.yaml with real pip.

    python scripts/lock_frameworks.py ENV_ID [ENV_ID ...] --repo NAME=GIT [--repo ...] [--write]
    python scripts/lock_frameworks.py --all --repo ... --write

For each environment (a framework set + torch line or MindSpore + Python) it
reads the upstream requirement files of the steps at the set's pinned commits
(`--repo mindspeed=DIR` for each checkout the steps name: a git mirror, bare or
not, of Ascend/MindSpeed and so on; the `fetch` snapshots work) and the pinned
sdists (downloaded once into .cache/provision/sdists, sha256-checked), replays
the upstream install order with pip for the row's Python on x86_64 and aarch64
(provisioner/image/fwlock.py), and prints - or with --write stores in the row -
the layers, overrides, conflicts and input digests. sdist-only packages are
built into .cache/provision/sdist-wheels (pure-Python wheels only) so pip can
resolve them for another interpreter.

Needs the network to PyPI (through PIP_CERT's CA where set).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from importlib import metadata
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from provisioner.image import fwlock  # noqa: E402
from provisioner.image.pipreport import Pip, Target, norm  # noqa: E402

CACHE = ROOT / ".cache" / "provision"
GENERATED = ("resolved", "inputs", "layers", "sources", "overrides", "conflicts")
SOURCES_NOTE = "    # what the packages built from source declare (their upstream file): checked like the lock"


def load(name: str) -> dict:
    return yaml.safe_load((ROOT / "matrices" / name).read_text())


class Inputs:
    """Upstream files at pinned commits (git mirrors) and pinned sdists, with their digests."""

    def __init__(self, repos: dict[str, str], commits: dict[str, str], sdists: dict[str, dict]):
        self.repos, self.commits, self.sdists = repos, commits, sdists
        self.digests: dict[str, str] = {}

    def checkout(self, name: str, path: str) -> str:
        if name not in self.commits:
            raise SystemExit(f"the set pins no commit for checkout {name!r}")
        if name not in self.repos:
            raise SystemExit(f"--repo {name}=GITDIR is needed (a mirror holding commit {self.commits[name]})")
        gitdir = Path(self.repos[name])
        if (gitdir / ".git").exists():
            gitdir = gitdir / ".git"
        proc = subprocess.run(["git", "--git-dir", str(gitdir), "show", f"{self.commits[name]}:{path}"],
                              capture_output=True)
        if proc.returncode:
            raise SystemExit(f"{name} @ {self.commits[name]}: {path}: {proc.stderr.decode().strip()}")
        return self._seen(f"{name}@{self.commits[name][:12]}:{path}", proc.stdout)

    def sdist(self, name: str, path: str) -> str:
        spec = self.sdists[name]
        dest = CACHE / "sdists" / spec["url"].rsplit("/", 1)[1]
        if not dest.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            with urllib.request.urlopen(spec["url"], timeout=120) as resp:
                dest.write_bytes(resp.read())
        blob = dest.read_bytes()
        if hashlib.sha256(blob).hexdigest() != spec["sha256"]:
            dest.unlink()
            raise SystemExit(f"{dest.name}: sha256 differs from the matrix ({spec['sha256']})")
        with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
            member = next(m for m in tar.getmembers() if m.name.split("/", 1)[-1] == path)
            data = tar.extractfile(member).read()
        return self._seen(f"{name}-{spec['version']}.sdist:{path}", data)

    def _seen(self, key: str, data: bytes) -> str:
        self.digests[key] = hashlib.sha256(data).hexdigest()
        return data.decode("utf-8")


def steps_of(env: dict, inputs: Inputs) -> tuple[list[fwlock.Step], dict[str, tuple[str, ...]]]:
    steps, requires = [], {}
    for raw in env["steps"]:
        if "file" in raw:
            f = raw["file"]
            kind = "checkout" if "checkout" in f else "sdist"
            def read(p, f=f, kind=kind):
                return getattr(inputs, kind)(f[kind], p)

            folder = f["path"].rsplit("/", 1)[0] + "/" if "/" in f["path"] else ""
            text = read(f["path"])
            origin = (f"{f[kind]} @ {inputs.commits[f[kind]][:8]}: {f['path']}" if kind == "checkout"
                      else f"{f[kind]} {inputs.sdists[f[kind]]['version']} sdist: {f['path']}")
            reqs = fwlock.parse_requirements(text, origin, include=lambda p, read=read, folder=folder: read(folder + p))
        else:
            reqs, origin = list(raw["requirements"]), f"{raw['name']} step"
        reqs, done = fwlock.substitute(reqs, raw.get("substitute"))
        if done:
            origin += f", substituted: {'; '.join(done)}"
        steps.append(fwlock.Step(raw["name"], raw["title"], tuple(reqs), origin, bool(raw.get("no_deps"))))
        pkg = raw.get("package")
        if pkg and pkg.get("declares", True):
            requires[norm(pkg["name"])] = tuple(reqs)
    return steps, requires


def active(lines: list[str], target: Target) -> list[str]:
    from packaging.requirements import Requirement

    out = []
    for line in lines:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(target.markers()):
            out.append(f"{norm(req.name)}{req.specifier}")
    return out


def project_requirements() -> list[str]:
    import tomllib

    return list(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"])


def commits_of(env: dict) -> dict[str, str]:
    bundles = {b["id"]: b for b in load("mindspeed.yaml")["llm_bundles"]}
    if env["set"] in bundles:
        return dict(bundles[env["set"]]["commits"])
    mfs = {f"mindformers-{r['version']}": r for r in load("mindspore.yaml")["mindformers"]}
    return {"mindformers": mfs[env["set"]]["commit"]}


def lock_env(env: dict, repos: dict[str, str], pip: Pip, archs: list[str]) -> dict:
    sets = {r["id"]: r for r in load("packages.yaml")["packages"]}
    inputs = Inputs(repos, commits_of(env), env.get("sdists") or {})
    steps, extra_requires = steps_of(env, inputs)
    base_set = sets.get(env.get("base_set")) if env.get("base_set") else None
    targets = {r["arch"]: r["platforms"] for r in load("frameworks.yaml")["lock_targets"]}

    def one(arch: str) -> fwlock.Result:
        target = Target(env["python"], arch, tuple(targets[arch]))
        base_reqs = project_requirements()
        if env.get("torch"):
            hard = {"torch": env["torch"]}
            npu = (f"torch-npu=={env['torch_npu']}" if env.get("torch_npu")
                   else next(r for r in base_set["resolved_with"] if r.startswith("torch-npu==")))
            hard["torch-npu"] = npu.split("==", 1)[1]
            npu_item = pip.report(target, [npu], no_deps=True)[0]
            base_reqs += [r for r in npu_item.requires if norm(re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0]) != "torch"]
            base_reqs.append(f"torch=={env['torch']}")
            extra = {**extra_requires, "torch-npu": npu_item.requires}
        else:
            hard = {"mindspore": env["mindspore"]}
            base_reqs.append(f"mindspore=={env['mindspore']}")
            extra = dict(extra_requires)
        cons = active(base_set["lock"], target) if base_set else []
        cons = [c for c in cons if norm(re.split(r"[<>=!~ ]", c, maxsplit=1)[0]) not in hard]
        base = fwlock.Step("base", "the stack's framework and provision's requirements", tuple(base_reqs),
                           f"torch line {env.get('base_set') or 'resolved fresh'}")
        result = fwlock.replay(pip, target, hard, base, cons, steps, extra)
        result.torch_line = {norm(re.split(r"[<>=!~ ]", c, maxsplit=1)[0]): c.split("==", 1)[1] for c in cons}
        return result

    with ThreadPoolExecutor(max_workers=len(archs)) as pool:
        results = dict(zip(archs, pool.map(one, archs), strict=True))
    return merge(env, results, inputs)


def merge(env: dict, results: dict[str, fwlock.Result], inputs: Inputs) -> dict:
    order = ["base"] + [s["name"] for s in env["steps"]]
    per: dict[tuple[str, str], set[str]] = {}  # (step, line) -> archs
    for arch, res in results.items():
        for name, entry in res.state.items():
            per.setdefault((entry.step, f"{name}=={entry.version}"), set()).add(arch)
    layers: dict[str, list[str]] = {}
    for (step, line), archs in sorted(per.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])):
        if archs != set(results):
            line += f" ; platform_machine == '{next(iter(archs))}'"
        layers.setdefault(step, []).append(line)
    overrides: dict[tuple, dict] = {}
    for arch, res in results.items():
        for name, entry in sorted(res.state.items()):
            was = res.torch_line.get(name)
            if was is None or was == entry.version:
                continue
            from packaging.requirements import Requirement

            by = [w for w in entry.why if not Requirement(w.split(" (", 1)[0]).specifier.contains(was, True)]
            key = (name, was, entry.version, entry.step)
            row = overrides.setdefault(key, {"package": name, "torch_line": was, "lock": entry.version,
                                             "step": entry.step, "by": by or list(entry.why)[:3], "archs": []})
            row["archs"].append(arch)
    conflicts: dict[tuple, dict] = {}
    for arch, res in results.items():
        for c in res.conflicts:
            key = (c["package"], c["requires"], c["installed"])
            conflicts.setdefault(key, {k: v for k, v in c.items() if k != "arch"} | {"archs": []})["archs"].append(arch)
    for row in [*overrides.values(), *conflicts.values()]:
        if set(row["archs"]) == set(results):
            del row["archs"]
    return {
        "resolved": {"pip": metadata.version("pip"), "on": date.today().isoformat(),
                     "archs": sorted(results), "python": env["python"]},
        "inputs": dict(sorted(inputs.digests.items())),
        "layers": layers,
        "overrides": list(overrides.values()),
        "conflicts": list(conflicts.values()),
    }


def explain(out: dict) -> dict:
    """Say so where nothing in a step excludes the torch line's version of a package it changed.

    That happens for a package that was not in the environment before the step (the base holds only what the
    framework and provision need): pip then took the newest release the step's requirements allow.
    """
    from packaging.requirements import InvalidRequirement, Requirement

    for row in out["overrides"]:
        excluding = []
        for text in row["by"]:
            try:
                req = Requirement(text.split(" (", 1)[0])
            except InvalidRequirement:
                continue
            if not req.specifier.contains(row["torch_line"], prereleases=True):
                excluding.append(text)
        if not excluding and not all(t.startswith("new in this step") for t in row["by"]):
            row["by"] = [f"new in this step, newest allowed by: {t}" for t in row["by"]] or ["new in this step"]
    return out


def dump(out: dict) -> list[str]:
    """The generated keys as YAML lines at row indentation (stable, one lock line per line)."""
    lines = []
    for key in ("resolved", "inputs"):
        lines.append(f"    {key}:")
        lines += [f"      {json.dumps(k)}: {json.dumps(v)}" for k, v in out[key].items()]
    lines.append(SOURCES_NOTE)
    lines.append("    sources:" if out["sources"] else "    sources: {}")
    lines += [f"      {json.dumps(k)}: {json.dumps(v)}" for k, v in out["sources"].items()]
    lines.append("    layers:")
    for step, items in out["layers"].items():
        lines.append(f"      {json.dumps(step)}:")
        lines += [f"        - {json.dumps(x)}" for x in items]
    for key in ("overrides", "conflicts"):
        if not out[key]:
            lines.append(f"    {key}: []")
            continue
        lines.append(f"    {key}:")
        lines += [f"      - {json.dumps(x, ensure_ascii=False)}" for x in out[key]]
    return lines


def write_back(text: str, env_id: str, out: dict) -> str:
    lines = text.split("\n")
    start = lines.index(f"  - id: {env_id}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("  - id: ")), len(lines))
    while end > start and not lines[end - 1].strip():
        end -= 1
    row, kept, skip = lines[start:end], [], False
    for line in row:
        if line == SOURCES_NOTE:  # written by dump() with the keys below, so replaced with them
            continue
        if line.startswith("    ") and not line.startswith("     "):
            skip = line.strip().split(":", 1)[0] in GENERATED
        if not skip:
            kept.append(line)
    return "\n".join(lines[:start] + kept + dump(out) + lines[end:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("envs", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--repo", action="append", default=[], metavar="NAME=GITDIR")
    parser.add_argument("--arch", action="append", choices=["x86_64", "aarch64"])
    parser.add_argument("--index-url", default="https://pypi.org/simple")
    parser.add_argument("--write", action="store_true", help="store the result in matrices/frameworks.yaml")
    parser.add_argument("--save", metavar="DIR", help="also keep each result as DIR/ENV_ID.json")
    parser.add_argument("--load", metavar="DIR", help="write results kept with --save instead of resolving")
    args = parser.parse_args()
    repos = dict(item.split("=", 1) for item in args.repo)
    rows = {r["id"]: r for r in load("frameworks.yaml")["framework_envs"]}
    wanted = list(rows) if args.all else args.envs
    unknown = [w for w in wanted if w not in rows]
    if unknown or not wanted:
        print(f"unknown or no environment {unknown} (known: {', '.join(rows)})", file=sys.stderr)
        return 2
    pip = Pip(index_url=args.index_url, cert=os.environ.get("PIP_CERT"), wheels=CACHE / "sdist-wheels")
    path = ROOT / "matrices" / "frameworks.yaml"
    for env_id in wanted:
        if args.load:
            out = json.loads(Path(args.load, f"{env_id}.json").read_text())
        else:
            out = lock_env(rows[env_id], repos, pip, args.arch or ["x86_64", "aarch64"])
        inputs = Inputs(repos, commits_of(rows[env_id]), rows[env_id].get("sdists") or {})
        out["sources"] = {name: list(reqs) for name, reqs in sorted(steps_of(rows[env_id], inputs)[1].items())}
        out = explain(out)
        if args.save:
            Path(args.save).mkdir(parents=True, exist_ok=True)
            Path(args.save, f"{env_id}.json").write_text(json.dumps(out, indent=1))
        n = sum(len(v) for v in out["layers"].values())
        print(f"{env_id}: {n} lines in {len(out['layers'])} layers, {len(out['overrides'])} overrides,"
              f" {len(out['conflicts'])} conflicts", file=sys.stderr)
        if args.write:
            path.write_text(write_back(path.read_text(), env_id, out))
        else:
            print("\n".join(dump(out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
