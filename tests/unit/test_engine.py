"""The engine seam: typed results read from real payloads, errors by class, and the fake engine's fidelity."""

from __future__ import annotations

import io
import json

import pytest

from provisioner.devices import enginefacts
from provisioner.engine import docker as docker_engine
from provisioner.engine.errors import (
    BuildFailed,
    ContainerNotFound,
    EngineError,
    EngineUnavailable,
    ImageNotFound,
    PullFailed,
    RegistryUnreachable,
    registry_of,
    short,
)
from provisioner.engine.fake import FakeEngine, instructions, tar_of
from provisioner.engine.types import BuildEvent, ContainerInfo, EngineInfo, ImageInfo
from provisioner.errors import ProvisionError
from provisioner.image import labels as image_labels

# What docker-py sends for a device plan (the shape devices.runline.docker_kwargs renders).
KWARGS = {
    "image": "img:1",
    "command": ["torchrun", "--standalone"],
    "name": "job-1",
    "devices": ["/dev/null:/dev/davinci0:rwm"],
    "volumes": {"/usr/local/Ascend/driver/lib64": {"bind": "/usr/local/Ascend/driver/lib64", "mode": "ro"}},
    "environment": {"HCCL_CONNECT_TIMEOUT": "3600", "PATH": "/opt/venv/bin:/usr/bin"},
    "group_add": ["1000"],
    "ipc_mode": "host",
    "labels": {"org.provision.launch": "r1"},
    "init": True,
    "working_dir": "/job",
}


def test_errors_are_provision_errors_and_short_is_one_line():
    for cls in (EngineError, EngineUnavailable, ImageNotFound, ContainerNotFound, BuildFailed):
        assert issubclass(cls, ProvisionError)
    assert BuildFailed.exit_code == 1 and EngineUnavailable("x").exit_code == 2
    assert short("a\n  b\tc") == "a b c"
    assert short("x" * 500, 20) == "x" * 17 + "..."


def test_sdk_exceptions_are_translated_by_class():
    from docker import errors as sdk
    from requests.exceptions import ConnectionError as RequestsConnectionError

    assert isinstance(docker_engine._translate(sdk.ImageNotFound("No such image: x"), "image x"), ImageNotFound)
    assert isinstance(docker_engine._translate(sdk.NotFound("No such container: c"), "c"), ContainerNotFound)
    gone = docker_engine._translate(RequestsConnectionError("('Connection aborted.', FileNotFoundError(2, "
                                                            "'No such file or directory'))"), "info")
    assert isinstance(gone, EngineUnavailable) and gone.reason == "No such file or directory"
    assert type(docker_engine._translate(sdk.APIError("500 Server Error"), "build")) is EngineError


