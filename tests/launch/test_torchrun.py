"""The command and environment a launched container gets, from real device plans of fixture hosts."""

from __future__ import annotations

import pytest

from provisioner.devices import plan as devices
from provisioner.devices import torchrun
from provisioner.errors import ProvisionError


def test_single_node_trainer_command(make_plan):
    plan = make_plan("0-3")
    target = torchrun.Target.train(["--config", "/data/train.yaml", "lr=1e-4"])
    assert torchrun.command(plan, target, 4) == [
        "torchrun", "--nproc-per-node", "4", "--standalone", "--tee", "3",
        "-m", "provisioner.train", "--config", "/data/train.yaml", "lr=1e-4",
    ]


def test_check_script_and_exec_commands(make_plan):
    plan = make_plan("1,3")
    assert torchrun.command(plan, torchrun.Target.check(), 2)[-2:] == ["-m", "provisioner.launch.collective"]
    assert torchrun.command(plan, torchrun.Target("script", "/w/run.py", ("a", "b")), 2)[-3:] == ["/w/run.py", "a", "b"]
    # exec: the command as given, nothing added
    assert torchrun.command(plan, torchrun.Target("exec", None, ("python", "x.py")), 2) == ["python", "x.py"]
    with pytest.raises(ProvisionError, match="--exec needs the command"):
        torchrun.Target("exec", None, ())


def test_multi_node_rendezvous_from_the_plan(make_plan):
    multi = devices.MultiNode(nnodes=2, node_rank=1, master_addr="10.0.0.1")
    plan = make_plan("0-3", multi=multi, socket_ifname="=eth0")
    argv = torchrun.command(plan, torchrun.Target.train(), 4)
    assert argv[:12] == ["torchrun", "--nproc-per-node", "4", "--nnodes", "2", "--node-rank", "1",
                         "--master-addr", "10.0.0.1", "--master-port", "29500", "--tee"]
    assert "--standalone" not in argv
    env = {e.name: e.value for e in plan.env}
    # HCCL's exact-name syntax, and the same interface in Gloo's (which has no '=')
    assert (env["HCCL_SOCKET_IFNAME"], env["GLOO_SOCKET_IFNAME"], env["NODE_RANK"]) == ("=eth0", "eth0", "1")
    assert plan.network == "host"


def test_environment_defaults_and_overrides(make_plan):
    plan = make_plan("0-3")
    env, nproc = torchrun.environment(plan, {}, {})
    assert nproc == 4
    assert env == {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
                   "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}]:"}
    # -e wins; an image that sets a default keeps it
    env, _ = torchrun.environment(plan, {"OMP_NUM_THREADS": "8", "X": "1"}, {"PYTHONUNBUFFERED": "0"})
    assert env["OMP_NUM_THREADS"] == "8" and env["X"] == "1" and "PYTHONUNBUFFERED" not in env
    # the plan's HCCL variables are not repeated here (docker_kwargs carries them)
    assert "HCCL_CONNECT_TIMEOUT" not in env


@pytest.mark.parametrize("value, nproc", [("0,1,2,3", 4), ("1,3", 2), ("0", 1)])
def test_visible_devices_narrow_the_workers(make_plan, value, nproc):
    plan = make_plan("4-7", name="plan-800ta2-8", card="800T-A2")
    env, n = torchrun.environment(plan, {"ASCEND_RT_VISIBLE_DEVICES": value}, {})
    assert n == nproc
    assert env.get("NPROC_PER_NODE", "4") == str(nproc)


@pytest.mark.parametrize("value", ["4,5", "1,0", "0,0", "0, 1", "", "npu0", "0-1"])
def test_visible_devices_must_be_ascending_container_local_ids(make_plan, value):
    plan = make_plan("4,5", name="plan-800ta2-8", card="800T-A2")
    with pytest.raises(ProvisionError) as err:
        torchrun.environment(plan, {"ASCEND_RT_VISIBLE_DEVICES": value}, {})
    assert "ascending container-local ids from 0 to 1" in str(err.value)
    assert "host chips 4,5 are NPU 0,1 inside" in str(err.value)


def test_visible_devices_from_the_image_are_checked_too(make_plan):
    plan = make_plan("0,1")
    with pytest.raises(ProvisionError, match="ASCEND_RT_VISIBLE_DEVICES='6,7'"):
        torchrun.environment(plan, {}, {"ASCEND_RT_VISIBLE_DEVICES": "6,7"})
    # ... and -e can put it right
    _, n = torchrun.environment(plan, {"ASCEND_RT_VISIBLE_DEVICES": "0,1"}, {"ASCEND_RT_VISIBLE_DEVICES": "6,7"})
    assert n == 2


def test_parse_env():
    assert torchrun.parse_env(["A=1", "B=x=y", "C="], {}) == {"A": "1", "B": "x=y", "C": ""}
    assert torchrun.parse_env(["HOME"], {"HOME": "/root"}) == {"HOME": "/root"}
    with pytest.raises(ProvisionError, match="not set in this shell"):
        torchrun.parse_env(["NOPE"], {})
    with pytest.raises(ProvisionError, match="write KEY=VALUE"):
        torchrun.parse_env(["1A=2"], {})


def test_parse_volume(tmp_path):
    assert torchrun.parse_volume(f"{tmp_path}:/data:ro") == (str(tmp_path), "/data", "ro")
    assert torchrun.parse_volume(f"{tmp_path}:/data") == (str(tmp_path), "/data", "rw")
    for bad, phrase in [(f"{tmp_path}", "HOST_PATH:CONTAINER_PATH"), (f"{tmp_path}:/d:rx", "mode is ro or rw"),
                        (f"{tmp_path}:rel", "must be absolute"), (f"{tmp_path}/none:/d", "does not exist")]:
        with pytest.raises(ProvisionError, match=phrase):
            torchrun.parse_volume(bad)


@pytest.mark.parametrize("labels, start", [
    ({"org.provision.launcher": "provisioner.launch.teerun"}, ["python", "-m", "provisioner.launch.teerun"]),
    ({}, ["torchrun"]),
    (None, ["torchrun"]),
    # an image from elsewhere names another module, or text that is not one: never a word of the command
    ({"org.provision.launcher": "evil.module"}, ["torchrun"]),
    ({"org.provision.launcher": "provisioner.launch.teerun; rm -rf /"}, ["torchrun"]),
])
def test_the_quick_tail_launcher_only_where_the_image_says_it_carries_it(make_plan, labels, start):
    plan = make_plan("0-1")
    argv = torchrun.command(plan, torchrun.Target.train(), 2, torchrun.launcher(labels))
    assert argv[:len(start) + 2] == [*start, "--nproc-per-node", "2"]
    assert argv[len(start) + 2:] == ["--standalone", "--tee", "3", "-m", "provisioner.train"]


def test_every_image_this_project_builds_says_it_carries_the_launcher():
    """The module exists here (the project the images install), and every rendered recipe labels it."""
    import importlib.util
    from pathlib import Path

    from provisioner.image import labels

    assert importlib.util.find_spec(labels.LAUNCHER_MODULE) is not None
    goldens = sorted((Path(__file__).resolve().parents[1] / "golden" / "images").glob("*/Dockerfile"))
    assert len(goldens) >= 10
    for dockerfile in goldens:
        assert f'{labels.LAUNCHER_LABEL}="{labels.LAUNCHER_MODULE}"' in dockerfile.read_text(), dockerfile.parent.name
