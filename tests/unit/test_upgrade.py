"""provision diff and provision upgrade (provisioner/upgrade/): the must-show cases of issue 25 on the real matrix
and the committed fixture hosts, bad input as one line and exit 2, and the rules of matrices/upgrade.yaml."""

from __future__ import annotations

import json

import pytest

from provisioner.cli import main
from provisioner.errors import ProvisionError
from tests.helpers.hosts import FIXTURES

UPGRADE_HOST = FIXTURES / "fit-800ta2-24.1rc3-upgrade" / "tree"
FIT_HOST = FIXTURES / "fit-800ta2-24.1rc3" / "tree"
SMI = "usr/local/share/npu-smi-fixture/info.txt"


def run(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def doc_of(capsys, *args) -> tuple[int, dict]:
    code, out, _ = run(capsys, *args, "--json")
    return code, json.loads(out)


@pytest.fixture(scope="module")
def matrix():
    from provisioner.matrix import loader

    return loader.load()


def test_diff_names_cann_torch_numpy_and_the_driver_each_needs(capsys):
    code, doc = doc_of(capsys, "diff", "--card", "800T-A2", "--arch", "aarch64", "cann=8.1.RC1,torch=2.5.1",
                       "cann=8.5.0", "--driver", "24.1.rc3")
    assert code == 0 and doc["schema"] == "provision.diff/1"
    parts = {p["part"]: p for p in doc["parts"]}
    assert (parts["cann"]["a"], parts["cann"]["b"], parts["cann"]["change"]) == ("8.1.RC1", "8.5.0", "upgraded")
    assert (parts["torch"]["a"], parts["torch"]["b"]) == ("2.5.1", "2.9.0")
    numpy = next(p for p in doc["packages"] if p["name"] == "numpy")
    assert (numpy["a"], numpy["b"]) == ("1.26.0", "1.26.4")  # CANN 8.5.0 < 9: the numpy-1 twin of the torch 2.9 set
    assert doc["b"]["lock"] == "package set torch2.9-cann8"
    assert doc["driver"]["a"].startswith("25.0.RC1 (paired)") and doc["driver"]["b"].startswith("25.5.0 or 25.5.1")
    assert "25.0.RC1" in doc["driver"]["both"]
    # the host driver runs A, not B: the diff says why
    assert doc["driver"]["host"]["a"]["verdict"] == "ok" and doc["driver"]["host"]["b"]["verdict"] == "too-old"
    assert any(c.startswith("CANN 8.1.RC1 -> 8.5.0: the host driver must be 25.5.0") for c in doc["changes"])
    assert any(c.startswith("numpy 1.26.0 -> 1.26.4") for c in doc["changes"])
    # transformers 4.47.1 -> 4.57.6: the Hub kernel swap window starts, the pre-4.51 ImportError ends
    status = {r["id"]: r["status"] for r in doc["rules"]}
    assert status["transformers-hub-kernel-swap"] == "new" and status["transformers-npu-flash-attention"] == "gone"
    code, out, _ = run(capsys, "diff", "--card", "800T-A2", "cann=8.1.RC1,torch=2.5.1", "cann=8.5.0")
    assert code == 0 and "numpy" in out and "B needs 25.5.0 or 25.5.1" in out


def test_diff_reads_a_stack_file_side(capsys, tmp_path):
    code, out, _ = run(capsys, "resolve", "--card", "800T-A2", "--cann", "8.1.RC1", "--torch", "2.5.1",
                       "--for-host", "none", "--json")
    assert code == 0
    path = tmp_path / "a.json"
    path.write_text(out)
    code, doc = doc_of(capsys, "diff", "--card", "800T-A2", str(path), "cann=8.1.RC1,torch=2.5.1")
    assert code == 0 and doc["a"]["from"] == "stack file"
    assert all(p["change"] == "same" for p in doc["parts"]) and doc["packages"] == []


def test_numpy2_on_cann8_breaks_and_its_rule_is_data(matrix):
    from provisioner.upgrade import rules

    stack = {"cann": {"version": "8.5.0"}, "python": "3.11", "extras": {}}
    hits = {r["id"]: r for r in rules.judge(matrix, stack, {"numpy": "2.1.0"})}
    assert hits["numpy2-needs-cann9"]["broken"] and hits["numpy2-needs-cann9"]["source"]
    ok = {r["id"]: r for r in rules.judge(matrix, {**stack, "cann": {"version": "9.0.0"}}, {"numpy": "2.1.0"})}
    assert not ok["numpy2-needs-cann9"]["broken"]
    assert "numpy2-needs-cann9" not in {r["id"] for r in rules.judge(matrix, stack, {"numpy": "1.26.4"})}


def test_apex_on_a_newer_python_breaks(matrix):
    from provisioner.upgrade import rules

    stack = {"cann": {"version": "8.5.0"}, "python": "3.11", "apex": {"ref": "master"}, "extras": {},
             "torch": {"version": "2.9.0"}}
    hits = {r["id"]: r for r in rules.judge(matrix, stack, {})}
    assert hits["apex-python"]["broken"] and "3.7-3.10" in hits["apex-python"]["says"]
    assert not hits["apex-torch-unconfirmed"]["broken"]


def test_a_rule_with_an_unknown_key_is_one_error(tmp_path, matrix):
    from provisioner.matrix import loader
    from provisioner.upgrade import rules

    overlay = tmp_path / "o.yaml"
    overlay.write_text("upgrade_rules:\n  - id: typo\n    when: {pakage: numpy}\n    says: x\n    source: me\n")
    m = loader.load([str(overlay)], use_cache=False)
    with pytest.raises(ProvisionError, match="rule 'typo': when has unknown key 'pakage'"):
        rules.judge(m, {"python": "3.11"}, {})


def test_upgrade_plans_firmware_then_driver_then_cann(capsys):
    code, doc = doc_of(capsys, "upgrade", "--root", str(UPGRADE_HOST), "--npu-smi-output", str(UPGRADE_HOST / SMI),
                       "--card", "800T-A2", "--to-cann", "8.5.0")
    assert code == 0 and doc["schema"] == "provision.upgrade/1"
    assert doc["host"]["driver"] == "24.1.rc3" and doc["host"]["firmware"] == "7.5.0.1.129"
    assert doc["hdk"] == {"from": "24.1.rc3", "to": "25.5.0", "needed": True, "fit_now": "no",
                          "firmware_from": "7.5.0.1.129", "firmware_to": "7.8.0.5.216"}
    ids = [s["id"] for s in doc["steps"]]
    assert ids == ["firmware", "driver", "reboot", "toolkit", "ops", "build", "checks"]
    by_id = {s["id"]: s for s in doc["steps"]}
    assert by_id["firmware"]["commands"][-1] == "./Ascend-hdk-910b-npu-firmware_7.8.0.5.216.run --full"
    assert by_id["driver"]["commands"][-1] == "./Ascend-hdk-910b-npu-driver_25.5.0_linux-x86_64.run --full --install-for-all"
    assert by_id["toolkit"]["commands"][-1] == "./Ascend-cann-toolkit_8.5.0_linux-x86_64.run --upgrade"
    assert by_id["ops"]["package"] == "Ascend-cann-910b-ops_8.5.0_linux-x86_64.run"  # kernels renamed from 8.5.0
    assert by_id["build"]["commands"] == ["provision build --card 800T-A2 --cann 8.5.0 --python 3.11 --torch 2.9.0"
                                          " --torch-npu 2.9.0"]
    assert all(s["source"] for s in doc["steps"] if s["stage"] in ("hdk", "cann"))
    assert [o["id"] for o in doc["order"]] == ["npu-before-cann", "hdk-order"]
    assert doc["rollback"]["to"] == "24.1.rc3" and doc["rollback"]["firmware"] == "7.5.0.1.129"
    assert [s["id"] for s in doc["rollback"]["steps"]] == ["firmware", "driver"]
    assert "8.5.0" in doc["stays_valid"]["runs"]
    code, out, _ = run(capsys, "upgrade", "--root", str(UPGRADE_HOST), "--npu-smi-output", str(UPGRADE_HOST / SMI),
                       "--to-cann", "8.5.0")
    assert code == 0 and out.index("upgrade the driver to HDK 25.5.0") < out.index("CANN 8.5.0 on the host: toolkit")


def test_upgrade_without_an_hdk_step_where_the_driver_runs_the_target(capsys):
    code, doc = doc_of(capsys, "upgrade", "--root", str(FIT_HOST), "--card", "800T-A2", "--to-cann", "8.1.RC1")
    assert code == 0 and doc["hdk"]["needed"] is False and doc["rollback"] is None
    assert [s["stage"] for s in doc["steps"]] == ["image", "check"]


# CANN 9.1.X runs on no HDK of the 25.0 line (the 9.1.0 / 9.1.1 release notes), the newest HDK hdk.yaml lists for
# the first-generation 910; the overlay gives CANN 9.1.0 an image for chip 910 so that the HDK is what refuses it
IMAGE_910 = ("images:\n  - cann: \"9.1.0\"\n    tags: [910-ubuntu22.04-py3.11]\n"
             "    source: test overlay (an image for chip 910 the recorded list does not have)\n")


def unreachable(tmp_path, *more) -> list[str]:
    overlay = tmp_path / "image-910.yaml"
    overlay.write_text(IMAGE_910)
    return ["upgrade", "--root", str(FIXTURES / "broken-unhealthy-910" / "tree"), "--card", "800-9000",
            "--to-cann", "9.1.0", "--matrix", str(overlay), *more]


def test_upgrade_refuses_a_target_the_card_cannot_reach_with_the_nearest(capsys, tmp_path):
    code, out, err = run(capsys, *unreachable(tmp_path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "the newest HDK matrices/hdk.yaml lists for Ascend 910 (first generation) is 25.0.rc1" in err
    assert "nearest target that works: CANN 9.0.1" in err
    code, doc = doc_of(capsys, *unreachable(tmp_path))
    assert code == 2 and doc["status"] == "refused" and any("CANN 9.0.1" in r for r in doc["reasons"])


@pytest.mark.parametrize("args", [
    ["upgrade", "--root", str(FIT_HOST), "--card", "800T-A2", "--to-cann", "8.5.0\nRUN PWNED"],
    ["upgrade", "--root", str(FIT_HOST), "--card", "800T-A2"],
    ["upgrade", "--root", "/nonexistent-root", "--to-cann", "8.5.0"],
    ["upgrade", "--root", str(FIT_HOST), "--card", "800T-A2", "--to-set", "no-such-set"],
    ["diff", "card=800T-A2,nope=1", "card=800T-A2"],
    ["diff", "card=800T-A2", "card=800T-A2,cann=x;PWNED"],
    ["diff", "--driver", "24.1.rc3 PWNED", "card=800T-A2", "card=800T-A2"],
])
def test_bad_input_is_one_line_and_exit_2(capsys, args):
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    assert err.startswith("provision: error: ") and len(err.strip().splitlines()) == 1


def test_a_poisoned_stack_file_is_refused(capsys, tmp_path):
    code, out, _ = run(capsys, "resolve", "--card", "800T-A2", "--for-host", "none", "--json")
    doc = json.loads(out)
    doc["stack"]["base_image"]["ref"] = "x\nRUN PWNED"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, "diff", str(path), "card=800T-A2")
    assert code == 2 and "PWNED" not in out and len(err.strip().splitlines()) == 1


def test_a_host_without_a_driver_installs_the_driver_first(capsys):
    code, doc = doc_of(capsys, "upgrade", "--root", str(FIXTURES / "plan-no-driver" / "tree"), "--card", "800T-A2",
                       "--to-cann", "8.5.0")
    assert code == 0 and doc["hdk"]["from"] is None and doc["hdk"]["to"] == "25.5.0"
    assert [s["id"] for s in doc["steps"]][:3] == ["driver", "firmware", "reboot"]


def test_upgrade_to_a_framework_set(capsys):
    code, doc = doc_of(capsys, "upgrade", "--root", str(FIT_HOST), "--card", "800T-A2", "--to-set",
                       "mindspeed-llm-2.3.0")
    assert code == 0 and doc["target"]["stack"]["extras"]["mindspeed_llm"]["set"] == "mindspeed-llm-2.3.0"
    assert "--with mindspeed-llm" in next(s for s in doc["steps"] if s["id"] == "build")["commands"][0]


def test_the_nearest_target_line_keeps_the_requests_options(capsys, tmp_path):
    code, _, err = run(capsys, *unreachable(tmp_path, "--task", "train", "--python", "3.11"))
    assert code == 2 and err.rstrip().endswith("provision upgrade --card 800-9000 --to-cann 9.0.1 --task train"
                                               " --python 3.11")


def test_diff_says_which_rule_keeps_numpy_below_2(capsys):
    code, doc = doc_of(capsys, "diff", "--card", "800T-A2", "cann=8.1.RC1,torch=2.5.1", "cann=8.5.0")
    line = next(c for c in doc["changes"] if c.startswith("numpy "))
    assert "kept clear of rule numpy2-needs-cann9 on B" in line


def test_the_current_image_keeps_running_on_the_new_driver(capsys, tmp_path):
    code, out, _ = run(capsys, "resolve", "--card", "800T-A2", "--cann", "8.1.RC1", "--for-host", "none", "--json")
    path = tmp_path / "now.json"
    path.write_text(out)
    code, doc = doc_of(capsys, "upgrade", "--root", str(UPGRADE_HOST), "--card", "800T-A2", "--to-cann", "8.5.0",
                       "--stack", str(path))
    assert code == 0 and doc["stays_valid"]["current"]["cann"] == "8.1.RC1"
    assert doc["stays_valid"]["current"]["fit"] == "newer"  # 25.5.0 is newer than every HDK 8.1.RC1 lists


@pytest.mark.parametrize("field", [("apex", {"ref": "x\nRUN PWNED", "setuptools": "65.7.0"}),
                                   ("extras", {"deepspeed": {"requirement": "x\rPWNED"}})])
def test_a_stack_file_with_a_line_break_in_a_printed_field_is_refused(capsys, tmp_path, field):
    code, out, _ = run(capsys, "resolve", "--card", "800T-A2", "--for-host", "none", "--json")
    doc = json.loads(out)
    doc["stack"][field[0]] = field[1]
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    code, out, err = run(capsys, "diff", str(path), "card=800T-A2")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1


def test_a_diff_side_read_from_an_image_label(matrix):
    from provisioner.engine.fake import FakeEngine
    from provisioner.resolve import cached
    from provisioner.upgrade import diff, stacks

    _, stack = cached.stack_for([], {"card": "800T-A2", "cann": "8.1.RC1", "torch": "2.5.1", "arch": "aarch64"})
    fake = FakeEngine()
    fake.add_image("provision/pytorch:old", labels={"org.provision.stack": json.dumps(stack)})
    a, how = stacks.load_side(matrix, "provision/pytorch:old", "A", {}, engine=fake)
    assert how == "image label" and a["cann"]["version"] == "8.1.RC1"
    b, _ = stacks.load_side(matrix, "cann=8.5.0", "B", {"card": "800T-A2", "arch": "aarch64"})
    doc = diff.diff(matrix, a, b, how, "options")
    assert next(p for p in doc["parts"] if p["part"] == "cann")["b"] == "8.5.0"
    with pytest.raises(ProvisionError, match="no such image"):
        stacks.load_side(matrix, "provision/pytorch:missing", "A", {}, engine=fake)
