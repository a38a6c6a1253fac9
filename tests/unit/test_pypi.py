"""Index access the way pip does it: pip's own settings, simple-API pages, wheel metadata by HTTP ranges."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from provisioner.matrix import pypi, snapshot
from tests.helpers.index_server import IndexServer, make_wheel


def _torch_wheels() -> list[Path]:
    """A real CPU torch wheel: the test wheelhouse (make test) or pip's find-links."""
    dirs = [os.environ.get("PROVISION_TEST_WHEELHOUSE", ""), *os.environ.get("PIP_FIND_LINKS", "").split()]
    return sorted(p for d in dirs if d and Path(d).is_dir() for p in Path(d).glob("torch-*.whl"))


@pytest.mark.parametrize("filename, pythons, arch", [
    ("torch_npu-2.1.0.post3-cp38-cp38-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", ("3.8",), "x86_64"),
    ("torch_npu-2.13.0-cp314-cp314-manylinux_2_28_aarch64.whl", ("3.14",), "aarch64"),
    ("mindspore-2.9.0-cp310-none-any.whl", ("3.10",), "any"),
    ("mindspore-2.9.0-cp310-cp310-macosx_11_0_arm64.whl", ("3.10",), None),
    ("pkg-1.0-1-py2.py3-none-any.whl", ("2", "3"), "any"),
])
def test_wheel_tags(filename, pythons, arch):
    tags = pypi.wheel_tags(filename)
    assert tags.pythons == pythons and tags.arch == arch


def test_sdists_are_not_wheels():
    assert pypi.wheel_tags("torch_npu-2.1.0.tar.gz") is None


