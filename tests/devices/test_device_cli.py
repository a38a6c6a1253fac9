"""provision run-cmd / cdi / k8s / ranktable through main(): exit codes, one-line errors, --json, files."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from provisioner.cli import main
from provisioner.devices import cdi, runline
from provisioner.devices import plan as devices
from tests.devices.conftest import golden


@pytest.fixture
def no_engine(monkeypatch, tmp_path):
    """The Docker SDK finds no engine (a socket path that does not exist)."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def host_args(plan_hosts, name):
    h = plan_hosts[name]
    return ["--root", str(h.root), "--dev-root", str(h.dev_root)]


def one_error_line(rc, out, err, fragment):
    assert rc == 2
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("provision: error: "), err
    assert fragment in lines[0], lines[0]


def test_run_cmd_without_an_engine_prints_the_line(capsys, plan_hosts, shipped, no_engine):
    rc, out, err = run(capsys, "run-cmd", "--card", "300T-A2", "--devices", "0-3", *host_args(plan_hosts, "plan-300ta2-4"),
                       "img:1", "--", "provision-train", "--config", "/w/t.yaml")
    assert rc == 0 and err == ""
    assert "# note: --mode auto: no Docker engine reachable; --device mode" in out
    assert "# note: in-use check skipped: no Docker engine reachable" in out
    # The printed line is exactly the library's rendering of the same plan.
    h = plan_hosts["plan-300ta2-4"]
    cmd_lines = [line for line in out.splitlines() if not line.startswith("#")]
    plan = devices.plan(shipped, devices.Options(card="300T-A2", devices="0-3", root=str(h.root), dev_root=str(h.dev_root),
                                                 engine_skipped="x"))
    lib = [line for line in runline.shell(plan, "img:1", ["provision-train", "--config", "/w/t.yaml"]).splitlines()
           if not line.startswith("#")]
    assert cmd_lines == lib
    assert "--privileged" not in out.replace("no --privileged", "")


def test_run_cmd_json(capsys, plan_hosts, no_engine):
    rc, out, _ = run(capsys, "run-cmd", "--card", "800T-A2", "--devices", "4,5", "--no-engine", "--json",
                     *host_args(plan_hosts, "plan-800ta2-8"), "img:1")
    doc = json.loads(out)
    assert rc == 0 and doc["schema"] == "provision.run-cmd/1" and doc["status"] == "ok"
    assert doc["plan"]["chips"] == [4, 5] and doc["plan"]["container_ids"] == [0, 1]
    assert doc["argv"][:4] == ["docker", "run", "--rm", "-it"] and doc["argv"][-1] == "img:1"
    assert doc["docker_kwargs"]["group_add"] == ["1001"]
    assert doc["shell"].splitlines()[-1] == "  img:1"


