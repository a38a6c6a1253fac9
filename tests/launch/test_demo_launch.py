"""make demo's launch steps: the simulated 2-chip host, the collective check, the trainer run when the image has one."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest

from provisioner import demo
from provisioner.devices import plan as devices
from tests.launch.conftest import launch_containers


@pytest.mark.mknod
def test_simulated_host_plans_like_a_real_one(tmp_path, shipped):
    if os.geteuid() != 0:
        pytest.fail("mknod needs root")
    from provisioner.devices import enginefacts
    from provisioner.resolve import cached, request

    stack = cached.cached_resolve(shipped, request.build(shipped, card="300T-A2"))
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


def test_the_demo_host_without_root_plans_the_same(tmp_path, shipped):
    """The same host with simulated nodes: hostfs reports them as the real ones are, and the plan is the same."""
    from provisioner.devices import enginefacts
    from provisioner.host import hostfs
    from provisioner.resolve import cached, request

    stack = cached.cached_resolve(shipped, request.build(shipped, card="300T-A2"))
    root, dev = demo.simulated_host(tmp_path, stack, nodes="simulated")
    for n in sorted(os.listdir(dev)):
        st = hostfs.lstat(dev / n)
        assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (1, 3)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (1000, 1000, 0o660)
    plan = devices.plan(shipped, devices.Options(card="300T-A2", devices="0-1", root=str(root), dev_root=str(dev),
                                                 stack=stack, engine=enginefacts.EngineFacts(reachable=True)))
    assert plan.chips == (0, 1) and plan.group_add == (1000,) and plan.stack["driver_fit"] == "ok" and not plan.notes
    assert [n.name for n in plan.nodes] == ["davinci0", "davinci1", "davinci_manager", "devmm_svm", "hisi_hdc"]


@pytest.mark.docker
@pytest.mark.slow
def test_demo_launch_runs_the_check_and_a_real_short_training(launch_image, docker_client, tmp_path, capfd):
    from provisioner.demo.job import prepare_grpo, prepare_job

    job = tmp_path / "job"
    args = prepare_job(job)
    # and 4 steps of the demo's GRPO job in the same image (TRL, datasets, math-verify from the image's lock)
    demo.launch_steps(launch_image, args, job_dir=job, grpo_args=[*prepare_grpo(job), "max_steps=4"])
    out, err = capfd.readouterr()
    assert "--check-only" in out and "[rank0]:all_reduce: 2 ranks (2 per node), backend gloo on cpu" in out
    assert "check ok: all_reduce across 2 ranks (gloo on cpu)" in err
    assert "-m provisioner.train --config /job/train.yaml --json" in err
    rows = [json.loads(x) for x in (job / "out" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    losses = [r["loss"] for r in rows if "loss" in r]
    assert len(losses) == 12 and losses[-1] < losses[0], losses
    # the image carries matplotlib (the pytorch recipe's plot extra): the curve is drawn
    assert (job / "out" / "loss_curve.png").is_file(), out + err
    assert sorted(p.name for p in (job / "out" / "checkpoints").iterdir())[-1] == "step-00000012"
    assert "loss " in out and "checkpoints: " in out
    grpo = [json.loads(x) for x in (job / "grpo-out" / "metrics.jsonl").read_text().splitlines() if x.strip()]
    assert [r["step"] for r in grpo] == [1, 2, 3, 4], grpo
    assert all(r["reward_mean"] is None or 0 <= r["reward_mean"] <= 1 for r in grpo)
    assert sum(r["reward_mean"] is not None for r in grpo) == 2  # num_iterations 2: a generation every other step
    assert "-m provisioner.train --config /job/grpo.yaml --json max_steps=4" in err and "GRPO reward " in out
    assert (job / "grpo-out" / "loss_curve.png").is_file() and (job / "grpo-out" / "final" / "config.json").is_file()
    for run_id in re.findall(r"provision launch: run ([0-9a-f]{12}) finished: exit 0", err):
        assert not launch_containers(docker_client, run_id)
