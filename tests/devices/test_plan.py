"""The planner on fixture hosts: what it maps, what it notes, and every refusal."""

from __future__ import annotations

import json

import pytest

from provisioner.devices import enginefacts
from provisioner.devices import plan as devices
from provisioner.devices.plan import MultiNode, PlanRefused
from provisioner.errors import MatrixError, ProvisionError
from provisioner.host import fakehost
from provisioner.resolve import cached, request
from tests.devices.test_enginefacts import inspect
from tests.helpers import hosts


def stack(shipped, card, cann):
    return cached.cached_resolve(shipped, request.build(shipped, card=card, cann=cann))


def names(plan):
    return [n.name for n in plan.nodes]


def mounts(plan):
    return {m.id: (m.host, m.container) for m in plan.mounts}


def test_a2_four_cards(make_plan):
    plan = make_plan("plan-300ta2-4", "300T-A2", "0-3")
    assert plan.chips == (0, 1, 2, 3) and plan.family == "910b" and plan.device_family == "910"
    assert names(plan) == ["davinci0", "davinci1", "davinci2", "davinci3", "davinci_manager", "devmm_svm", "hisi_hdc"]
    assert [n.container for n in plan.chip_nodes] == [f"/dev/davinci{i}" for i in range(4)]
    assert (plan.nodes[0].major, plan.nodes[0].minor, plan.nodes[0].mode, plan.nodes[0].gid) == (236, 0, 0o660, 1000)
    assert list(mounts(plan)) == ["driver-lib64", "driver-include", "driver-version", "install-info", "dcmi", "npu-smi"]
    assert plan.group_add == (1000,) and "HwHiAiUser" in plan.group_why
    assert (plan.ipc, plan.shm_size, plan.network) == ("host", None, None)
    assert {e.name: e.value for e in plan.env} == {"HCCL_CONNECT_TIMEOUT": "3600", "HCCL_EXEC_TIMEOUT": "3600", "NPROC_PER_NODE": "4"}
    assert plan.driver["version"] == "24.1.0" and plan.driver["mount"] == "lib64"
    assert plan.notes == ()


def test_npu_smi_from_sbin_appears_in_bin(make_plan):
    plan = make_plan("plan-800ta2-8", "800T-A2", "4,5")
    assert mounts(plan)["npu-smi"] == ("/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi")
    assert plan.group_add == (1001,)
    assert [n.name for n in plan.chip_nodes] == ["davinci4", "davinci5"]


def test_single_chip_is_not_distributed(make_plan):
    plan = make_plan("plan-300ta2-4", "300T-A2", "2")
    assert plan.env == ()


def test_multi_node_adds_network_hccn_and_rendezvous(make_plan):
    plan = make_plan("plan-800ta2-8", "800T-A2", "0-7", multi=MultiNode(2, 1, "10.0.0.1"), socket_ifname="eth0")
    assert plan.network == "host"
    assert mounts(plan)["hccn-tool"][0] == "/usr/local/Ascend/driver/tools/hccn_tool"
    assert mounts(plan)["hccn-conf"] == ("/etc/hccn.conf", "/etc/hccn.conf")
    env = {e.name: e.value for e in plan.env}
    assert env["MASTER_ADDR"] == "10.0.0.1" and env["MASTER_PORT"] == "29500"
    assert (env["NNODES"], env["NODE_RANK"], env["NPROC_PER_NODE"]) == ("2", "1", "8")
    # eth0 is a prefix for HCCL; Gloo takes exact names, and this host tree lists no interfaces.
    assert env["HCCL_SOCKET_IFNAME"] == "eth0" and env["GLOO_SOCKET_IFNAME"] is None
    assert any(n.startswith("GLOO_SOCKET_IFNAME left unset") for n in plan.notes)
    assert env["HCCL_IF_IP"] is None  # Kubernetes fills it from status.hostIP
    assert plan.world_size == 16


