"""`provision build` before the engine is involved: option checks, build inputs, the context tar."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from provisioner.errors import ProvisionError
from provisioner.image import build, recipes, render

ROOT = Path(__file__).resolve().parents[2]
CANARY = ROOT / "tests" / "fixtures" / "ca" / "canary.pem"


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "provisioner.cli", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT)


def _exit_2(proc, starts: str):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"provision: error: {starts}"), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_wheelhouse_that_does_not_exist(tmp_path):
    _exit_2(run_cli("build", "--card", "300T-A2", "--wheelhouse", str(tmp_path / "nope")),
            f"--wheelhouse {tmp_path / 'nope'}: not a directory")


def test_wheelhouse_that_is_a_file(tmp_path):
    f = tmp_path / "wheels.tar"
    f.write_text("x")
    _exit_2(run_cli("build", "--card", "300T-A2", "--wheelhouse", str(f)), f"--wheelhouse {f}: not a directory")


def test_wheelhouse_with_an_unreadable_wheel(tmp_path, monkeypatch):
    wheel = tmp_path / "a-1.0-py3-none-any.whl"
    wheel.write_text("x")
    real = os.access
    monkeypatch.setattr(build.os, "access", lambda p, mode: False if Path(p) == wheel else real(p, mode))
    with pytest.raises(ProvisionError, match=r"a-1\.0-py3-none-any\.whl is not readable"):
        build.check_options(build.BuildOptions(wheelhouse=str(tmp_path)))


def test_trusted_ca_must_hold_a_certificate(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    _exit_2(run_cli("build", "--card", "300T-A2", "--trusted-ca", str(bad)), f"--trusted-ca {bad}: no PEM certificate")
    _exit_2(run_cli("build", "--card", "300T-A2", "--trusted-ca", str(tmp_path / "missing.pem")),
            f"--trusted-ca {tmp_path / 'missing.pem'}: cannot read")


def test_offline_needs_a_wheelhouse():
    _exit_2(run_cli("build", "--card", "300T-A2", "--offline"), "--offline installs only from --wheelhouse")


def test_engine_not_running(tmp_path):
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"}
    proc = run_cli("build", "--card", "300T-A2", "--arch", "x86_64", env=env)
    _exit_2(proc, f"no Docker engine answers at unix://{tmp_path}/no-engine.sock")
    assert "start dockerd or set DOCKER_HOST" in proc.stderr


def test_unknown_recipe_before_any_build():
    _exit_2(run_cli("build", "--card", "300T-A2", "--recipe", "nope"), "unknown recipe 'nope'")


def _ctx(**kw):
    from provisioner.matrix import loader
    from provisioner.resolve import cached, request

    m = loader.load()
    stack = cached.cached_resolve(m, request.build(m, card="300T-A2", arch="x86_64"))
    return render.render(m, stack, recipes.choose(stack), **kw)


def test_build_inputs_go_to_build_dir_only(tmp_path):
    (tmp_path / "torch-1-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "notes.txt").write_text("ignored")
    ctx = _ctx()
    dockerfile_before = ctx.read("Dockerfile")
    opts = build.BuildOptions(wheelhouse=str(tmp_path), pip_index_url="https://mirror.example/simple",
                              extra_index_urls=("https://mirror.example/torch-cpu",), trusted_ca=str(CANARY))
    build.add_inputs(ctx, opts)
    assert ctx.read("Dockerfile") == dockerfile_before  # build inputs never change the Dockerfile
    pip_conf = ctx.read("build/pip.conf").decode()
    assert "index-url = https://mirror.example/simple" in pip_conf
    assert "extra-index-url = https://mirror.example/torch-cpu" in pip_conf
    assert "cert = /opt/build/ca/bundle.pem" in pip_conf and "find-links = /opt/build/wheelhouse" in pip_conf
    assert "sslCAInfo = /opt/build/ca/bundle.pem" in ctx.read("build/gitconfig").decode()
    bundle = ctx.read("build/ca/bundle.pem")
    import certifi

    assert bundle.startswith(Path(certifi.where()).read_bytes().rstrip(b"\n")) and bundle.endswith(CANARY.read_bytes())
    assert "build/wheelhouse/torch-1-py3-none-any.whl" in ctx.files and "build/wheelhouse/notes.txt" not in ctx.files
    offline = _ctx()
    build.add_inputs(offline, build.BuildOptions(wheelhouse=str(tmp_path), offline=True))
    assert "no-index = true" in offline.read("build/pip.conf").decode()


def test_the_dockerfile_only_copies_build_inputs_in_builder_stages():
    dockerfile = _ctx().dockerfile
    final = dockerfile.split("\nFROM ")[-1]
    assert "COPY build/" in dockerfile and "build/" not in final and "PIP_CONFIG_FILE" not in final


def test_context_tar_is_deterministic():
    def tar_bytes():
        buf = io.BytesIO()
        render.write_tar(_ctx(), buf)
        return buf.getvalue()

    first, second = tar_bytes(), tar_bytes()
    assert hashlib.sha256(first).digest() == hashlib.sha256(second).digest()
    with tarfile.open(fileobj=io.BytesIO(first)) as tar:
        members = tar.getmembers()
    assert {m.mtime for m in members} == {render.FIXED_MTIME}
    assert {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
    entry = next(m for m in members if m.name.endswith("provision-entrypoint"))
    assert entry.mode == 0o755
    names = [m.name for m in members]
    assert names.index("files") < names.index("files/lock-check.py")  # parents first


def test_image_tag_is_deterministic():
    ctx1, ctx2 = _ctx(), _ctx(user=render.User(1000, 1001))
    assert ctx1.tag == f"provision/pytorch:9.1.0-910b-torch2.12.0-py3.12-{ctx1.manifest['stack_id'][:8]}"
    assert ctx2.tag == ctx1.tag + "-u1000g1001"
