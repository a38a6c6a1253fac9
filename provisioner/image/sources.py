"""Where the framework checkouts come from, verified against the commits the matrix pins.

By default the image's builder stage clones each checkout from the URL its
recipe names, checks out the pinned 40-hex commit and fails the build unless
HEAD is that commit. `--source NAME=URL` clones from another place (a mirror),
verified the same way. `--source NAME=PATH` takes a local git repository (a
mirror, bare or not, or a checkout): the pinned commit is verified here, before
anything is written, and exported with `git archive` into the build context
(byte-stable for a commit), so an air-gapped build needs no git server at all.
A checkout whose HEAD is another commit, or that has uncommitted changes, and a
mirror without the commit are refused with both commits named.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import ProvisionError

_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://|[\w.-]+@[\w.-]+:)", re.I)
# What may reach the Dockerfile (a RUN line, a comment, an error message in double quotes): nothing a shell or
# the Dockerfile parser would read as more than a word.
_SAFE_URL = re.compile(r"^[A-Za-z0-9._~:/@%+=-]+$")
_SAFE_LABEL = re.compile(r"^[A-Za-z0-9._/+-]+$")


@dataclass(frozen=True)
class Checkout:
    name: str
    commit: str
    label: str  # the branch or tag the commit was read from (a label: refs move)
    url: str | None = None  # cloned from here in the builder stage
    archive: str | None = None  # or unpacked from this file of the build context (git archive of the commit)
    origin: str = "recipe"  # recipe | --source
    keep: str | None = None  # its path in the final image, when the image runs from it

    def to_dict(self) -> dict:
        return {"commit": self.commit, "ref": self.label, "from": self.url or f"--source {self.origin}",
                "path": self.keep}


def parse(items) -> dict[str, str]:
    """`--source NAME=PATH|URL` options as a mapping (one per name)."""
    out: dict[str, str] = {}
    for item in items or ():
        name, sep, where = str(item).partition("=")
        name = name.strip().lower().replace("-", "_")
        if not sep or not name or not where.strip():
            raise ProvisionError(f"--source {item!r}: expected NAME=PATH or NAME=URL (e.g. mindspeed=./MindSpeed)")
        if name in out:
            raise ProvisionError(f"--source {name} given twice")
        out[name] = where.strip()
    return out


def _git(path: Path, *args: str) -> str | None:
    proc = subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def verify_local(name: str, path: str, commit: str, label: str) -> bytes:
    """The tar of `commit` from the local repository at `path`, after checking it is the pinned one."""
    where = Path(path).expanduser()
    flag = f"--source {name}={path}"
    if not where.exists():
        raise ProvisionError(f"{flag}: no such directory")
    if _git(where, "rev-parse", "--git-dir") is None:
        raise ProvisionError(f"{flag}: not a git repository, so it cannot be verified against the pinned commit"
                             f" {commit} ({label}); give a clone or mirror of it")
    bare = _git(where, "rev-parse", "--is-bare-repository") == "true"
    head = _git(where, "rev-parse", "--verify", "-q", "HEAD^{commit}")
    if not bare:
        if head != commit:
            raise ProvisionError(f"{flag}: the checkout is at commit {head or 'none'}, but the set pins {commit}"
                                 f" ({label}); check out {commit} there, or pin {head} with a matrix overlay")
        if _git(where, "status", "--porcelain", "--untracked-files=no"):
            raise ProvisionError(f"{flag}: the checkout at {commit} has uncommitted changes, which the image would"
                                 " not contain; commit them (and pin that commit with an overlay) or discard them")
    elif _git(where, "rev-parse", "--verify", "-q", f"{commit}^{{commit}}") != commit:
        raise ProvisionError(f"{flag}: the mirror does not contain the pinned commit {commit} ({label}); its HEAD"
                             f" is {head or 'none'}")
    proc = subprocess.run(["git", "-C", str(where), "archive", "--format=tar", commit], capture_output=True)
    if proc.returncode:
        raise ProvisionError(f"{flag}: git archive {commit} failed: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def checkouts(repos: dict[str, dict], commits: dict[str, str], labels: dict[str, str],
              given: dict[str, str]) -> tuple[list[Checkout], dict[str, bytes]]:
    """The checkouts of a set (recipe URL or --source) and the archives they put into the build context."""
    unknown = sorted(set(given) - set(commits))
    if unknown:
        raise ProvisionError(f"--source {unknown[0]}: the stack's framework set has no such checkout"
                             f" (it has: {', '.join(sorted(commits))})")
    out, files = [], {}
    for name, commit in commits.items():
        spec = repos.get(name)
        if spec is None:
            raise ProvisionError(f"the recipe names no repository for checkout {name!r} (pinned at {commit})")
        label = labels.get(name) or commit[:12]
        where = given.get(name)
        keep = spec.get("dir")
        if not _SAFE_LABEL.match(label):
            raise ProvisionError(f"checkout {name}: ref label {label!r} has characters a Dockerfile must not carry")
        url = spec["url"] if where is None else where
        if (where is None or _URL.match(where)) and not _SAFE_URL.match(url):
            raise ProvisionError(f"checkout {name}: URL {url!r} has characters a Dockerfile must not carry"
                                 " (letters, digits and ._~:/@%+=- only)")
        if where is None:
            out.append(Checkout(name, commit, label, url=spec["url"], keep=keep))
        elif _URL.match(where):
            out.append(Checkout(name, commit, label, url=where, origin=f"{name}={where}", keep=keep))
        else:
            rel = f"sources/{name}.tar"
            files[rel] = verify_local(name, where, commit, label)
            out.append(Checkout(name, commit, label, archive=rel, origin=f"{name}=PATH", keep=keep))
    return out, files