def test_timeouts_can_be_raised_within_the_documented_range(make_plan):
    plan = make_plan("plan-300ta2-4", "300T-A2", "0-1", hccl_connect_timeout="7200")
    assert {e.name: e.value for e in plan.env}["HCCL_CONNECT_TIMEOUT"] == "7200"
    with pytest.raises(ProvisionError, match=r"HCCL_CONNECT_TIMEOUT='60'.*\[120, 7200\]"):
        make_plan("plan-300ta2-4", "300T-A2", "0-1", hccl_connect_timeout="60")


def test_a3_sixteen_with_dvpp(make_plan):
    plan = make_plan("plan-a3-16", "800T-A3", "0-15")
    assert len(plan.chip_nodes) == 16 and "dvpp_cmdlist" in names(plan)


def test_310p_card(make_plan):
    plan = make_plan("plan-300ipro-1", "300I-Pro", "0", task="inference")
    assert names(plan) == ["davinci0", "davinci_manager", "devmm_svm", "hisi_hdc", "dvpp_cmdlist"]
    assert plan.k8s_resource == "huawei.com/Ascend310P"


def test_950_maps_whole_driver_and_ub_nodes_without_devmm_svm(make_plan):
    plan = make_plan("plan-950-1", "350", "0")
    assert names(plan) == ["davinci0", "davinci_manager", "hisi_hdc", "uburma/uburma0", "ummu/ummu0"]
    m = mounts(plan)
    assert m["driver-whole"] == ("/usr/local/Ascend/driver", "/usr/local/Ascend/driver")
    assert "driver-version" not in m and "driver-lib64" not in m  # inside the whole directory
    assert "topo" in plan.driver["why"]
    assert plan.k8s_resource == "huawei.com/npu"


def test_driver_mount_override(make_plan):
    plan = make_plan("plan-300ta2-4", "300T-A2", "0", driver_mount="whole")
    assert "driver-whole" in mounts(plan) and "driver-lib64" not in mounts(plan)
    assert plan.driver["why"] == "chosen with --driver-mount"


def test_runtime_mode_leaves_runtime_mounts_out(make_plan):
    plan = make_plan("plan-800ta2-8", "800T-A2", "4,5", mode="runtime")
    assert plan.runtime_env == (("ASCEND_VISIBLE_DEVICES", "4,5"),)
    # The runtime's base.list has /usr/local/bin/npu-smi, not sbin: that one stays.
    assert sorted(mounts(plan)) == ["driver-version", "install-info", "npu-smi"]


def test_310b_prefers_the_docker_manager_node(shipped, tmp_path):
    dev = tmp_path / "dev"
    fakehost.make_nodes(dev, [fakehost.Node("davinci0", "c", 236, 0, 0o660, 0, 0),
                              fakehost.Node("davinci_manager_docker", "c", 235, 1, 0o660, 0, 0),
                              fakehost.Node("davinci_manager", "c", 235, 0, 0o660, 0, 0),
                              fakehost.Node("vdec", "c", 218, 1, 0o660, 0, 0)])
    root = hosts.materialize("plan-300ta2-4", tmp_path / "r").root
    plan = devices.plan(shipped, devices.Options(card="200I-A2", devices="0", root=str(root), dev_root=str(dev), task="inference",
                                                 mode="runtime", check_in_use=False))
    shared = {n.name: n.container for n in plan.shared_nodes}
    assert shared == {"davinci_manager_docker": "/dev/davinci_manager", "vdec": "/dev/vdec"}
    assert ("ASCEND_ALLOW_LINK", "True") in plan.runtime_env
    assert plan.group_add == () and "root-owned" in plan.group_why


