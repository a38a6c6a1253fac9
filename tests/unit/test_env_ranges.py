"""Launch-variable ranges per chip family (matrices/audit.yaml `by_family`), one reading for audit, doctor and the
device plan (run-cmd / launch / k8s).

HCCL_EXEC_TIMEOUT (CANN 8.5 HCCL guide, hcclug_000074; CANN 9.0 envref_07_0078): Atlas A2/A3 take [0, 2147483647]
with 0 = never; the Atlas training series (first-generation 910) and the 300I Duo take (0, 17340] only.
"""

from __future__ import annotations

import json

import pytest

from provisioner.cli import main
from provisioner.devices import enginefacts
from provisioner.devices import plan as devices
from provisioner.errors import ProvisionError
from provisioner.host import doctor, launchvars
from provisioner.matrix import loader
from tests.helpers import hosts


@pytest.fixture(scope="module")
def m():
    return loader.load()


def problems(m, value: str, family: str | None) -> list[str]:
    return [i.message for i in launchvars.check(m, {"HCCL_EXEC_TIMEOUT": value}, family)]


@pytest.mark.parametrize("family", ["910b", "a3"])
def test_a2_and_a3_take_long_waits_and_zero(m, family):
    for value in ("0", "36000", "2147483647"):
        assert problems(m, value, family) == [], value
    assert problems(m, "2147483648", family) == ["HCCL_EXEC_TIMEOUT=2147483648: outside [0, 2147483647]"]


def test_first_generation_910_takes_0_to_17340_without_0(m):
    assert problems(m, "17340", "910") == [] and problems(m, "3600", "910") == []
    for value in ("0", "17341", "36000"):
        assert problems(m, value, "910") == [f"HCCL_EXEC_TIMEOUT={value}: outside [1, 17340] on Ascend 910 (first"
                                             " generation)"]


def test_one_range_per_family_in_the_data(m):
    row = launchvars.rules(m)["HCCL_EXEC_TIMEOUT"]
    assert (row["min"], row["max"], row["default"]) == (0, 2147483647, "1836")
    by = {f: (e["min"], e["max"]) for e in row["by_family"] for f in e["families"]}
    assert by["910"] == (1, 17340) and "910b" not in by and "a3" not in by
    assert not any(r.get("range") for r in m.rows("launch_env"))  # the plan reads audit_env, not a copy


def _audit(*args) -> tuple[int, dict]:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["audit", "--json", *args])
    return code, json.loads(out.getvalue())


def test_the_must_show_audit(tmp_path):
    host = hosts.materialize("seed-800ta2", tmp_path)
    base = ["-e", "HCCL_EXEC_TIMEOUT=36000", "--root", str(host.root), "--dev-root", str(host.dev_root)]
    _, doc = _audit(*base, "--card", "800T-A2")
    env = [f for f in doc["findings"] if f["check"] == "launch-env"]
    assert [f["id"] for f in env] == ["launch-env-ok"]
    _, doc = _audit(*base, "--card", "800-9000")
    bad = [f for f in doc["findings"] if f["id"] == "launch-env-invalid"]
    assert len(bad) == 1 and "outside [1, 17340] on Ascend 910 (first generation)" in bad[0]["message"]


def test_the_host_family_decides_without_card(tmp_path):
    from provisioner.host import fakehost

    # the Atlas 800 (9010) sample has its chip names redacted ("xxx"); first-generation 910 chips print "910B"
    # there (SHIRWY-910A), which the matrix reads as the first generation
    host = hosts.materialize("broken-unhealthy-910", tmp_path)
    (saved,) = fakehost.saved_npu_smi(host.root)
    smi = tmp_path / "npu-smi-info.txt"
    smi.write_text(saved.read_text().replace(" xxx ", " 910B"))
    args = ["--root", str(host.root), "--dev-root", str(host.dev_root), "--npu-smi-output", str(smi)]
    _, doc = _audit("-e", "HCCL_EXEC_TIMEOUT=0", *args)
    assert any(f["id"] == "launch-env-invalid" and "on Ascend 910 (first" in f["message"] for f in doc["findings"])
    _, doc = _audit("-e", "HCCL_EXEC_TIMEOUT=3600", *args)
    assert any(f["id"] == "launch-env-ok" for f in doc["findings"])


def test_doctor_reads_the_family_of_the_image(m):
    env = {"HCCL_EXEC_TIMEOUT": "0"}
    for family, bad in (("910", True), ("910b", False)):
        ctx = doctor.DoctorContext(facts={"stack": {"stack": {"chip": {"family": family}}}}, matrix=m, env=env)
        got = [f.message for f in doctor.check_env(ctx) if f.id == "env-invalid"]
        assert bool(got) is bad, (family, got)


