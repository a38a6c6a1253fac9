"""Against a real engine: a running container holding a fake davinci node is found and named,
the docker-py kwargs start a real container, and the printed shell line runs as printed."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.devices import enginefacts, runline
from provisioner.devices import plan as devices
from provisioner.image import labels as image_labels

pytestmark = pytest.mark.docker
IMAGE = "provision-test/sleep:devices"


def _needed_files(binary: str) -> list[str]:
    """The binary and the shared libraries ldd lists for it (a tiny image without a registry)."""
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        path = next((p for p in parts if p.startswith("/")), None)
        if path and os.path.exists(path):
            libs.append(path)
    return [binary, *libs]


@pytest.fixture(scope="module")
def sleep_image(docker_client):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        added = set()
        for path in _needed_files("/bin/sleep") + _needed_files("/bin/ls") + _needed_files("/bin/cat"):
            if path not in added:
                added.add(path)
                tar.add(os.path.realpath(path), arcname=path.lstrip("/"))
    docker_client.api.import_image_from_data(buf.getvalue(), repository=IMAGE.split(":")[0], tag=IMAGE.split(":")[1])
    yield IMAGE
    try:
        docker_client.images.remove(IMAGE, force=True)
    except Exception:  # noqa: BLE001
        pass


@pytest.fixture
def container_name(docker_client):
    name = f"provision-test-holder-{uuid.uuid4().hex[:8]}"
    yield name
    try:
        docker_client.containers.get(name).remove(force=True)
    except Exception:  # noqa: BLE001
        pass


def test_refusal_names_the_running_container(docker_client, sleep_image, fake_host, shipped, container_name, capsys):
    host = fake_host("plan-300ta2-4", null_numbers=True)
    node = f"{host.dev_root}/davinci2"
    docker_client.containers.run(sleep_image, ["/bin/sleep", "300"], name=container_name, detach=True,
                                 network_mode="none", devices=[f"{node}:/dev/davinci2:rwm"])
    facts = enginefacts.gather(timeout=10)
    assert facts.reachable
    opts = devices.Options(card="300T-A2", devices="0-3", root=str(host.root), dev_root=str(host.dev_root), engine=facts)
    with pytest.raises(devices.PlanRefused) as err:
        devices.plan(shipped, opts)
    assert f"chip 2 ({node}) is already mapped into running container '{container_name}'" in str(err.value)

    rc = main(["run-cmd", "--card", "300T-A2", "--devices", "0-3", "--root", str(host.root), "--dev-root", str(host.dev_root),
               sleep_image])
    out, errtext = capsys.readouterr()
    assert rc == 2 and out == "" and container_name in errtext and len(errtext.splitlines()) == 1

    rc = main(["run-cmd", "--card", "300T-A2", "--devices", "0,1,3", "--root", str(host.root),
               "--dev-root", str(host.dev_root), sleep_image])
    out, _ = capsys.readouterr()
    assert rc == 0 and "in-use check skipped" not in out


def test_kwargs_start_a_real_container(docker_client, sleep_image, fake_host, shipped, container_name):
    host = fake_host("plan-800ta2-8", null_numbers=True)
    plan = devices.plan(shipped, devices.Options(card="800T-A2", devices="4,5", root=str(host.root), dev_root=str(host.dev_root),
                                                 engine_skipped="test"))
    kw = runline.docker_kwargs(plan, sleep_image, ["/bin/sleep", "300"], name=container_name)
    c = docker_client.containers.run(detach=True, network_mode="none", **kw)
    c.reload()
    hc = c.attrs["HostConfig"]
    assert c.status == "running"
    assert [d["PathInContainer"] for d in hc["Devices"]] == [n.container for n in plan.nodes]
    assert sorted(hc["Binds"]) == sorted(f"{plan.host_path(m)}:{m.container}:ro" for m in plan.mounts)
    assert hc["GroupAdd"] == ["1001"] and hc["IpcMode"] == "host"
    env = dict(e.split("=", 1) for e in c.attrs["Config"]["Env"])
    assert env["NPROC_PER_NODE"] == "2" and env["HCCL_CONNECT_TIMEOUT"] == "3600"
    # The node keeps the host's owner, group and mode inside, so --group-add opens it for a non-root user.
    code, out = c.exec_run(["/bin/ls", "-ln", "/dev/davinci4"])
    assert code == 0 and out.decode().split()[:4] == ["crw-rw----", "1", "1001", "1001"], out
    code, out = c.exec_run(["/bin/ls", "/usr/local/Ascend/driver/lib64"], user="4321:4321")
    assert code == 0 and "libascend_hal.so" in out.decode()
    # A non-root user opens the node through the added group (the fake node has /dev/null's numbers).
    assert c.exec_run(["/bin/cat", "/dev/davinci4"], user="4321:4321").exit_code == 0
    bare = {k: v for k, v in kw.items() if k != "group_add"} | {"name": container_name + "-nogroup"}
    other = docker_client.containers.run(detach=True, network_mode="none", **bare)
    try:
        code, out = other.exec_run(["/bin/cat", "/dev/davinci4"], user="4321:4321")
        assert code != 0 and b"Permission denied" in out
    finally:
        other.remove(force=True)


def test_printed_line_runs_as_printed(fake_host, sleep_image, capsys):
    host = fake_host("plan-300ta2-4", null_numbers=True)
    rc = main(["run-cmd", "--card", "300T-A2", "--devices", "0-3", "--root", str(host.root), "--dev-root", str(host.dev_root),
               "--mode", "devices", "--no-engine", sleep_image, "--", "/bin/sleep", "0"])
    text, _ = capsys.readouterr()
    assert rc == 0
    script = Path(host.root).parent / "run.sh"
    script.write_text(text)
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_image_label_stack_needing_a_newer_driver_is_refused(docker_client, fake_host, shipped, capsys):
    import json

    from provisioner.resolve import cached, request

    stack = cached.cached_resolve(shipped, request.build(shipped, card="300T-A2", cann="9.1.0"))
    tag = f"labelled-{uuid.uuid4().hex[:8]}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("README")
        data = b"label carrier\n"
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    label = json.dumps(stack, separators=(",", ":"))
    docker_client.api.import_image_from_data(buf.getvalue(), repository="provision-test/stack", tag=tag,
                                             changes=[f"LABEL {image_labels.STACK_LABEL}={json.dumps(label)}"])
    ref = f"provision-test/stack:{tag}"
    try:
        host = fake_host("plan-300ta2-4")
        rc = main(["run-cmd", "--card", "300T-A2", "--devices", "0", "--root", str(host.root), "--dev-root", str(host.dev_root), ref])
        out, err = capsys.readouterr()
        assert rc == 2 and out == ""
        assert f"image stack {stack['id']} has CANN 9.1.0, which needs HDK driver {stack['driver']['summary']}; this host has 24.1.0" in err
    finally:
        docker_client.images.remove(ref, force=True)