def test_run_cmd_runtime_mode(capsys, plan_hosts, no_engine):
    rc, out, _ = run(capsys, "run-cmd", "--card", "800T-A2", "--devices", "4-5", "--mode", "runtime",
                     *host_args(plan_hosts, "plan-800ta2-8"), "img:1", "--", "true")
    assert rc == 0
    assert "  --runtime ascend \\\n  -e ASCEND_VISIBLE_DEVICES=4,5 \\\n" in out and "--device " not in out


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--devices", "3-1"], "--devices '3-1': range '3-1' runs backwards"),
        (["--devices", "0,x"], "cannot read 'x'"),
        (["--devices", "7"], "chip 7 not found"),
        (["--card", "300T-A"], "unknown card '300T-A'"),
        (["--nnodes", "2"], "--nnodes > 1 needs --master-addr"),
        (["--shm-size", "big"], "--shm-size 'big'"),
        (["--stack", "/nonexistent/stack.json"], "--stack /nonexistent/stack.json"),
    ],
)
def test_run_cmd_bad_input_is_one_line(capsys, plan_hosts, no_engine, args, fragment):
    base = {"--card": "300T-A2", "--devices": "0"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = ["run-cmd", *[x for kv in base.items() for x in kv], *host_args(plan_hosts, "plan-300ta2-4"), "img"]
    one_error_line(*run(capsys, *argv), fragment)


def test_missing_dev_root_is_one_line(capsys, tmp_path, no_engine):
    for cmd in (["run-cmd"], ["cdi"], ["k8s"]):
        argv = [*cmd, "--card", "300T-A2", "--devices", "0", "--dev-root", str(tmp_path / "nodev")]
        if cmd[0] != "cdi":
            argv.append("img")
        one_error_line(*run(capsys, *argv), "--dev-root")


def test_missing_card_option_is_one_line(capsys):
    one_error_line(*run(capsys, "run-cmd", "--devices", "0", "img"), "Missing option '--card'")


def test_refusal_json(capsys, plan_hosts, no_engine):
    rc, out, err = run(capsys, "run-cmd", "--card", "300I-Pro", "--devices", "0", "--json",
                       *host_args(plan_hosts, "plan-300ipro-1"), "img")
    doc = json.loads(out)
    assert rc == 2 and doc["status"] == "refused" and "cannot train" in doc["reasons"][0]


def test_stack_file_refusal(capsys, plan_hosts, shipped, tmp_path, no_engine):
    from provisioner.resolve import cached, request

    s = cached.cached_resolve(shipped, request.build(shipped, card="300T-A2", cann="9.1.0"))
    path = tmp_path / "stack.json"
    path.write_text(json.dumps({"schema": "provision.resolve/1", "status": "ok", "stack": s}))
    rc, out, err = run(capsys, "run-cmd", "--card", "300T-A2", "--devices", "0", "--stack", str(path),
                       *host_args(plan_hosts, "plan-300ta2-4"), "img")
    one_error_line(rc, out, err, "has CANN 9.1.0, which needs HDK driver 26.0.RC1 or 26.1.0 (paired)")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    one_error_line(*run(capsys, "run-cmd", "--card", "300T-A2", "--devices", "0", "--stack", str(bad),
                        *host_args(plan_hosts, "plan-300ta2-4"), "img"), "not valid JSON")


def test_cdi_writes_atomically(capsys, plan_hosts, tmp_path):
    out_file = tmp_path / "cdi" / "ascend.yaml"
    out_file.parent.mkdir()
    rc, out, _ = run(capsys, "cdi", "--card", "800T-A2", *host_args(plan_hosts, "plan-800ta2-8"), "--output", str(out_file))
    assert rc == 0 and out.startswith(f"wrote {out_file} (8 chips + all)")
    spec = yaml.safe_load(out_file.read_text())
    assert spec["kind"] == "ascend.com/npu" and [d["name"] for d in spec["devices"]] == [*map(str, range(8)), "all"]
    assert os.listdir(out_file.parent) == ["ascend.yaml"]  # no temporary left behind
    one_error_line(*run(capsys, "cdi", "--card", "800T-A2", *host_args(plan_hosts, "plan-800ta2-8"),
                        "--output", str(tmp_path / "missing-dir" / "x.yaml")), "cannot write")


def test_cdi_json_and_json_format(capsys, plan_hosts, tmp_path):
    rc, out, _ = run(capsys, "cdi", "--card", "950", "--devices", "0", "--json", *host_args(plan_hosts, "plan-950-1"))
    doc = json.loads(out)
    assert rc == 0 and doc["schema"] == "provision.cdi/1" and doc["spec"]["cdiVersion"] == "0.5.0"
    path = tmp_path / "ascend.json"
    assert run(capsys, "cdi", "--card", "950", *host_args(plan_hosts, "plan-950-1"), "-o", str(path))[0] == 0
    assert json.loads(path.read_text())["devices"][-1]["name"] == "all"


def test_cdi_does_not_check_training(capsys, plan_hosts):
    rc, out, _ = run(capsys, "cdi", "--card", "300I-Pro", *host_args(plan_hosts, "plan-300ipro-1"))
    assert rc == 0 and "kind: ascend.com/npu" in out


def test_cdi_cli_matches_library(capsys, plan_hosts, shipped):
    h = plan_hosts["plan-a3-16"]
    rc, out, _ = run(capsys, "cdi", "--card", "800T-A3", "--root", str(h.root), "--dev-root", str(h.dev_root))
    plan = devices.plan(shipped, devices.Options(card="800T-A3", devices="all", root=str(h.root), dev_root=str(h.dev_root),
                                                 task=None, check_in_use=False))
    assert out == cdi.render(plan)


def test_k8s_cli(capsys, plan_hosts):
    rc, out, _ = run(capsys, "k8s", "--card", "800T-A2", "--devices", "0-7", "--nnodes", "2", "--volcano", "--json",
                     *host_args(plan_hosts, "plan-800ta2-8"), "img:1", "--", "torchrun", "train.py")
    doc = json.loads(out)
    assert rc == 0 and doc["schema"] == "provision.k8s/1"
    (job,) = doc["manifests"]
    container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    assert container["args"] == ["torchrun", "train.py"] and "command" not in container  # after the entrypoint
    rc, out, _ = run(capsys, "k8s", "--card", "300T-A2", "--devices", "0-3", *host_args(plan_hosts, "plan-300ta2-4"), "img:1")
    assert rc == 0 and "- --standalone\n" in out and "- provisioner.train\n        - --config\n        - /workspace/train.yaml" in out
    one_error_line(*run(capsys, "k8s", "--card", "300T-A2", "--devices", "0", "--name", "Bad_Name",
                        *host_args(plan_hosts, "plan-300ta2-4"), "img"), "--name 'Bad_Name'")


def test_ranktable_two_nodes(capsys, plan_hosts, tmp_path):
    a, b = plan_hosts["plan-800ta2-8"], plan_hosts["plan-800ta2-8-node1"]
    out_file = tmp_path / "hccl.json"
    rc, out, _ = run(capsys, "ranktable", "--card", "800T-A2", "--devices", "0-7", "--host-root", str(a.root),
                     "--host-root", str(b.root), "--host-ip", "10.0.0.1", "--host-ip", "10.0.0.2", "-o", str(out_file))
    assert rc == 0 and "2 server(s), 16 ranks" in out
    golden("800ta2-2nodes.hccl.json", out_file.read_text())
    table = json.loads(out_file.read_text())
    assert table["version"] == "1.0" and table["server_count"] == "2" and table["status"] == "completed"
    second = table["server_list"][1]
    assert second["server_id"] == second["host_ip"] == "10.0.0.2"
    assert second["device"][0] == {"device_id": "0", "device_ip": "192.168.100.102", "rank_id": "8"}

    def strings(x):
        return all(strings(v) for v in x.values()) if isinstance(x, dict) else \
            all(strings(v) for v in x) if isinstance(x, list) else isinstance(x, str)

    assert strings(table)


def test_ranktable_refusals(capsys, plan_hosts):
    a = plan_hosts["plan-a3-16"]
    one_error_line(*run(capsys, "ranktable", "--card", "800T-A3", "--devices", "0-15", "--host-root", str(a.root)),
                   "rank table version 1.2")
    one_error_line(*run(capsys, "ranktable", "--card", "350", "--devices", "0", "--host-root", str(a.root)),
                   "rank table version 2.0")
    small = plan_hosts["plan-800ta2-8"]
    one_error_line(*run(capsys, "ranktable", "--devices", "0-8", "--host-root", str(small.root)), "has no address_8= line")
    none = plan_hosts["plan-300ta2-4"]
    one_error_line(*run(capsys, "ranktable", "--devices", "0", "--host-root", str(none.root)), "hccn.conf: not found")
    one_error_line(*run(capsys, "ranktable", "--devices", "0", "--host-root", str(small.root), "--host-root", str(small.root)),
                   "server ids repeat")
    one_error_line(*run(capsys, "ranktable", "--devices", "0", "--host-root", str(small.root), "--host-ip", "a", "--host-ip", "b"),
                   "--host-ip given 2 times for 1 --host-root")


def test_commands_start_without_docker_or_yaml():
    code = ("import sys; from provisioner.cli import cli; "
            "print(sorted(m for m in ('docker', 'yaml', 'jinja2', 'provisioner.devices.plan') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