def _plan(m, tmp_path, host: str, card: str, value: str):
    where = tmp_path / f"{host}-{value}"
    where.mkdir()
    h = hosts.materialize(host, where)
    opts = devices.Options(card=card, devices="0-1", root=str(h.root), dev_root=str(h.dev_root),
                           engine=enginefacts.EngineFacts(reachable=True), hccl_exec_timeout=value)
    return devices.plan(m, opts)


def test_run_cmd_launch_and_k8s_share_the_plans_check(m, tmp_path):
    plan = _plan(m, tmp_path, "plan-800ta2-8", "800T-A2", "36000")
    assert {e.name: e.value for e in plan.env}["HCCL_EXEC_TIMEOUT"] == "36000"
    with pytest.raises(ProvisionError, match=r"HCCL_EXEC_TIMEOUT='0': outside \[1, 17340\] on Ascend 910"):
        _plan(m, tmp_path, "broken-unhealthy-910", "800-9000", "0")
    plan = _plan(m, tmp_path, "broken-unhealthy-910", "800-9000", "3600")
    assert {e.name: e.value for e in plan.env}["HCCL_EXEC_TIMEOUT"] == "3600"


def test_the_other_rows_corrected_against_the_reference(m):
    # HCCL_RDMA_TIMEOUT: [5, 20] on A2/A3, [5, 24] on the first-generation 910, 300I Duo and 950 (CANN 9.0
    # envref_07_0091); it was [5, 24] for every family
    rdma = {"HCCL_RDMA_TIMEOUT": "22"}
    assert [i.message for i in launchvars.check(m, rdma, "910b")] == ["HCCL_RDMA_TIMEOUT=22: outside [5, 20]"]
    assert launchvars.check(m, rdma, "a3") != [] and launchvars.check(m, rdma, "910") == []
    # HCCL_OP_EXPANSION_MODE: HOST_TS (CANN 8.2.RC1 on) and AICPU_CacheDisable (A3, CANN 9.0) were refused
    for mode in ("HOST_TS", "AICPU_CacheDisable", "AIV"):
        assert launchvars.check(m, {"HCCL_OP_EXPANSION_MODE": mode}, "a3") == [], mode
    assert launchvars.rules(m)["HCCL_CONNECT_TIMEOUT"]["default"] == "120"
    # HCCL_IF_BASE_PORT: [1024, 65520] (CANN 8.0 / 9.0 envref_07_0074), was [1024, 65535]
    assert [i.message for i in launchvars.check(m, {"HCCL_IF_BASE_PORT": "65530"})] == \
        ["HCCL_IF_BASE_PORT=65530: outside [1024, 65520]"]


