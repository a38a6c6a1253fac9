"""Local git repositories of the framework checkouts, made from the upstream files in tests/fixtures/frameworks.

Each repository holds the upstream files of one checkout at its pinned commit (see the README there). Commits are
made with a fixed author and date, so the same files give the same commit on every machine; the overlay this
module writes pins the framework set to those commits, as an air-gapped site pins its own mirror.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "frameworks"
_ENV = {"GIT_AUTHOR_NAME": "provision tests", "GIT_AUTHOR_EMAIL": "tests@provision.invalid",
        "GIT_COMMITTER_NAME": "provision tests", "GIT_COMMITTER_EMAIL": "tests@provision.invalid",
        "GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z",
        "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin:/usr/local/bin"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=_ENV).stdout.strip()


def commit_tree(src: Path, repo: Path, message: str) -> str:
    """A repository at `repo` whose one commit holds the files of `src`; its commit id."""
    if repo.exists():
        shutil.rmtree(repo)
    shutil.copytree(src, repo)
    git(repo, "init", "--quiet", "--initial-branch=main")
    git(repo, "add", "--all")
    git(repo, "commit", "--quiet", "--no-gpg-sign", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def from_tarball(tarball: Path, work: Path) -> Path:
    """Unpack a fixture archive (one top directory) under `work`; the directory."""
    with tarfile.open(tarball) as tar:
        tar.extractall(work, filter="data")
        top = tar.getnames()[0].split("/", 1)[0]
    return work / top


def bundle_repos(set_id: str, work: Path) -> dict[str, tuple[Path, str]]:
    """name -> (repository, commit) for the checkouts of a MindSpeed set (mindspeed-rl-2.0.0, mindspeed-llm-26.0.0,
    ...): one repository per directory of its fixture."""
    out = {}
    for src in sorted((FIXTURES / set_id).iterdir()):
        out[src.name] = (work / src.name, commit_tree(src, work / src.name, f"{src.name} (test fixture)"))
    return out


def rl_repos(work: Path) -> dict[str, tuple[Path, str]]:
    """name -> (repository, commit) for the MindSpeed-RL 2.0.0 checkouts."""
    return bundle_repos("mindspeed-rl-2.0.0", work)


def mindformers_repo(work: Path) -> tuple[Path, str]:
    src = from_tarball(FIXTURES / "mindformers-v1.7.0.tar.gz", work / "unpacked")
    return work / "mindformers", commit_tree(src, work / "mindformers", "mindformers v1.7.0 (test fixture)")


def bundle_overlay(path: Path, set_id: str, commits: dict[str, str]) -> Path:
    lines = ["llm_bundles:", f"  - id: {set_id}", "    commits:"]
    lines += [f"      {name}: {commit}" for name, commit in sorted(commits.items())]
    lines.append("    source: the test's local fixture repositories (tests/fixtures/frameworks)")
    path.write_text("\n".join(lines) + "\n")
    return path


def mindformers_overlay(path: Path, version: str, commit: str) -> Path:
    path.write_text(f'mindformers:\n  - version: "{version}"\n    commit: {commit}\n'
                    "    source: the test's local fixture repository (tests/fixtures/frameworks)\n")
    return path
