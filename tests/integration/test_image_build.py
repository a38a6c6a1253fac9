"""`provision build` against a real engine: the 300T-A2 image on the local Debian base (no CANN inside)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers.engine import (
    CANARY,
    CARD,
    OVERLAY,
    TORCH,
    build_args,
    edited_project_copy,
    provision,
    trusted_ca_file,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_build_prints_the_deterministic_tag(provision_build_result):
    result = provision_build_result
    assert result["schema"] == "provision.build/1"
    stack = result["stack"]
    assert result["tag"] == result["tags"][0]
    assert re.fullmatch(rf"provision/pytorch:9\.1\.0-910b-torch{re.escape(TORCH)}-py3\.11-{stack['id'][:8]}",
                        result["tag"]), result["tag"]
    assert "[ 1/" in result["stderr"] and "FROM" in result["stderr"]  # the progress display


def test_versions_and_pip_check_inside(provision_image, provision_build_result, run_in_image):
    stack = provision_build_result["stack"]
    code, out, err = run_in_image(provision_image, ["python", "-c", (
        "import json, torch\n"
        "from importlib import metadata as m\n"
        "print(json.dumps({'torch': torch.__version__, 'torch_npu': m.version('torch_npu'),"
        " 'provisioner': m.version('provisioner')}))")])
    assert code == 0, err
    got = json.loads(out.strip().splitlines()[-1])
    # torch_npu cannot be imported without CANN's libraries; its installed version is what counts here.
    assert got["torch"] == stack["torch"]["requirement"].split("==", 1)[1] == f"{TORCH}+cpu"
    assert got["torch_npu"] == stack["torch_npu"]["version"] == TORCH
    code, out, err = run_in_image(provision_image, ["pip", "check"])
    assert code == 0 and "No broken requirements found" in out, out + err


def test_train_extra_is_satisfied(provision_image, run_in_image):
    script = (
        "from importlib import metadata as m\n"
        "from packaging.requirements import Requirement\n"
        "missing = []\n"
        "for text in m.requires('provisioner'):\n"
        "    r = Requirement(text)\n"
        "    if r.marker is not None and not r.marker.evaluate({'extra': 'train'}):\n"
        "        continue\n"
        "    try:\n"
        "        v = m.version(r.name)\n"
        "    except m.PackageNotFoundError:\n"
        "        missing.append(str(r)); continue\n"
        "    if not r.specifier.contains(v, prereleases=True):\n"
        "        missing.append(f'{r} (have {v})')\n"
        "print('MISSING', missing)\n"
    )
    code, out, err = run_in_image(provision_image, ["python", "-c", script])
    assert code == 0, err
    assert "MISSING []" in out, out


def test_labels_carry_the_stack(docker_client, provision_image, provision_build_result):
    labels = docker_client.images.get(provision_image).labels
    stack = json.loads(labels["org.provision.stack"])
    assert labels["org.provision.stack.id"] == stack["id"]
    # The same request resolved again gives the same Stack, byte for byte as JSON.
    proc = provision("resolve", "--card", CARD, "--torch", TORCH, "--base-image", stack["base_image"]["ref"],
                     "--matrix", str(OVERLAY), "--json")
    assert proc.returncode == 0, proc.stderr
    assert stack == json.loads(proc.stdout)["stack"]
    assert stack == provision_build_result["stack"]
    for key in ("title", "description", "version", "base.name"):
        assert labels[f"org.opencontainers.image.{key}"], key
    assert labels["org.opencontainers.image.base.name"] == stack["base_image"]["ref"]


def test_cann_environment_for_non_login_shells(provision_image, run_in_image):
    # No CANN in the Debian base: the entrypoint says so and keeps `import torch` working on CPU.
    code, out, err = run_in_image(provision_image, ["bash", "-c", "echo $PROVISION_CANN_ENV $TORCH_DEVICE_BACKEND_AUTOLOAD"])
    assert code == 0, err
    assert out.split() == ["absent", "0"]
    assert "provision: CANN not found" in err
    # With a CANN layout present (a stand-in set_env.sh), the entrypoint sources it.
    script = ("mkdir -p /usr/local/Ascend/cann && echo 'export ASCEND_HOME_PATH=/usr/local/Ascend/cann' "
              "> /usr/local/Ascend/cann/set_env.sh && "
              "env -u PROVISION_CANN_ENV -u TORCH_DEVICE_BACKEND_AUTOLOAD "
              "/usr/local/bin/provision-entrypoint bash -c 'echo $PROVISION_CANN_ENV $ASCEND_HOME_PATH'")
    code, out, err = run_in_image(provision_image, ["bash", "-c", script])
    assert code == 0, err
    assert out.split() == ["/usr/local/Ascend/cann/set_env.sh", "/usr/local/Ascend/cann"]


def test_nothing_host_specific_baked_in(docker_client, provision_image):
    config = docker_client.images.get(provision_image).attrs["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert not [k for k in env if k.startswith(("ASCEND_VISIBLE", "ASCEND_RUNTIME", "PIP_", "GIT_"))], env
    assert config["Entrypoint"] == ["/usr/local/bin/provision-entrypoint"]


def test_provision_doctor_runs_inside(provision_image, provision_build_result, run_in_image):
    code, out, err = run_in_image(provision_image, ["provision", "doctor", "--json"])
    assert code == 2, err  # errors found (no CANN, no devices): exit code 2, as documented
    report = json.loads(out)
    assert report["schema"] == "provision.doctor/1"
    found = {(f["severity"], f["check"], f["id"]) for f in report["findings"]}
    # It says honestly that CANN is absent (the Debian base has none) ...
    assert any(sev == "error" and check == "cann" for sev, check, _ in found), found
    # ... and it compares the installed versions with the stack the image was built from.
    stack = provision_build_result["stack"]
    assert report["facts"]["stack"]["stack"]["id"] == stack["id"]
    assert not [i for _, _, i in found if i.startswith("stack-label")], found
    assert ("info", "torch", "torch-pair-ok") in found, found
    assert not [i for sev, _, i in found if sev == "error" and "mismatch" in i], found


def test_provision_train_runs_inside(provision_image, run_in_image):
    code, out, err = run_in_image(provision_image, ["provision-train", "--help"])
    assert code == 0, err
    assert "usage" in out.lower()


def _certs(pem: bytes) -> set[bytes]:
    return {b"".join(body.split()) for body in
            re.findall(rb"-----BEGIN CERTIFICATE-----\s+(.*?)\s+-----END CERTIFICATE-----", pem, re.S)}


def _public_certs() -> set[bytes]:
    import certifi

    found = _certs(Path(certifi.where()).read_bytes())
    for path in Path("/usr/share/ca-certificates").rglob("*.crt"):
        found |= _certs(path.read_bytes())
    return found


def test_trusted_ca_leaves_no_trace_in_the_image(docker_client, provision_image):
    # Look for the certificates of the --trusted-ca file that are not public roots (which pip's and requests'
    # certifi inside the image carry anyway): the canary, and this machine's own proxy CAs.
    secret = _certs(Path(trusted_ca_file()).read_bytes()) - _public_certs()
    assert _certs(CANARY.read_bytes()) <= secret
    needles = [body[:80] for body in secret]
    history = json.dumps(docker_client.api.history(provision_image))
    assert "/opt/build" not in history and "bundle.pem" not in history and "trusted-ca" not in history
    assert "/opt/build" not in json.dumps(docker_client.images.get(provision_image).attrs["Config"])
    found = []
    layers = 0
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "image.tar")
        with path.open("wb") as fh:
            for chunk in docker_client.images.get(provision_image).save(named=False):
                fh.write(chunk)
        with tarfile.open(path) as image:
            for member in image:
                if not member.name.endswith(".tar") or not member.isfile():
                    continue
                layers += 1
                with tarfile.open(fileobj=image.extractfile(member)) as layer:
                    for entry in layer:
                        name = entry.name.lstrip("./")
                        if name.startswith("opt/build") or name.startswith("opt/stage"):
                            found.append(f"{name} (a builder path)")
                        if not entry.isfile() or entry.size > 8_000_000:
                            continue
                        data = layer.extractfile(entry).read()
                        if b"BEGIN CERTIFICATE" in data:
                            flat = b"".join(data.split())
                            found += [f"{name} holds a --trusted-ca certificate" for n in needles if n in flat]
    assert layers >= 3
    assert not found, found


def test_code_only_change_rebuilds_only_the_project_layer(base_image, wheelhouse, provision_image, tmp_path,
                                                         docker_client):
    from provisioner.image import build, recipes, render
    from provisioner.matrix import loader
    from provisioner.resolve import cached, request

    copy = edited_project_copy(tmp_path / "src", f"edited by {__name__} at {time.time_ns()}")
    m = loader.load([str(OVERLAY)])
    stack = cached.cached_resolve(m, request.build(m, card=CARD, torch=TORCH, base_image=base_image))
    ctx = render.render(m, stack, recipes.choose(stack), project_root=copy)
    assert ctx.tag == provision_image
    opts = build.BuildOptions(wheelhouse=wheelhouse, trusted_ca=trusted_ca_file(), network="host",
                              tags=("provision-test/rebuilt:latest",))
    import io

    original = docker_client.images.get(provision_image)
    try:
        result = build.build(ctx, opts, out=io.StringIO(), live=False)
    finally:
        # Give the fixture's tag back to the image of the real tree (other tests and areas use it).
        repo, tag = provision_image.rsplit(":", 1)
        original.tag(repo, tag)
    steps = result.steps
    first_project = next(s for s in steps if s["instruction"].startswith("COPY project/"))
    before = [s for s in steps if s["step"] < first_project["step"] and not s["instruction"].startswith("FROM")]
    assert before and all(s["cached"] for s in before), [s for s in before if not s["cached"]]
    assert not first_project["cached"]
    venv_copy = next(s for s in steps if s["instruction"].startswith("COPY --from=stack /opt/venv"))
    assert venv_copy["cached"]
    assert result.seconds < 60, result.seconds
    assert result.image_id != original.id
    docker_client.images.remove("provision-test/rebuilt:latest")


def test_non_root_user_with_the_host_group(base_image, wheelhouse, provision_image, run_in_image, docker_client):
    proc = provision(*build_args(base_image, wheelhouse, "--user-gid", "1234", "--user-uid", "1001",
                                 "--tag", "provision-test/user:1"))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == "provision-test/user:1"  # the first --tag is printed
    tag = next(t for t in docker_client.images.get("provision-test/user:1").tags if t.startswith("provision/"))
    assert tag == provision_image + "-u1001g1234"
    try:
        code, out, err = run_in_image(tag, ["bash", "-c", "id -u; id -g; id -gn; test -w /workspace && echo writable"])
        assert code == 0, err
        assert out.split() == ["1001", "1234", "HwHiAiUser", "writable"]
    finally:
        docker_client.images.remove("provision-test/user:1")
        docker_client.images.remove(tag)


def test_failing_step_shows_its_log_tail(base_image, tmp_path):
    # Offline with a wheelhouse that lacks torch_npu: the framework layer fails; the output says where and why.
    empty = tmp_path / "wheels"
    empty.mkdir()
    proc = provision("build", "--card", CARD, "--torch", TORCH, "--base-image", base_image, "--matrix", str(OVERLAY),
                     "--wheelhouse", str(empty), "--offline", "--network", "host")
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "build failed at step" in proc.stderr and "requirements/framework.txt" in proc.stderr
    assert re.search(r"No matching distribution found for (torch|torch-npu)", proc.stderr), proc.stderr[-3000:]
    assert proc.stderr.rstrip().splitlines()[-1].startswith("provision: error: ")
    assert proc.stdout == ""


# A second full build (no network, wheels only): the `full` tier (make test-all); make test builds this recipe once.
@pytest.mark.full
def test_fully_offline_build(base_image, wheelhouse, provision_image, run_in_image, docker_client, tmp_path):
    """--offline with a wheelhouse holding every locked wheel builds with no network at all (--network none)."""
    from tests.helpers.engine import ROOT

    ctx = tmp_path / "ctx"
    proc = provision("render", "--card", CARD, "--torch", TORCH, "--base-image", base_image, "--matrix",
                     str(OVERLAY), "-o", str(ctx))
    assert proc.returncode == 0, proc.stderr
    offline = ROOT / ".cache" / "wheelhouse-offline"
    offline.mkdir(parents=True, exist_ok=True)
    for wheel in Path(wheelhouse).glob("torch-*.whl"):
        if not (offline / wheel.name).exists():
            shutil.copyfile(wheel, offline / wheel.name)
    # What an air-gapped site does on a connected machine of the same Python and CPU: download the lock.
    # --retries 0: the lock names PyTorch's CPU index, which is unreachable here; torch is in the wheelhouse.
    download = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                               "--retries", "0", "--find-links", str(offline),
                               "-r", str(ctx / "requirements.lock"), "-d", str(offline)],
                              capture_output=True, text=True, timeout=900)
    assert download.returncode == 0, download.stderr[-3000:]
    proc = provision("build", "--card", CARD, "--torch", TORCH, "--base-image", base_image, "--matrix", str(OVERLAY),
                     "--wheelhouse", str(offline), "--offline", "--network", "none", "--tag", "provision-test/offline:1")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.strip() == "provision-test/offline:1"
    try:
        code, out, err = run_in_image("provision-test/offline:1", ["pip", "check"])
        assert code == 0, out + err
        image = docker_client.images.get("provision-test/offline:1")
        assert json.loads(image.labels["org.provision.stack"])["torch_npu"]["version"] == TORCH
    finally:
        docker_client.images.remove("provision-test/offline:1")


def test_base_image_that_does_not_exist(docker_client):
    proc = provision("build", "--card", CARD, "--torch", TORCH, "--base-image", "provision-local/no-such-base:1",
                     "--matrix", str(OVERLAY))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    # not local, and docker.io cannot be reached here (or has no such image): either way the ways forward are named
    assert lines[-1].startswith("provision: error: base image provision-local/no-such-base:1 "), lines
    assert "--base-image" in lines[-1] and "docker load -i FILE" in lines[-1], lines
    assert "Traceback" not in proc.stderr


def test_demo_image_steps_name_the_fallback(monkeypatch, base_image, wheelhouse, provision_image, capsys):
    """make demo's image part: the official base cannot be pulled here, so it builds on the local base and says so."""
    from provisioner import demo

    monkeypatch.setenv("PROVISION_DEMO_BASE", base_image)
    monkeypatch.setenv("PROVISION_DEMO_WHEELHOUSE", wheelhouse)
    monkeypatch.setenv("PIP_CERT", trusted_ca_file())  # the demo's CA choice; the same bundle keeps the cache
    tag = demo.image_steps()
    out = capsys.readouterr()
    assert tag == provision_image
    assert "cannot be pulled" in out.out and "local base" in out.out
    stack_id = tag.rsplit("-", 1)[1]
    assert re.search(rf"^stack {stack_id}[0-9a-f]{{8}}", out.out, re.M), out.out[-2000:]