def test_the_second_audit_rows_corrected_against_the_reference(m):
    """issue 26.2, the rows not checked before (matrices/snapshots/env-reference.json records each page read)."""
    def msgs(env, family=None):
        return [i.message for i in launchvars.check(m, env, family)]

    # HCCL_MULTI_QP_THRESHOLD: [1, 8192] KB, default 512 (CANN 9.0 hcclenvref_07_0016); was [0, unbounded)
    assert msgs({"HCCL_MULTI_QP_THRESHOLD": "0"}) == ["HCCL_MULTI_QP_THRESHOLD=0: outside [1, 8192]"]
    assert msgs({"HCCL_MULTI_QP_THRESHOLD": "9000"}) != [] and msgs({"HCCL_MULTI_QP_THRESHOLD": "512"}) == []
    # HCCL_RDMA_QPS_PER_CONNECTION: [1, 32], default 1 (CANN 8.5 envref_07_0094); was unbounded above
    assert msgs({"HCCL_RDMA_QPS_PER_CONNECTION": "33"}) == ["HCCL_RDMA_QPS_PER_CONNECTION=33: outside [1, 32]"]
    # HCCL_DETERMINISTIC: strict (CANN 8.2.RC1 on, 9.0 envref_07_0099) was refused; default false
    assert msgs({"HCCL_DETERMINISTIC": "strict"}) == [] and launchvars.rules(m)["HCCL_DETERMINISTIC"]["default"] == "false"
    # HCCL_RDMA_PCIE_DIRECT_POST_NOSTRICT: TRUE or FALSE (CANN 8.5 envref_07_0150); any text passed before
    assert msgs({"HCCL_RDMA_PCIE_DIRECT_POST_NOSTRICT": "TRUE"}) == []
    assert msgs({"HCCL_RDMA_PCIE_DIRECT_POST_NOSTRICT": "yes"}) == [
        "HCCL_RDMA_PCIE_DIRECT_POST_NOSTRICT=yes: expected one of TRUE, FALSE"]
    defaults = {n: r.get("default") for n, r in launchvars.rules(m).items()}
    assert {k: defaults[k] for k in ("HCCL_RDMA_TC", "HCCL_RDMA_SL", "HCCL_INTRA_PCIE_ENABLE", "HCCL_INTER_HCCS_DISABLE",
                                     "HCCL_SOCKET_FAMILY", "HCCL_DIAGNOSE_ENABLE", "HCCL_ENTRY_LOG_ENABLE",
                                     "TASK_QUEUE_ENABLE")} == {
        "HCCL_RDMA_TC": "132", "HCCL_RDMA_SL": "4", "HCCL_INTRA_PCIE_ENABLE": "1", "HCCL_INTER_HCCS_DISABLE": "FALSE",
        "HCCL_SOCKET_FAMILY": "AF_INET", "HCCL_DIAGNOSE_ENABLE": "0", "HCCL_ENTRY_LOG_ENABLE": "0",
        "TASK_QUEUE_ENABLE": "1"}
    # HCCL_EVENT_TIMEOUT: [0, 2147483647], default 1868 (Ascend Extension for PyTorch 7.1.0 Envir_020); was unbounded
    assert msgs({"HCCL_EVENT_TIMEOUT": "2147483648"}) == ["HCCL_EVENT_TIMEOUT=2147483648: outside [0, 2147483647]"]
    assert (defaults["HCCL_EVENT_TIMEOUT"], defaults["P2P_HCCL_BUFFSIZE"]) == ("1868", "20")
    # torch_npu defaults the Ascend Extension for PyTorch reference states (7.2.0 Envir_006, 7.1.0 Envir_023)
    rules = launchvars.rules(m)
    assert (rules["ASCEND_LAUNCH_BLOCKING"]["default"], rules["TORCH_HCCL_ZERO_COPY"]["default"]) == ("0", "0")


def test_torch_npu_and_collective_rows_checked_against_their_pages(m):
    """issue 26.2, the variables left unchecked before: torch_npu's own (Ascend/pytorch at tag v26.1.0-pytorch2.7.1
    and master @9e73e708, OptionsManager.cpp), HCCL_ALGO (CANN 8.5 envref_07_0079), ASCEND_RT_VISIBLE_DEVICES (CANN
    9.1.0.beta2 envref_07_0028), GLOO_SOCKET_IFNAME (PyTorch distributed docs); each page in env-reference.json."""
    from provisioner.matrix import snapshot

    rules = launchvars.rules(m)
    # the defaults the pages state (none was recorded before)
    assert {n: rules[n].get("default") for n in ("TORCH_HCCL_ASYNC_ERROR_HANDLING", "TORCH_HCCL_BLOCKING_WAIT",
                                                 "TORCH_HCCL_DESYNC_DEBUG", "HCCL_DESYNC_DEBUG", "COMBINED_ENABLE")} == {
        "TORCH_HCCL_ASYNC_ERROR_HANDLING": "1", "TORCH_HCCL_BLOCKING_WAIT": "0", "TORCH_HCCL_DESYNC_DEBUG": "0",
        "HCCL_DESYNC_DEBUG": "0", "COMBINED_ENABLE": "0"}
    # the TORCH_HCCL_* names are read by torch_npu master only; the released v26.1.0 tags read the HCCL_* names
    assert "master after v26.1.0" in rules["TORCH_HCCL_ASYNC_ERROR_HANDLING"]["notes"]
    assert "v26.1.0 tags read HCCL_DESYNC_DEBUG" in rules["TORCH_HCCL_DESYNC_DEBUG"]["notes"]
    # torch_npu accepts 0-3 (CleanUpOnly, SkipCleanUp included) under the new name
    assert launchvars.check(m, {"TORCH_HCCL_ASYNC_ERROR_HANDLING": "3"}) == []
    # Gloo takes several interfaces, comma-separated
    assert launchvars.check(m, {"GLOO_SOCKET_IFNAME": "eth0,eth1"}) == []
    env = json.load(open(snapshot.snapshot_path("env-reference.json"), encoding="utf-8"))["variables"]
    unchecked = {n for n, rec in env.items() if not rec.get("page")}
    assert unchecked == {"CUDA_DEVICE_MAX_CONNECTIONS", "HCCL_ALLTOALL_Z_COPY", "HCCL_HOST_RDMA_ENABLE",
                         "HCCL_P2P_DISABLE"}
    assert "only compares it with \"1\"" in env["CUDA_DEVICE_MAX_CONNECTIONS"]["unchecked"]
