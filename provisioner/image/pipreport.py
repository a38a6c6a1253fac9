"""Real pip, asked about another interpreter and CPU: `pip install --dry-run --report` for a target.

pip's `--python-version` and `--platform` choose wheels by their tags and
Requires-Python, but pip evaluates environment markers (`; python_version <
"3.11"`, `; platform_machine == "x86_64"`) against the interpreter it runs on.
Resolving for Python 3.10 on aarch64 from an x86_64 machine with Python 3.11
would then follow the wrong branches of every marker. So pip runs here in a
child process whose marker environment is the target's (pip's vendored
`packaging` computes it in one function, which the child replaces before pip
starts); everything else is pip as installed.

Used by scripts/lock_frameworks.py (through provisioner.image.fwlock) and by the
tests that check each framework lock with real pip. Nothing here runs when the
CLI renders or builds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from provisioner.errors import ProvisionError

# Runs in the child: make pip's marker environment the target's, then run pip's main.
_CHILD = """
import json, os, sys
from pip._vendor.packaging import markers
_env = json.loads(os.environ["PROVISION_TARGET_MARKERS"])
markers._cached_default_environment = lambda: _env
from pip._internal.cli.main import main
sys.exit(main(sys.argv[1:]))
"""

_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Target:
    """The interpreter and CPU a lock is for (Linux, CPython)."""

    python: str  # "3.10"
    arch: str  # x86_64 | aarch64
    platforms: tuple[str, ...]  # wheel platform tags pip may take, e.g. manylinux_2_28_aarch64

    def markers(self) -> dict[str, str]:
        return {"implementation_name": "cpython", "implementation_version": f"{self.python}.0", "os_name": "posix",
                "platform_machine": self.arch, "platform_release": "", "platform_system": "Linux",
                "platform_version": "", "python_full_version": f"{self.python}.0",
                "platform_python_implementation": "CPython", "python_version": self.python, "sys_platform": "linux"}

    def label(self) -> str:
        return f"Python {self.python} {self.arch}"


@dataclass(frozen=True)
class Item:
    """One distribution in pip's report."""

    name: str  # normalised
    version: str
    requires: tuple[str, ...]
    url: str

    @property
    def line(self) -> str:
        return f"{self.name}=={self.version}"


class PipFailed(ProvisionError):
    """pip could not resolve (its own words are in .detail)."""

    def __init__(self, message: str, detail: str):
        super().__init__(message)
        self.detail = detail


@dataclass
class Pip:
    """How to reach an index: one place for the index URL, a CA bundle and a folder of locally built wheels."""

    index_url: str = "https://pypi.org/simple"
    cert: str | None = None
    wheels: Path | None = None  # wheels built here from sdist-only packages (pure Python), kept as a cache
    python: str = sys.executable

    def env(self, target: Target) -> dict[str, str]:
        # This machine's pip settings (extra indexes, constraint files, find-links) must not leak into a lock.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env["PIP_CONFIG_FILE"] = os.devnull
        env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
        env["PROVISION_TARGET_MARKERS"] = json.dumps(target.markers())
        return env

    def base_args(self) -> list[str]:
        args = ["--index-url", self.index_url]
        if self.cert:
            args += ["--cert", self.cert]
        if self.wheels is not None:
            self.wheels.mkdir(parents=True, exist_ok=True)
            args += ["--find-links", str(self.wheels)]
        return args

    def report(self, target: Target, requirements: list[str], constraints: list[str] | tuple[str, ...] = (), no_deps: bool = False,
               build_missing: bool = True) -> list[Item]:
        """The distributions `pip install` would install for `requirements` on `target` (nothing installed)."""
        for _ in range(12):
            try:
                return self._report(target, requirements, constraints, no_deps)
            except PipFailed as exc:
                wanted = _NO_MATCH.search(exc.detail)
                if not (build_missing and self.wheels is not None and wanted and self._build_wheel(wanted.group(1))):
                    raise
        raise PipFailed("pip: too many sdist-only packages to build", "")

    def _report(self, target, requirements, constraints, no_deps) -> list[Item]:
        with tempfile.TemporaryDirectory(prefix="provision-pip-") as tmp:
            req = Path(tmp, "requirements.txt")
            req.write_text("".join(f"{r}\n" for r in requirements), encoding="utf-8")
            # fast-deps: read a wheel's METADATA with HTTP range requests. An index without PEP 658 metadata
            # files (this one's proxy serves none) otherwise makes pip download every wheel it considers,
            # torch and MindSpore included (hundreds of MB each), just to learn their requirements.
            args = [self.python, "-c", _CHILD, "install", "--dry-run", "--ignore-installed", "--quiet",
                    "--use-feature=fast-deps", "--report", "-", "--python-version", target.python,
                    "--only-binary=:all:", "-r", str(req)]
            for plat in target.platforms:
                args += ["--platform", plat]
            if constraints:
                con = Path(tmp, "constraints.txt")
                con.write_text("".join(f"{c}\n" for c in constraints), encoding="utf-8")
                args += ["-c", str(con)]
            if no_deps:
                args.append("--no-deps")
            proc = subprocess.run(args + self.base_args(), capture_output=True, text=True, env=self.env(target))
        if proc.returncode:
            lines = [x for x in proc.stderr.splitlines() if x.startswith("ERROR")] or proc.stderr.splitlines()[-5:]
            raise PipFailed(f"pip could not resolve for {target.label()}: {lines[-1] if lines else 'failed'}",
                            proc.stderr)
        data = json.loads(proc.stdout)
        out = []
        for entry in data["install"]:
            meta = entry["metadata"]
            out.append(Item(norm(meta["name"]), meta["version"], tuple(meta.get("requires_dist") or ()),
                            entry["download_info"]["url"]))
        return out

    def _build_wheel(self, requirement: str) -> bool:
        """Build a wheel of a package the index has only as an sdist; only a pure-Python wheel is kept."""
        from packaging.requirements import Requirement

        req = Requirement(requirement)
        if self.wheels is None:
            return False  # nowhere to keep a built wheel: the index's answer stands
        for kept in self.wheels.glob("*.whl"):
            name, version = kept.name.split("-")[:2]
            if norm(name) == norm(req.name) and req.specifier.contains(version, prereleases=True):
                return False  # built before and still not enough: the requirement itself cannot be met
        with tempfile.TemporaryDirectory(prefix="provision-wheel-") as tmp:
            env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
            env["PIP_CONFIG_FILE"] = os.devnull
            proc = subprocess.run([self.python, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-binary", ":all:",
                                   "-w", tmp, requirement, *self.base_args()], capture_output=True, text=True, env=env)
            built = list(Path(tmp).glob("*.whl"))
            if proc.returncode or not built:
                return False
            for wheel in built:
                if not wheel.name.endswith("-py3-none-any.whl") and not wheel.name.endswith("-py2.py3-none-any.whl"):
                    raise ProvisionError(f"{requirement}: the index has only an sdist, and it builds a platform wheel"
                                         f" ({wheel.name}): it cannot be resolved for another interpreter here")
                wheel.replace(self.wheels / wheel.name)
        return True


def applies(requirement, target: Target, extras: tuple[str, ...] = ("",)) -> bool:
    """Whether a requirement's marker holds on the target (for any of the given extras)."""
    if requirement.marker is None:
        return True
    env = target.markers()
    return any(requirement.marker.evaluate({**env, "extra": e}) for e in extras)