def test_dead_socket_is_engine_unavailable(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/none.sock")
    with pytest.raises(EngineUnavailable) as err:
        docker_engine.connect(2)
    assert err.value.where == f"unix://{tmp_path}/none.sock" and err.value.reason == "No such file or directory"


def test_typed_results_read_real_payloads():
    image = ImageInfo.from_inspect("img:1", {"Id": "sha256:ab", "RepoTags": ["img:1"], "Size": 12,
                                             "Config": {"Labels": None, "Env": ["A=1", "B=x=y", "BARE"]}})
    assert image == ImageInfo("img:1", "sha256:ab", {}, {"A": "1", "B": "x=y"}, ("img:1",), 12)
    info = EngineInfo.from_payloads({"Version": "v", "ApiVersion": "a"},
                                    {"Runtimes": {"runc": {}, "ascend": {}}, "DefaultRuntime": "runc"})
    assert info.runtimes == ("ascend", "runc") and info.cdi_spec_dirs is None
    assert BuildEvent.from_message({"errorDetail": {"message": "boom"}, "error": "boom"}) == BuildEvent("error", "boom")
    assert BuildEvent.from_message({"aux": {"ID": "sha256:1"}}).image_id == "sha256:1"
    assert BuildEvent.from_message({"stream": "Step 1/2 : FROM x\n"}).kind == "stream"
    assert BuildEvent.from_message({"status": "Pulling"}).kind == "status"


def test_fake_container_inspect_is_what_docker_py_sends():
    fake = FakeEngine()
    fake.add_image("img:1", labels={"from": "image"}, env={"PATH": "/usr/bin", "LANG": "C.UTF-8"})
    c = fake.create(dict(KWARGS))
    payload = fake.container("job-1").payload
    host = payload["HostConfig"]
    assert host["Devices"] == [{"PathOnHost": "/dev/null", "PathInContainer": "/dev/davinci0",
                                "CgroupPermissions": "rwm"}]
    assert host["Binds"] == ["/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64:ro"]
    assert host["GroupAdd"] == ["1000"] and host["IpcMode"] == "host" and host["Init"] is True
    assert host["Runtime"] == "runc" and host["NetworkMode"] == "default" and host["Privileged"] is False
    cfg = payload["Config"]
    # the container's variables, then the image's it does not set (as the daemon merges them)
    assert cfg["Env"] == ["HCCL_CONNECT_TIMEOUT=3600", "PATH=/opt/venv/bin:/usr/bin", "LANG=C.UTF-8"]
    assert cfg["Labels"] == {"from": "image", "org.provision.launch": "r1"} and cfg["WorkingDir"] == "/job"
    info = c.inspect()
    assert info.name == "job-1" and info.status == "created" and info.devices == ("/dev/null",)
    assert info.env["PATH"] == "/opt/venv/bin:/usr/bin" and info.labels["org.provision.launch"] == "r1"


def test_fake_refuses_what_docker_refuses():
    fake = FakeEngine()
    with pytest.raises(ImageNotFound):
        fake.create({"image": "missing:1"})
    fake.add_image("img:1")
    fake.create({"image": "img:1", "name": "a"})
    with pytest.raises(EngineError, match="already in use"):
        fake.create({"image": "img:1", "name": "a"})
    c = fake.create({"image": "img:1", "devices": ["/nonexistent/davinci9:/dev/davinci9:rwm"]})
    with pytest.raises(EngineError, match="error gathering device information"):
        c.start()
    with pytest.raises(ImageNotFound, match="pull access denied"):
        fake.pull("nowhere/x:1")


def test_fake_container_runs_a_program_and_streams_its_output():
    def program(proc):
        for rank in range(2):
            proc.print(f"[rank{rank}]: hello from {proc.env['WHO']}")
        proc.print("warn", "stderr")
        return 3

    fake = FakeEngine()
    fake.add_image("img:1", program=program)
    code, out, err = fake.run("img:1", ["x"], environment={"WHO": "fake"})
    assert code == 3 and out == b"[rank0]: hello from fake\n[rank1]: hello from fake\n" and err == b"warn\n"
    assert fake.containers(all=True) == []  # run() removes its container


def test_fake_stop_and_kill():
    def server(proc):
        return 143 if proc.wait_for_stop(30) else 0

    fake = FakeEngine()
    fake.add_image("srv:1", program=server)
    c = fake.create({"image": "srv:1", "name": "s", "labels": {"team": "a"}})
    c.start()
    assert [x.name for x in fake.containers(label="team=a")] == ["s"] and fake.containers(label="team=b") == []
    c.stop(timeout=5)
    assert c.wait() == 143 and fake.containers() == [] and len(fake.containers(all=True)) == 1
    fake.add_image("hang:1", program=lambda proc: proc.wait_for_stop(30) and 0)
    h = fake.create({"image": "hang:1", "name": "h"})
    h.start()
    h.kill()
    assert h.wait() == 137
    h.remove()
    with pytest.raises(ContainerNotFound):
        h.inspect()


def test_unavailable_fake_engine_is_a_fact_not_an_error():
    fake = FakeEngine()
    fake.unavailable = "Connection refused"
    facts = enginefacts.gather(engine=fake)
    assert facts.reachable is False and facts.note == "no Docker engine reachable (Connection refused)"


def test_gather_reads_runtimes_running_containers_and_labels():
    fake = FakeEngine(runtimes=("ascend", "runc"), default_runtime="ascend")
    fake.add_image("img:1", labels={image_labels.STACK_LABEL: "{}"}, program=lambda p: p.wait_for_stop(30) and 0)
    c = fake.create({"image": "img:1", "name": "busy", "runtime": "ascend",
                     "environment": {"ASCEND_VISIBLE_DEVICES": "2-3"}})
    c.start()
    facts = enginefacts.gather(image="img:1", engine=fake)
    assert facts.reachable and facts.runtimes == ["ascend", "runc"] and facts.default_runtime == "ascend"
    assert [x.name for x in facts.containers] == ["busy"] and facts.image_labels == {image_labels.STACK_LABEL: "{}"}
    held = enginefacts.holders(facts.containers, {2: "/dev/davinci2", 5: "/dev/davinci5"}, "ascend",
                               "ASCEND_VISIBLE_DEVICES", True)
    assert list(held) == [2] and held[2][0].how == "runtime"
    missing = enginefacts.gather(image="nope:1", engine=fake)
    assert missing.image_labels is None and "not in the local engine" in missing.image_note
    c.kill()
    assert not fake.closed  # an engine handed in is the caller's to close


def test_read_stack_through_the_fake():
    fake = FakeEngine()
    stack = {"id": "s1", "cann": {"version": "8.2.RC1"}}
    fake.add_image("img:1", labels={image_labels.STACK_LABEL: json.dumps(stack)})
    assert image_labels.read_stack("img:1", engine=fake) == stack
    with pytest.raises(ProvisionError, match="no such image in the local engine"):
        image_labels.read_stack("nope:1", engine=fake)
    fake.unavailable = "Connection refused"
    with pytest.raises(ProvisionError, match="Docker engine not reachable"):
        image_labels.read_stack("img:1", engine=fake)


def test_fake_build_reads_the_dockerfile():
    dockerfile = ("# comment\nFROM base:1 AS deps\nRUN a \\\n    && b\nFROM base:1\n"
                  'LABEL x.y="a b" z=c \\\n      s="{\\"k\\": \\"v\\"}"\nENV A=1\n')
    assert instructions(dockerfile) == [("FROM", "base:1 AS deps"), ("RUN", "a && b"), ("FROM", "base:1"),
                                        ("LABEL", 'x.y="a b" z=c s="{\\"k\\": \\"v\\"}"'), ("ENV", "A=1")]
    fake = FakeEngine()
    events = list(fake.build(tar_of({"Dockerfile": dockerfile.encode()}), "t:1"))
    assert events[-1] == BuildEvent("error", "pull access denied for base:1, repository does not exist")
    fake.add_image("base:1")
    events = list(fake.build(tar_of({"Dockerfile": dockerfile.encode()}), "t:1"))
    assert [e.text for e in events if e.text.startswith("Step")][1] == "Step 2/5 : RUN a && b\n"
    image = fake.image("t:1")
    assert events[-1] == BuildEvent("aux", image_id=image.id)
    assert image.labels == {"x.y": "a b", "z": "c", "s": '{"k": "v"}'} and image.env == {"A": "1"}
    fake.build_failures["RUN a"] = ["E: no such package"]
    events = list(fake.build(io.BytesIO(tar_of({"Dockerfile": dockerfile.encode()}).read()), "t:2"))
    assert events[-2:] == [BuildEvent("stream", "E: no such package\n"),
                           BuildEvent("error", "The command '/bin/sh -c a && b' returned a non-zero code: 1")]


def test_container_info_from_a_real_inspect_shape():
    info = ContainerInfo.from_inspect({"Id": "f" * 64, "Name": "/x", "Config": {"Image": "i", "Env": None},
                                       "HostConfig": {"Devices": None, "Runtime": "ascend"},
                                       "State": {"Status": "exited", "Running": False, "ExitCode": 2}})
    assert info.short_id == "f" * 12 and info.devices == () and info.exit_code == 2 and not info.running


@pytest.fixture(scope="module")
def context():
    from provisioner.image import recipes, render
    from provisioner.matrix import loader
    from provisioner.resolve import cached, request

    m = loader.load()
    stack = cached.cached_resolve(m, request.build(m, card="300T-A2", arch="x86_64"))
    return stack, lambda: render.render(m, stack, recipes.choose(stack))


def test_provision_build_through_the_fake_engine(context):
    from provisioner.image import build

    stack, make = context
    ctx = make()
    fake = FakeEngine()
    out = io.StringIO()
    with pytest.raises(ProvisionError, match="is not in the local engine and quay.io does not have it"):
        build.build(ctx, build.BuildOptions(), out=out, live=False, engine=fake)
    fake.pullable[ctx.manifest["base_image"]] = {}
    result = build.build(make(), build.BuildOptions(tags=("extra/name:1",)), out=out, live=False, engine=fake)
    assert result.base_pulled and result.image_id == fake.image(ctx.tag).id == fake.image("extra/name:1").id
    assert [s["step"] for s in result.steps] == list(range(1, len(result.steps) + 1))
    # the labels the Dockerfile sets are the ones the renderer chose, and the stack reads back
    image = fake.image(ctx.tag)
    assert image_labels.read_stack(ctx.tag, engine=fake) == json.loads(image.labels[image_labels.STACK_LABEL])
    assert image.labels[image_labels.STACK_ID_LABEL] == stack["id"]


def test_a_failing_step_is_build_failed_with_its_log(context):
    from provisioner.image import build

    _, make = context
    ctx = make()
    fake = FakeEngine()
    fake.add_image(ctx.manifest["base_image"])
    fake.build_failures["pip install"] = ["ERROR: No matching distribution found for torch-npu"]
    out = io.StringIO()
    with pytest.raises(BuildFailed, match="returned a non-zero code"):
        build.build(ctx, build.BuildOptions(pull=False), out=out, live=False, engine=fake)
    assert "build failed at step" in out.getvalue() and "| ERROR: No matching distribution" in out.getvalue()


def test_build_checks_the_base_architecture_and_passes_the_platform(context):
    """A base of another architecture is refused before the build (the classic builder would build on it without a
    word); a matching base builds with the stack's platform; a pulled base is pulled for that platform."""
    from provisioner.image import build

    stack, make = context
    assert stack["arch"] == "x86_64"
    ctx = make()
    base = ctx.manifest["base_image"]
    other = FakeEngine()
    other.add_image(base, arch="arm64")
    with pytest.raises(ProvisionError, match=r"is aarch64 \(arm64\), but the stack is for x86_64: use a linux/amd64"):
        build.build(ctx, build.BuildOptions(pull=False), out=io.StringIO(), live=False, engine=other)
    assert other.builds == [] and not any(c.startswith("pull") for c in other.calls)
    same = FakeEngine()
    same.add_image(base, arch="amd64")
    result = build.build(make(), build.BuildOptions(pull=False), out=io.StringIO(), live=False, engine=same)
    assert [b["platform"] for b in same.builds] == ["linux/amd64"] and same.image(result.tag).arch == "amd64"
    pulled = FakeEngine()
    pulled.pullable[base] = {}
    result = build.build(make(), build.BuildOptions(), out=io.StringIO(), live=False, engine=pulled)
    assert result.base_pulled and pulled.image(base).arch == "amd64" and pulled.image(result.tag).arch == "amd64"


@pytest.mark.docker
def test_the_classic_builder_keeps_a_local_base_architecture(docker_client, base_image):
    """What the fake (and the up-front base check) rely on: the real classic builder, asked for linux/arm64 on a
    local amd64 base, builds an amd64 image; `provision build` for an aarch64 stack on that base is refused at once."""
    import subprocess
    import sys
    import uuid

    from provisioner import engine as engines
    from provisioner.engine.fake import tar_of

    have = docker_client.images.get(base_image).attrs["Architecture"]
    assert have == "amd64", f"this check needs an amd64 base image, {base_image} is {have}"
    tag = f"provision-arch-platform-{uuid.uuid4().hex[:8]}:1"
    with engines.connect(300) as real:
        try:
            events = list(real.build(tar_of({"Dockerfile": f"FROM {base_image}\nLABEL x=1\n".encode()}), tag,
                                     platform="linux/arm64"))
            assert events[-1].kind != "error", events[-1]
            assert real.image(tag).arch == "amd64"
        finally:
            docker_client.images.remove(tag, force=True)
    proc = subprocess.run([sys.executable, "-m", "provisioner.cli", "build", "--card", "300T-A2", "--arch", "aarch64",
                           "--base-image", base_image, "--for-host", "none", "--no-pull"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"base image {base_image} is x86_64 (amd64), but the stack is for aarch64" in proc.stderr


@pytest.mark.docker
def test_fake_inspect_matches_the_real_engine(docker_client, base_image):
    """The same create kwargs on the real engine and on the fake give the same inspect fields."""
    import uuid

    from provisioner import engine as engines

    name = f"provision-arch-fidelity-{uuid.uuid4().hex[:8]}"
    kw = {**KWARGS, "image": base_image, "name": name, "volumes": {"/tmp": {"bind": "/x", "mode": "ro"}}}
    fake = FakeEngine()
    env = docker_client.images.get(base_image).attrs["Config"]["Env"]
    fake.add_image(base_image, env=dict(item.split("=", 1) for item in env))
    fake.create(dict(kw))
    with engines.connect(30) as real:
        c = real.create(dict(kw))
        try:
            real_payload = docker_client.api.inspect_container(c.id)
            assert c.inspect() == ContainerInfo.from_inspect(real_payload)
        finally:
            c.remove(force=True)
    fake_payload = fake.container(name).payload
    keys = ("Devices", "Binds", "GroupAdd", "IpcMode", "Init", "Runtime", "NetworkMode", "Privileged", "ShmSize")
    assert {k: fake_payload["HostConfig"].get(k) for k in keys} == {k: real_payload["HostConfig"].get(k) for k in keys}
    for k in ("Env", "Labels", "WorkingDir", "Cmd", "Image"):
        assert fake_payload["Config"][k] == real_payload["Config"][k], k
    assert ContainerInfo.from_inspect(fake_payload) == ContainerInfo.from_inspect(real_payload).__class__(
        **{**ContainerInfo.from_inspect(real_payload).__dict__, "id": fake_payload["Id"]})


# -- pull failures ---------------------------------------------------------------------------------------

UNREACHABLE_OVERLAY = "registries:\n  - id: quay\n    image: provision-polish.invalid/ascend/cann\n"


def test_pull_failures_are_told_apart_by_the_daemons_words():
    # The engine's own messages (Docker 20.10, seen with the tests below): a 500 for all of them.
    dns = 'Get "https://quay.io/v2/": dial tcp: lookup quay.io on 10.0.0.53:53: no such host'
    refused = 'Get "http://localhost:1/v2/": dial tcp 127.0.0.1:1: connect: connection refused'
    for text in (dns, refused):
        err = docker_engine._pull_error("quay.io/ascend/cann:x", text)
        assert type(err) is RegistryUnreachable and err.registry == "quay.io" and err.reason == text
    assert type(docker_engine._pull_error("r.example/a:1", "manifest unknown")) is ImageNotFound
    denied = docker_engine._pull_error("r.example/a:1", "toomanyrequests: pull rate limit reached")
    assert type(denied) is PullFailed and isinstance(denied, EngineError)
    assert [registry_of(r) for r in ("ascendai/cann:1", "cann", "localhost:5000/a", "quay.io/a/b:1", "a.b:1")] == [
        "docker.io", "docker.io", "localhost:5000", "quay.io", "docker.io"]


def test_unreachable_registry_names_the_ways_forward(context):
    from provisioner.image import build

    stack, make = context
    ctx = make()
    fake = FakeEngine()
    fake.unreachable_registries.add("quay.io")
    with pytest.raises(ProvisionError) as err:
        build.build(ctx, build.BuildOptions(), out=io.StringIO(), live=False, engine=fake)
    msg = str(err.value)
    mirror = stack["base_image"]["mirrors"][0]
    assert msg.startswith(f"base image {stack['base_image']['ref']} is not in the local engine and its registry"
                          " quay.io cannot be reached (dial tcp: lookup quay.io")
    assert f"--registry dockerhub ({mirror})" in msg and "--base-image REF" in msg and "`docker load -i FILE`" in msg
    assert "\n" not in msg and fake.calls[-1] == f"pull {stack['base_image']['ref']}"
    with pytest.raises(ProvisionError, match="--no-pull was given\\); ways forward: --registry dockerhub"):
        build.build(make(), build.BuildOptions(pull=False), out=io.StringIO(), live=False, engine=fake)


@pytest.mark.docker
def test_real_engine_pull_failures_are_typed(docker_client):
    from provisioner import engine as engines
    from tests.helpers.registry import EmptyRegistry

    with engines.connect(60) as real, EmptyRegistry() as reg:
        with pytest.raises(RegistryUnreachable) as err:
            real.pull("provision-polish.invalid/ascend/cann:none")
        assert err.value.registry == "provision-polish.invalid" and "provision-polish.invalid" in err.value.reason
        with pytest.raises(ImageNotFound, match="manifest unknown"):
            real.pull(f"{reg.host}/ascend/cann:none")
        # Docker reports a refusal as "pull access denied ..., repository does not exist": not found, to us too.
        with pytest.raises(ImageNotFound, match="pull access denied"):
            real.pull(f"{reg.host}/denied/cann:none")
        with pytest.raises(PullFailed) as limited:
            real.pull(f"{reg.host}/limited/cann:none")
        assert type(limited.value) is PullFailed and limited.value.registry == reg.host
        assert "rate limit" in limited.value.reason


@pytest.mark.docker
def test_build_with_an_unreachable_registry_is_one_line_naming_the_ways_forward(docker_client, tmp_path):
    """What a new user sees on a machine that cannot reach the default registry."""
    import subprocess
    import sys

    overlay = tmp_path / "unreachable.yaml"
    overlay.write_text(UNREACHABLE_OVERLAY)
    proc = subprocess.run([sys.executable, "-m", "provisioner.cli", "build", "--card", "300T-A2", "--matrix",
                           str(overlay)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    # one line: no "building ..." line before it (nothing was built) and no traceback
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    line = proc.stderr
    assert line.startswith("provision: error: base image provision-polish.invalid/ascend/cann:")
    assert "its registry provision-polish.invalid cannot be reached" in line and "no such host" in line
    assert "--registry dockerhub (ascendai/cann:" in line and "--base-image REF" in line and "docker load" in line


def test_images_of_a_repository_newest_last_sortable():
    fake = FakeEngine()
    fake.add_image("provision/pytorch:a", labels={"n": "1"})
    fake.add_image("provision/pytorch:b", labels={"n": "2"})
    fake.add_image("provision/pytorch-other:a")
    found = sorted(fake.images("provision/pytorch"), key=lambda i: i.created)
    assert [(i.ref, i.labels["n"]) for i in found] == [("provision/pytorch:a", "1"), ("provision/pytorch:b", "2")]


@pytest.mark.docker
def test_real_engine_lists_the_images_of_a_repository(docker_client, base_image):
    from provisioner import engine as engines

    repository = base_image.rsplit(":", 1)[0]
    with engines.connect(60) as real:
        found = real.images(repository)
        assert base_image in [i.ref for i in found] or any(base_image in i.tags for i in found)
        mine = next(i for i in found if base_image in i.tags)
        assert mine == real.image(mine.ref) and mine.created.startswith("20")
        assert real.images("provision-polish/none-such") == []


@pytest.mark.docker
def test_real_engine_lists_and_inspects_every_container(docker_client, base_image):
    """containers() inspects side by side: every one comes back, once, inspected."""
    import uuid

    from provisioner import engine as engines

    run = uuid.uuid4().hex[:8]
    label = f"org.provision.test.polish={run}"
    with engines.connect(60) as real:
        made = [real.create({"image": base_image, "command": ["true"], "name": f"provision-polish-{run}-{n}",
                             "labels": {"org.provision.test.polish": run}}) for n in range(11)]
        try:
            found = real.containers(all=True, label=label)
            assert sorted(c.name for c in found) == sorted(c.name for c in made)
            assert all(c.status == "created" and c.image == base_image for c in found)
            assert real.containers(label=label) == []  # none running
        finally:
            for c in made:
                c.remove(force=True)


def test_connect_early_is_taken_once_and_only_for_the_same_place(monkeypatch, tmp_path):
    from provisioner import engine as engines

    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/a.sock")
    engines.connect_early()
    with pytest.raises(EngineUnavailable) as err:
        engines.connect()  # the early attempt's own failure, raised in the caller
    assert err.value.where == f"unix://{tmp_path}/a.sock" and engines._early == {}
    engines.connect_early()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/b.sock")  # somewhere else now: not the early one
    with pytest.raises(EngineUnavailable) as err:
        engines.connect()
    assert err.value.where == f"unix://{tmp_path}/b.sock" and engines._early == {}


@pytest.mark.docker
def test_connect_early_gives_a_working_engine(docker_client):
    from provisioner import engine as engines

    engines.connect_early()
    assert engines._early["thread"].name == "engine-connect"
    with engines.connect() as eng:
        assert eng.info().api_version
    assert engines._early == {}


class _Api:
    """docker-py's low-level API as DockerEngine calls it: two containers and two images listed, and what each
    inspect does (a payload, or an exception)."""

    def __init__(self, inspect):
        self._inspect = inspect

    def containers(self, all=False, filters=None):
        return [{"Id": "a" * 64}, {"Id": "b" * 64}]

    def inspect_container(self, cid):
        result = self._inspect[cid[0]]
        if isinstance(result, BaseException):
            raise result
        return result

    def images(self, name=None):
        return [{"Id": "sha256:" + "a" * 64, "RepoTags": [f"{name}:1"]}, {"Id": "sha256:" + "b" * 64, "RepoTags": []}]

    def inspect_image(self, iid):
        return self.inspect_container(iid.split(":", 1)[1])


class _Client:
    def __init__(self, inspect):
        self.api = _Api(inspect)


def _running(cid: str) -> dict:
    return {"Id": cid * 64, "Name": f"/c{cid}", "State": {"Running": True, "Status": "running"},
            "Config": {"Labels": {}, "Image": "img:1", "Env": []}, "HostConfig": {"Devices": []}, "Mounts": []}


def test_docker_listing_skips_only_what_went_away_and_raises_the_rest_translated():
    """Review A #7: a container or image removed between the list and its inspect (NotFound) is skipped; an
    engine that fails after the list is an EngineError, never "no running containers"."""
    from docker import errors as sdk

    gone = docker_engine.DockerEngine(_Client({"a": _running("a"), "b": sdk.NotFound("No such container")}))
    assert [c.id for c in gone.containers()] == ["a" * 64]
    image_payload = {"Id": "sha256:" + "a" * 64, "RepoTags": ["r:1"], "Config": {"Labels": {}}}
    assert len(docker_engine.DockerEngine(_Client({"a": image_payload,
                                                   "b": sdk.ImageNotFound("No such image")})).images("r")) == 1
    for failure, kind in ((ConnectionError("Connection refused"), EngineUnavailable),
                          (sdk.APIError("500 Server Error: boom"), EngineError), (RuntimeError("bug"), EngineError)):
        engine = docker_engine.DockerEngine(_Client({"a": _running("a"), "b": failure}))
        with pytest.raises(kind):
            engine.containers()
        engine = docker_engine.DockerEngine(_Client({"a": image_payload, "b": failure}))
        with pytest.raises(kind):
            engine.images("r")
    # A payload that does not read is the engine's error too, not a silent gap.
    with pytest.raises(EngineError):
        docker_engine.DockerEngine(_Client({"a": _running("a"), "b": {"Id": 1}})).containers()


def test_fake_engine_lists_as_docker_does_when_an_inspect_fails():
    """The fake mirrors it: a container or image gone between list and inspect is skipped, any other failure
    raised."""
    eng = FakeEngine()
    eng.add_image("img:1")
    eng.add_image("img:2")
    for name in ("c1", "c2"):
        eng.create({**KWARGS, "name": name}).start()
    eng.inspect_errors["c2"] = ContainerNotFound("No such container: c2")
    eng.inspect_errors["img:2"] = ImageNotFound("No such image: img:2")
    assert [c.name for c in eng.containers(all=True)] == ["c1"]
    assert [i.ref for i in eng.images("img")] == ["img:1"]
    eng.inspect_errors["c2"] = EngineUnavailable("Connection refused", eng.where)
    eng.inspect_errors["img:2"] = EngineError("image img:2: boom")
    with pytest.raises(EngineUnavailable):
        eng.containers(all=True)
    with pytest.raises(EngineError):
        eng.images("img")
