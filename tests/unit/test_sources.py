"""`--source NAME=PATH|URL`: local repositories verified against the pinned commit, refusals name both commits."""

from __future__ import annotations

import io
import subprocess
import tarfile

import pytest

from provisioner.errors import ProvisionError
from provisioner.image import sources
from tests.helpers import fwrepos

REPOS = {"mindspeed": {"url": "https://example.invalid/MindSpeed.git"},
         "megatron": {"url": "https://example.invalid/Megatron-LM.git", "dir": "/opt/Megatron-LM"}}


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    return fwrepos.rl_repos(tmp_path_factory.mktemp("fwrepos"))


def test_fixture_commits_are_stable(repos, tmp_path):
    again = fwrepos.rl_repos(tmp_path)
    assert {k: c for k, (_, c) in again.items()} == {k: c for k, (_, c) in repos.items()}


def test_local_checkout_at_the_pinned_commit_becomes_an_archive(repos):
    path, commit = repos["mindspeed"]
    got, files = sources.checkouts(REPOS, {"mindspeed": commit}, {"mindspeed": "core_r0.8.0"},
                                   {"mindspeed": str(path)})
    (co,) = got
    assert co.archive == "sources/mindspeed.tar" and co.url is None and co.commit == commit
    blob = files["sources/mindspeed.tar"]
    # git archive records the commit in the tar (read back by the build with git get-tar-commit-id).
    proc = subprocess.run(["git", "get-tar-commit-id"], input=blob, capture_output=True)
    assert proc.stdout.decode().strip() == commit
    names = tarfile.open(fileobj=io.BytesIO(blob)).getnames()
    assert "requirements.txt" in names and "mindspeed/__init__.py" in names
    # byte-stable: the same commit gives the same bytes
    assert sources.checkouts(REPOS, {"mindspeed": commit}, {}, {"mindspeed": str(path)})[1] == files


def test_checkout_at_another_commit_is_refused_with_both_commits(repos, tmp_path):
    path, commit = repos["megatron"]
    wrong = "0" * 40
    with pytest.raises(ProvisionError) as err:
        sources.checkouts(REPOS, {"megatron": wrong}, {"megatron": "core_r0.8.0"}, {"megatron": str(path)})
    assert commit in str(err.value) and wrong in str(err.value) and "core_r0.8.0" in str(err.value)


def test_dirty_checkout_is_refused(repos, tmp_path):
    path, commit = fwrepos.rl_repos(tmp_path)["mindspeed"]
    (path / "requirements.txt").write_text("torch==0.0.0\n")
    with pytest.raises(ProvisionError, match="uncommitted changes"):
        sources.checkouts(REPOS, {"mindspeed": commit}, {}, {"mindspeed": str(path)})


def test_bare_mirror_with_and_without_the_commit(repos, tmp_path):
    path, commit = repos["mindspeed"]
    mirror = tmp_path / "MindSpeed.git"
    subprocess.run(["git", "clone", "--quiet", "--mirror", str(path), str(mirror)], check=True)
    got, files = sources.checkouts(REPOS, {"mindspeed": commit}, {}, {"mindspeed": str(mirror)})
    assert got[0].archive and files
    with pytest.raises(ProvisionError) as err:
        sources.checkouts(REPOS, {"mindspeed": "1" * 40}, {"mindspeed": "v2.0.0"}, {"mindspeed": str(mirror)})
    assert "does not contain the pinned commit " + "1" * 40 in str(err.value) and commit in str(err.value)


def test_plain_directory_cannot_be_verified(tmp_path):
    (tmp_path / "requirements.txt").write_text("numpy\n")
    with pytest.raises(ProvisionError, match="not a git repository"):
        sources.checkouts(REPOS, {"mindspeed": "a" * 40}, {}, {"mindspeed": str(tmp_path)})


def test_url_sources_are_cloned_and_checked_in_the_build():
    got, files = sources.checkouts(REPOS, {"megatron": "b" * 40}, {"megatron": "core_r0.8.0"},
                                   {"megatron": "http://mirror.example.invalid/Megatron-LM.git"})
    assert got[0].url == "http://mirror.example.invalid/Megatron-LM.git" and not files
    assert got[0].keep == "/opt/Megatron-LM"
    default, _ = sources.checkouts(REPOS, {"mindspeed": "c" * 40}, {}, {})
    assert default[0].url == REPOS["mindspeed"]["url"]


@pytest.mark.parametrize("items, message", [
    (["mindspeed"], "expected NAME=PATH"),
    (["=x"], "expected NAME=PATH"),
    (["mindspeed=a", "mindspeed=b"], "given twice"),
])
def test_parse_refuses_bad_options(items, message):
    with pytest.raises(ProvisionError, match=message):
        sources.parse(items)


def test_unknown_checkout_name_lists_the_known_ones():
    with pytest.raises(ProvisionError, match=r"no such checkout \(it has: mindspeed\)"):
        sources.checkouts(REPOS, {"mindspeed": "c" * 40}, {}, {"vllm": "/x"})


def test_parse_normalises_names():
    assert sources.parse(["MindSpeed-LLM=./x", "vllm_ascend=https://h/v.git"]) == {
        "mindspeed_llm": "./x", "vllm_ascend": "https://h/v.git"}


@pytest.mark.parametrize("args, message", [
    (["--profile", "mindspeed-rl-2.0.0-grpo", "--source", "mindspeed=/nonexistent"],
     "--source mindspeed=/nonexistent: no such directory"),
    (["--card", "300T-A2", "--source", "mindspeed=/tmp"], "--source mindspeed: recipe 'pytorch' makes no checkouts"),
    (["--profile", "mindspeed-rl-2.0.0-grpo", "--source", "bogus"], "--source 'bogus': expected NAME=PATH"),
])
def test_cli_refuses_bad_sources_in_one_line(tmp_path, args, message):
    import sys
    from pathlib import Path

    out = tmp_path / "ctx"
    proc = subprocess.run([sys.executable, "-m", "provisioner.cli", "render", *args, "-o", str(out)],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"provision: error: {message}" or proc.stderr.strip().startswith(
        f"provision: error: {message}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.parametrize("given, labels, message", [
    ({"mindspeed": 'http://h/x.git" && touch /pwned #'}, {}, "URL"),
    ({}, {"mindspeed": "v1\nRUN evil"}, "ref label"),
])
def test_nothing_unvalidated_reaches_the_dockerfile(given, labels, message):
    with pytest.raises(ProvisionError, match=message):
        sources.checkouts(REPOS, {"mindspeed": "c" * 40}, labels, given)
