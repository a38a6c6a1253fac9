"""make demo's launch steps: the simulated 2-chip host, the collective check, the trainer run when the image has one."""

from __future__ import annotations

import io
import os
import re
import stat
import tarfile
import uuid

import pytest

from provisioner import demo, devices
from tests.launch.conftest import launch_containers


def test_simulated_host_plans_like_a_real_one(tmp_path, shipped):
    if os.geteuid() != 0:
        pytest.fail("mknod needs root")
    from provisioner import cache, enginefacts, request

    stack = cache.cached_resolve(shipped, request.build(shipped, card="300T-A2"))
    paired = stack["driver"]["paired"][0]
    root, dev = demo.simulated_host(tmp_path, stack)
    nodes = sorted(os.listdir(dev))
    assert nodes == ["davinci0", "davinci1", "davinci_manager", "devmm_svm", "hisi_hdc"]
    for n in nodes:
        st = os.lstat(dev / n)
        assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1000, 1000, 0o660)
    assert (root / "usr/local/Ascend/driver/version.info").read_text() == f"Version={paired}\n"
    # the image's own stack passes the driver check on this host, with nothing to note
    plan = devices.plan(shipped, devices.Options(card="300T-A2", devices="0-1", root=str(root), dev_root=str(dev),
                                                 stack=stack, engine=enginefacts.EngineFacts(reachable=True)))
    assert plan.chips == (0, 1) and plan.group_add == (1000,) and "HwHiAiUser" in plan.group_why
    assert plan.driver["version"] == paired and plan.stack["driver_fit"] == "ok" and not plan.notes
    # no stack label: an empty version.info, still a valid host
    root2, _ = demo.simulated_host(tmp_path / "b", None)
    assert (root2 / "usr/local/Ascend/driver/version.info").read_text() == ""


@pytest.fixture
def trainer_image(docker_client, launch_image):
    """launch_image plus a stand-in `provisioner.train` that prints its rank and arguments (until the real one merges)."""
    main = b"import os, sys\nprint('TRAINER rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], 'args', sys.argv[1:])\n"
    dockerfile = (f"FROM {launch_image}\nCOPY train /tmp/train\n"
                  "RUN d=$(python -c 'import os, provisioner; print(os.path.dirname(provisioner.__file__))')"
                  " && rm -rf $d/train && cp -r /tmp/train $d/train && rm -rf /tmp/train\n").encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("Dockerfile", dockerfile), ("train/__init__.py", b""), ("train/__main__.py", main)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    tag = f"provision-test/launch-trainer:{uuid.uuid4().hex[:8]}"
    docker_client.images.build(fileobj=io.BytesIO(buf.getvalue()), custom_context=True, tag=tag, network_mode="none",
                               rm=True)
    yield tag
    docker_client.images.remove(tag, force=True)


@pytest.mark.docker
@pytest.mark.slow
def test_launch_steps_without_and_with_a_trainer(launch_image, trainer_image, docker_client, capfd):
    demo.launch_steps(launch_image, ["--config", "/x.yaml", "max_steps=2"])
    out, err = capfd.readouterr()
    assert "--check-only" in out and "[rank0]:all_reduce: 2 ranks (2 per node), backend gloo on cpu" in out
    assert "check ok: all_reduce across 2 ranks (gloo on cpu)" in err
    assert "short trainer run skipped (provisioner.train is not in the image yet)" in out
    first_err = err

    demo.launch_steps(trainer_image, ["--config", "/x.yaml", "max_steps=2"])
    out, err = capfd.readouterr()
    for rank in (0, 1):
        assert f"[rank{rank}]:TRAINER rank {rank} of 2 args ['--config', '/x.yaml', 'max_steps=2']" in out
    assert "-m provisioner.train --config /x.yaml max_steps=2" in err
    for run_id in re.findall(r"provision launch: run ([0-9a-f]{12}) finished: exit 0", first_err + err):
        assert not launch_containers(docker_client, run_id)