def test_rebase_changes_host_paths_only(make_plan, plan_hosts):
    plan = make_plan("plan-300ta2-4", "300T-A2", "0")
    h = plan_hosts["plan-300ta2-4"]
    assert plan.node_path(plan.nodes[0]) == f"{h.dev_root}/davinci0"
    assert plan.host_path(plan.mounts[0]) == f"{h.root}/usr/local/Ascend/driver/lib64"
    real = plan.rebase()
    assert real.node_path(real.nodes[0]) == "/dev/davinci0"
    assert real.host_path(real.mounts[0]) == "/usr/local/Ascend/driver/lib64"
    assert real.mounts == plan.mounts


def test_plan_dict_is_json(make_plan):
    d = make_plan("plan-300ta2-4", "300T-A2", "1,3").to_dict()
    json.dumps(d)
    assert d["chips"] == [1, 3] and d["container_ids"] == [0, 1]
    assert d["nodes"][0]["mode"] == "0660" and d["mounts"][0]["read_only"] is True


def test_rank_table_is_mounted_and_named(make_plan, tmp_path):
    table = tmp_path / "hccl.json"
    table.write_text("{}")
    plan = make_plan("plan-800ta2-8", "800T-A2", "0-7", rank_table=str(table))
    assert mounts(plan)["rank-table"] == (str(table), "/etc/provision/hccl.json")
    rank = next(m for m in plan.mounts if m.id == "rank-table")
    assert plan.host_path(rank) == str(table)  # this machine's file, not one under --root
    assert "--rank-table is mounted from this machine's path" in plan.notes[0]
    assert {e.name: e.value for e in plan.env}["RANK_TABLE_FILE"] == "/etc/provision/hccl.json"
    link = tmp_path / "link.json"
    link.symlink_to(table)
    with pytest.raises(ProvisionError, match="symlinks"):
        make_plan("plan-800ta2-8", "800T-A2", "0-7", rank_table=str(link))


# ------------------------------------------------------------------ notes


def test_no_engine_is_a_note(make_plan):
    plan = make_plan("plan-300ta2-4", "300T-A2", "0", engine=enginefacts.EngineFacts(False, note="no Docker engine reachable (x)"))
    assert plan.notes == ("in-use check skipped: no Docker engine reachable (x)",)
    plan = make_plan("plan-300ta2-4", "300T-A2", "0", engine=None, engine_skipped="--no-engine")
    assert plan.notes == ("in-use check skipped: --no-engine",)


def test_privileged_container_is_a_note(make_plan):
    facts = enginefacts.EngineFacts(True, containers=[inspect("old-seed", privileged=True)])
    plan = make_plan("plan-300ta2-4", "300T-A2", "0", engine=facts)
    assert "old-seed" in plan.notes[0] and "every chip" in plan.notes[0]


def test_newer_driver_is_a_note_not_a_refusal(make_plan, shipped):
    s = stack(shipped, "300T-A2", "8.0.0")
    plan = make_plan("plan-300ta2-4", "300T-A2", "0", stack=s)
    assert plan.stack == {"id": s["id"], "cann": "8.0.0", "chip": "910b", "driver_fit": "ok"}


# ------------------------------------------------------------------ refusals


def refused(make_plan, *args, **kw) -> str:
    with pytest.raises(PlanRefused) as err:
        make_plan(*args, **kw)
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_refuses_ids_that_do_not_exist(make_plan):
    msg = refused(make_plan, "plan-300ta2-4", "300T-A2", "2-5")
    assert msg.startswith("chip 4,5 not found") and "davinci4, davinci5" in msg and "chips present: 0-3" in msg


def test_refuses_a_chip_held_by_a_running_container(make_plan, plan_hosts):
    dev = plan_hosts["plan-300ta2-4"].dev_root
    facts = enginefacts.EngineFacts(True, containers=[inspect("llama-sft", devices=[f"{dev}/davinci2"], cid="feedc0ffee1234567")])
    msg = refused(make_plan, "plan-300ta2-4", "300T-A2", "0-3", engine=facts)
    assert msg == (
        f"chip 2 ({dev}/davinci2) is already mapped into running container 'llama-sft' (feedc0ffee12);"
        " a chip serves one container"
    )
    # Chips the container does not hold are fine.
    assert make_plan("plan-300ta2-4", "300T-A2", "0-1", engine=facts).chips == (0, 1)


