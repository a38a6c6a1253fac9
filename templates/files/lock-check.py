"""Check a virtual environment against the image's requirements.lock (runs in a builder stage).

    python lock-check.py requirements.lock [--allow NAME ...] [--accept PKG:REQ ...] [--strict]

Fails (exit 1) when a locked package is missing or at another version, or when a
package in the venv lacks one of its requirements (what `pip check` reports, for
the venv's packages) - except the unmet requirements named with --accept
(`PKG:REQUIREMENT`, as matrices/frameworks.yaml records the conflicts upstream's
own install order leaves), which are listed as accepted. Lists packages in the venv that the lock does not name
(allowed ones aside): an error with --strict, otherwise a warning written to
<venv>/share/provision/unlocked.txt. Packages of the base image that the venv now
shadows with versions they do not accept are warnings: the venv wins for code
run in it. Standard library and pip's vendored `packaging` only.
"""

import argparse
import re
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
from pip._vendor.packaging.version import InvalidVersion, Version


def norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path):
    locked = {}
    for raw in Path(path).read_text(encoding="utf-8").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        (spec,) = req.specifier
        locked[norm(req.name)] = spec.version
    return locked


def same(a, b):
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def dists(paths):
    out = {}
    for dist in metadata.distributions(path=paths):
        name = dist.metadata["Name"]
        if name:
            out.setdefault(norm(name), dist)
    return out


def unmet(dist, view):
    """(required name, message) for each requirement of `dist` that `view` does not meet."""
    problems = []
    for text in dist.requires or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        have = view.get(norm(req.name))
        if have is None:
            problems.append((norm(req.name), f"{dist.metadata['Name']} {dist.version} requires {req},"
                                              " which is not installed", req))
        elif req.specifier and not req.specifier.contains(have.version, prereleases=True):
            problems.append((norm(req.name), f"{dist.metadata['Name']} {dist.version} requires {req},"
                                              f" but {have.version} is installed", req))
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lock")
    parser.add_argument("--allow", action="append", default=[], help="a package that rightly is not in the lock")
    parser.add_argument("--strict", action="store_true", help="packages missing from the lock are errors")
    parser.add_argument("--accept", action="append", default=[],
                        help="PKG:REQUIREMENT: an unmet requirement upstream's install order leaves (accepted)")
    args = parser.parse_args()

    venv_paths = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    venv = dists(venv_paths)
    system = dists([p for p in sys.path if p and p not in venv_paths])
    view = {**system, **venv}  # the venv's site-packages come first on sys.path
    locked = read_lock(args.lock)
    allowed = {norm(a) for a in args.allow}

    errors, warnings = [], []
    for name, version in sorted(locked.items()):
        dist = venv.get(name)
        if dist is None:
            errors.append(f"{name}=={version} is in the lock but not installed")
        elif not same(dist.version, version):
            errors.append(f"{name} is {dist.version}, the lock says {version}")
    accepted = {}
    for item in args.accept:
        pkg, _, text = item.partition(":")
        accepted[(norm(pkg), str(Requirement(text)))] = False
    for name, dist in sorted(venv.items()):
        for needed, message, req in unmet(dist, view):
            key = (name, str(req))
            if key in accepted:
                accepted[key] = True
                warnings.append(f"accepted upstream conflict: {message}")
            else:
                errors.append(message)
    for (pkg, text), seen in sorted(accepted.items()):
        if not seen:
            warnings.append(f"the accepted conflict {pkg}: {text} did not occur")
    unlocked = sorted(f"{dist.metadata['Name']}=={dist.version}" for name, dist in venv.items()
                      if name not in locked and name not in allowed)
    (errors if args.strict else warnings).extend(f"{u} is installed but not in the lock" for u in unlocked)
    for name, dist in sorted(system.items()):
        if name not in venv:
            warnings += [f"base image package {message} (from the venv)" for needed, message, _ in unmet(dist, view)
                         if needed in venv]
    if not args.strict:
        out = Path(sys.prefix, "share", "provision", "unlocked.txt")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join(f"{u}\n" for u in unlocked), encoding="utf-8")
    for w in warnings:
        print(f"lock check: warning: {w}")
    for e in errors:
        print(f"lock check: error: {e}", file=sys.stderr)
    if errors:
        print(f"lock check: {len(errors)} problem(s); the lock ({args.lock}) and the environment disagree",
              file=sys.stderr)
        return 1
    print(f"lock check: {len(locked)} locked packages at their locked versions, every requirement met"
          f" ({len(venv)} packages in the venv, {len(unlocked)} not in the lock)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