def _pip_settings(env_extra: dict, tmp_path: Path) -> pypi.PipSettings:
    """pip_settings() run in a child with this environment: real `pip config list`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(env_extra)
    code = ("import json; from provisioner.matrix import pypi; s = pypi.pip_settings();"
            "print(json.dumps([s.index_url, s.cert, s.proxy, s.trusted_hosts, s.timeout, s.origin]))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=tmp_path).stdout
    index_url, cert, proxy, trusted, timeout, origin = json.loads(out)
    return pypi.PipSettings(index_url, cert, None, proxy, tuple(trusted), timeout, origin)


def test_pip_settings_follow_pips_precedence(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://mirror.example/simple\nproxy = http://proxy.example:3128\n"
                    "timeout = 30\n[install]\nindex-url = https://install-section.example/simple\n")
    s = _pip_settings({"PIP_CONFIG_FILE": str(conf)}, tmp_path)
    assert s.index_url == "https://install-section.example/simple"  # the command's section beats [global]
    assert s.proxy == "http://proxy.example:3128" and s.timeout == 30.0
    s = _pip_settings({"PIP_CONFIG_FILE": str(conf), "PIP_INDEX_URL": "https://env.example/simple/",
                       "PIP_TRUSTED_HOST": "a.example b.example", "PIP_CERT": "/etc/ssl/certs/ca-certificates.crt"},
                      tmp_path)
    assert s.index_url == "https://env.example/simple" and s.origin["index-url"] == "environment"
    assert s.trusted_hosts == ("a.example", "b.example") and s.cert == "/etc/ssl/certs/ca-certificates.crt"


def test_pip_settings_default_to_pypi(tmp_path):
    conf = tmp_path / "empty.conf"
    conf.write_text("")
    s = _pip_settings({"PIP_CONFIG_FILE": str(conf)}, tmp_path)
    assert s.index_url == pypi.DEFAULT_INDEX


def test_parse_pip_config_text():
    got = pypi.parse_pip_config("global.index-url='https://a/simple'\ninstall.index-url='https://b/simple'\n"
                                ":env:.index-url='https://c/simple'\nglobal.cert='/x y/ca.pem'\n")
    assert got["index-url"] == ("https://c/simple", ":env:") and got["cert"] == ("/x y/ca.pem", "global")


@pytest.fixture
def wheels(tmp_path):
    d = tmp_path / "wheels"
    d.mkdir()
    return {
        "torch-npu": [
            make_wheel(d, "torch_npu", "2.9.0", "cp310-cp310-manylinux_2_28_x86_64", ["torch==2.9.0+cpu", "numpy"],
                       filler=3_000_000),
            make_wheel(d, "torch_npu", "2.9.0", "cp310-cp310-manylinux_2_28_aarch64", ["torch ==2.9.0", "pyyaml"],
                       filler=3_000_000),
        ],
    }


@pytest.mark.parametrize("style", ["json", "html"])
def test_metadata_is_read_by_ranges_not_by_downloading(wheels, style):
    with IndexServer(wheels, style=style) as srv:
        index = pypi.Index(pypi.PipSettings(index_url=f"{srv.url}/simple"), use_cache=False)
        files = index.files("torch_npu")  # the name is normalised: torch-npu
        assert sorted(f.filename for f in files) == sorted(p.name for p in wheels["torch-npu"])
        pins = {pypi.wheel_tags(f.filename).arch: snapshot.normalize_pin(index.metadata(f)["requires_dist"], "torch")
                for f in files}
    assert pins == {"x86_64": "torch==2.9.0+cpu", "aarch64": "torch==2.9.0"}
    assert all(r[1] for r in srv.requests if r[0].startswith("/files/"))  # every wheel request asked for a range
    assert srv.bytes_sent < 400_000  # two 3 MB wheels, read without downloading them


def test_pep658_metadata_files_are_preferred(wheels):
    with IndexServer(wheels, style="html", metadata_files=True) as srv:
        index = pypi.Index(pypi.PipSettings(index_url=f"{srv.url}/simple"), use_cache=False)
        for f in index.files("torch-npu"):
            assert f.metadata_file and f.metadata_sha256
            assert snapshot.normalize_pin(index.metadata(f)["requires_dist"], "torch").startswith("torch==2.9.0")
    assert any(p.endswith(".metadata") for p, _, _ in srv.requests)
    assert not any(p.endswith(".whl") for p, _, _ in srv.requests)


def test_a_server_without_ranges_still_works(wheels):
    with IndexServer(wheels, ranges=False) as srv:
        index = pypi.Index(pypi.PipSettings(index_url=f"{srv.url}/simple"), use_cache=False)
        f = next(f for f in index.files("torch-npu") if "x86_64" in f.filename)
        assert index.metadata(f)["requires_dist"][0].startswith("torch==2.9.0+cpu")


def test_metadata_is_cached_by_sha256(wheels, tmp_path, monkeypatch):
    monkeypatch.setenv("PROVISION_CACHE", str(tmp_path / "cache"))
    with IndexServer(wheels) as srv:
        for _ in range(2):
            index = pypi.Index(pypi.PipSettings(index_url=f"{srv.url}/simple"))
            for f in index.files("torch-npu"):
                index.metadata(f)
        assert index.fetched["cached"] == 2
        assert sum(1 for p, _, _ in srv.requests if p.startswith("/files/")) <= 6  # only the first round


def test_the_proxy_setting_is_used(wheels):
    with IndexServer(wheels) as proxy:
        settings = pypi.PipSettings(index_url="http://index.invalid/simple", proxy=proxy.url)
        index = pypi.Index(settings, use_cache=False)
        files = index.files("torch-npu")
        index.metadata(files[0])
    assert {host for _, _, host in proxy.requests} == {"index.invalid"}


def test_an_unreachable_index_is_one_clear_error():
    index = pypi.Index(pypi.PipSettings(index_url="http://127.0.0.1:9/simple", timeout=2), use_cache=False)
    with pytest.raises(pypi.IndexUnavailable, match="cannot reach http://127.0.0.1:9/simple/torch-npu/"):
        index.files("torch-npu")


def test_missing_project_is_empty(wheels):
    with IndexServer(wheels) as srv:
        assert pypi.Index(pypi.PipSettings(index_url=f"{srv.url}/simple")).files("nothing-here") == []


@pytest.mark.slow
@pytest.mark.skipif(not _torch_wheels(), reason="no local torch wheel")
def test_a_real_torch_wheel_by_ranges(tmp_path):
    """The real CPU torch wheel (hundreds of MB): its metadata costs a few hundred kB."""
    wheel = _torch_wheels()[0]
    link = tmp_path / wheel.name
    os.symlink(wheel.resolve(), link)  # PROVISION_TEST_WHEELHOUSE may be relative (make test)
    with IndexServer({"torch": [link]}) as srv:
        index = pypi.Index(pypi.PipSettings(index_url=f"{srv.url}/simple"), use_cache=False)
        meta = index.metadata(index.files("torch")[0])
    assert meta["name"] == "torch" and any(r.startswith("filelock") for r in meta["requires_dist"])
    assert srv.bytes_sent < wheel.stat().st_size / 20


@pytest.mark.slow
def test_live_pypi_through_pips_settings():
    """One torch-npu wheel's metadata from the real index through pip's proxy/CA settings."""
    settings = pypi.pip_settings()
    index = pypi.Index(settings, use_cache=False)
    try:
        files = index.files("torch-npu")
    except pypi.IndexUnavailable as exc:
        pytest.skip(f"index not reachable here: {exc}")
    f = next(f for f in files if f.filename.startswith("torch_npu-2.5.1-cp310") and "x86_64" in f.filename)
    assert snapshot.normalize_pin(index.metadata(f)["requires_dist"], "torch") == "torch==2.5.1+cpu"