def test_refuses_training_on_an_inference_card(make_plan):
    msg = refused(make_plan, "plan-300ipro-1", "300I-Pro", "0", task="train")
    assert msg.startswith("300I-Pro cannot train (Atlas inference series (310P) is not a training product)")
    assert "--task inference" in msg and "800T-A2" in msg


def test_refuses_training_on_an_inference_product_of_a_training_family(make_plan):
    msg = refused(make_plan, "plan-800ta2-8", "800I-A2", "0", task="train")
    assert msg.startswith("800I-A2 cannot train (an inference product")


def test_refuses_an_image_whose_cann_needs_a_newer_driver(make_plan, shipped):
    s = stack(shipped, "300T-A2", "9.1.0")
    msg = refused(make_plan, "plan-300ta2-4", "300T-A2", "0-3", stack=s)
    assert msg == (
        f"image stack {s['id']} has CANN 9.1.0, which needs HDK driver {s['driver']['summary']}; this host has 24.1.0"
    )


def test_refuses_an_image_built_for_another_chip(make_plan, shipped):
    s = stack(shipped, "300T-A2", "8.0.0")
    msg = refused(make_plan, "plan-300ipro-1", "300I-Pro", "0", task="inference", stack=s)
    assert "built for chip family 910b, not 310p" in msg


def test_refuses_a_host_without_manager_nodes(make_plan):
    msg = refused(make_plan, "plan-no-manager", "300T-A2", "0-1")
    assert "lacks davinci_manager" in msg and "lacks devmm_svm" in msg and "driver loaded" in msg


def test_refuses_a_host_without_driver(make_plan):
    msg = refused(make_plan, "plan-no-driver", "300T-A2", "0")
    assert msg.startswith("no Ascend driver under ") and "/usr/local/Ascend/driver" in msg


def test_all_reasons_in_one_line(make_plan):
    msg = refused(make_plan, "plan-300ipro-1", "300I-Pro", "0-1", task="train")
    assert msg.count("; ") >= 1 and "chip 1 not found" in msg and "cannot train" in msg


@pytest.mark.parametrize(
    "kw, fragment",
    [
        ({"devices": "3-1"}, "runs backwards"),
        ({"card": "300T-A"}, "unknown card"),
        ({"shm_size": "lots"}, "--shm-size"),
        ({"multi": MultiNode(2, 2, "h")}, "--node-rank 2 must be in 0..1"),
        ({"driver_mount": "half"}, "--driver-mount"),
    ],
)
def test_bad_input(shipped, plan_hosts, kw, fragment):
    h = plan_hosts["plan-300ta2-4"]
    args = {"card": "300T-A2", "devices": "0", "root": str(h.root), "dev_root": str(h.dev_root), "check_in_use": False, **kw}
    with pytest.raises((ProvisionError, MatrixError), match=fragment.replace("(", r"\(")):
        devices.plan(shipped, devices.Options(**args))


def test_missing_dev_root(shipped, tmp_path):
    with pytest.raises(ProvisionError, match="--dev-root .*: no such directory"):
        devices.plan(shipped, devices.Options(card="300T-A2", devices="0", dev_root=str(tmp_path / "nope")))


@pytest.mark.parametrize("spec", ["0", "all"])
def test_a_machine_without_chips_gets_one_reason(shipped, plan_hosts, tmp_path, spec):
    h = plan_hosts["plan-300ta2-4"]
    with pytest.raises(PlanRefused) as err:
        devices.plan(shipped, devices.Options(card="300T-A2", devices=spec, root=str(h.root), dev_root=str(tmp_path)))
    assert err.value.reasons == [
        f"no davinciN device nodes under {tmp_path}: is the Ascend driver installed and loaded? (--dev-root reads another place)"
    ]
