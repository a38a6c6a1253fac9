"""Launch variables (host.launchvars) as audit, doctor and job files see them."""

from __future__ import annotations

import json
import subprocess
import sys

from provisioner.host import launchvars
from tests.audit.conftest import make_host


def issues(shipped, env: dict) -> dict[str, tuple[str, str]]:
    return {i.name: (i.problem, i.message) for i in launchvars.check(shipped, env)}


def test_the_seeds_variables(shipped):
    # what the seed jobs exported: all known, all in range
    env = {"HCCL_WHITELIST_DISABLE": "1", "HCCL_ASYNC_ERROR_HANDLING": "1", "HCCL_CONNECT_TIMEOUT": "1800",
           "HCCL_EXEC_TIMEOUT": "3600", "HCCL_IF_BASE_PORT": "48000", "TASK_QUEUE_ENABLE": "2",
           "CUDA_DEVICE_MAX_CONNECTIONS": "1", "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True", "HOME": "/root"}
    assert issues(shipped, env) == {}
    assert set(launchvars.relevant(shipped, env)) == set(env) - {"HOME"}


def test_wrong_values_unknown_names_and_legacy_ones(shipped):
    got = issues(shipped, {"HCCL_WHITELIST_DISABLE": "yes", "HCCL_RDMA_TIMEOUT": "25", "HCCL_BUFFSIZE": "0",
                           "HCCL_CONNECT_TIMEOUT": "90", "HCCL_OP_EXPANSION_MODE": "AIV",
                           "HCCL_CONECT_TIMEOUT": "1800", "HCCL_P2P_DISABLE": "1", "TORCH_HCCL_ZERO_COPPY": "1",
                           "HCCL_SOMETHING_ELSE": "1", "NCCL_DEBUG": "WARN"})
    assert got["HCCL_WHITELIST_DISABLE"] == ("invalid", "HCCL_WHITELIST_DISABLE=yes: expected one of 0, 1")
    assert got["HCCL_RDMA_TIMEOUT"] == ("invalid", "HCCL_RDMA_TIMEOUT=25: outside [5, 20]")
    assert got["HCCL_BUFFSIZE"] == ("invalid", "HCCL_BUFFSIZE=0: below the minimum 1")
    assert got["HCCL_CONNECT_TIMEOUT"] == ("invalid", "HCCL_CONNECT_TIMEOUT=90: outside [120, 7200]")
    assert got["HCCL_CONECT_TIMEOUT"][0] == "unknown" and "did you mean HCCL_CONNECT_TIMEOUT?" in got["HCCL_CONECT_TIMEOUT"][1]
    assert "did you mean TORCH_HCCL_ZERO_COPY?" in got["TORCH_HCCL_ZERO_COPPY"][1]
    assert got["HCCL_SOMETHING_ELSE"][0] == "unknown" and "did you mean" not in got["HCCL_SOMETHING_ELSE"][1]
    assert got["HCCL_P2P_DISABLE"][0] == "legacy"
    assert "HCCL_OP_EXPANSION_MODE" not in got and "NCCL_DEBUG" not in got


def test_env_files_are_read_like_a_shell_would(tmp_path):
    text = ("#!/bin/bash\n# comment HCCL_X=1\nexport HCCL_CONNECT_TIMEOUT=1800\nHCCL_ALGO=\"alltoall=level0:NA;level1:pipeline\"\n"
            "export PYTORCH_NPU_ALLOC_CONF='expandable_segments:True'  # fragmentation\n"
            "torchrun --nproc_per_node 8 pretrain_gpt.py\n  export  HCCL_IF_BASE_PORT=25809\nEMPTY=\n")
    assert launchvars.parse_env_file(text, "x.sh") == {
        "HCCL_CONNECT_TIMEOUT": "1800", "HCCL_ALGO": "alltoall=level0:NA;level1:pipeline",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True", "HCCL_IF_BASE_PORT": "25809", "EMPTY": ""}


def _audit(root, dev, *extra) -> dict:
    proc = subprocess.run([sys.executable, "-m", "provisioner.cli", "audit", "--root", str(root), "--dev-root", str(dev),
                           "--json", *extra], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (0, 1, 2), proc.stderr
    return json.loads(proc.stdout)


def test_audit_checks_a_launch_script_and_a_job_file(tmp_path):
    host = make_host("seed-800ta2", tmp_path / "host")
    script = tmp_path / "launch.sh"
    script.write_text("export HCCL_WHITELIST_DISABLE=1\nexport HCCL_CONNECT_TIMEOUT=30\nexport HCCL_CONECT_TIMEOUT=1800\n"
                      "export HCCL_P2P_DISABLE=1\nexport HCCL_ASYNC_ERROR_HANDLING=1\n")
    doc = _audit(host.root, host.dev_root, "--env-file", str(script))
    found = {f["id"]: f for f in doc["findings"] if f["check"] == "launch-env"}
    assert found["launch-env-invalid"]["message"] == f"{script}: HCCL_CONNECT_TIMEOUT=30: outside [120, 7200]"
    assert found["launch-env-invalid"]["severity"] == "warning"
    assert "did you mean HCCL_CONNECT_TIMEOUT?" in found["launch-env-unknown"]["message"]
    assert found["launch-env-legacy"]["severity"] == "info"

    job = tmp_path / "job.yaml"
    job.write_text("kind: mindspeed-rl-grpo\nname: g\nmodel: /m\ndata: {path: /d/x.json}\nparallel: {tensor: 1, data: 8}\n"
                   "train: {seq_length: 1024, global_batch_size: 8, steps: 10}\noutput: /o\n"
                   "env: {HCCL_WHITELIST_DISABLE: '1'}\n")
    doc = _audit(host.root, host.dev_root, "--job", str(job), "-e", "HCCL_IF_BASE_PORT=48000")
    (ok,) = [f for f in doc["findings"] if f["check"] == "launch-env"]
    assert ok["id"] == "launch-env-ok" and ok["message"].startswith(f"{job} + -e: 6 launch variable(s) checked")
    assert "HCCL_WHITELIST_DISABLE" in ok["message"] and "RAY_DEDUP_LOGS" not in ok["message"]
    # without launch variables the audit says nothing about them (the golden audits stay as they were)
    assert not [f for f in _audit(host.root, host.dev_root)["findings"] if f["check"] == "launch-env"]


def test_doctor_flags_unknown_hccl_names(tmp_path, shipped):
    from provisioner.host import doctor

    ctx = doctor.DoctorContext(facts={}, matrix=shipped, env={"HCCL_CONNECT_TIMEOUT": "90", "HCCL_BUFSIZE": "400",
                                                              "HCCL_P2P_DISABLE": "1", "ASCEND_RT_VISIBLE_DEVICES": "1,0"})
    got = {(f.id, f.message) for f in doctor.check_env(ctx)}
    assert ("env-invalid", "HCCL_CONNECT_TIMEOUT=90: outside [120, 7200]") in got
    assert any(i == "env-unknown" and "did you mean HCCL_BUFFSIZE?" in m for i, m in got)
    assert any(i == "env-legacy" for i, _ in got)
    assert not any("ASCEND_RT_VISIBLE_DEVICES" in m for _, m in got)  # checked against the chips elsewhere
