"""provision explain: the first failing rank and chip, cause, fix and consequences from real log texts (fixtures in
tests/fixtures/explain, each line cited in its README), the error table's own examples, ordering across ranks in
time, plogs matched to ranks by PID, torchrun --log-dir files, bad and hostile input; and the explanation a failed
launch prints."""

from __future__ import annotations

import json
import os

import pytest

from provisioner.cli.app import run as cli
from provisioner.explain import analyze, readlogs, rules

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "explain")


@pytest.fixture(scope="module")
def shipped():
    from provisioner.matrix import loader

    return loader.load()


@pytest.fixture(scope="module")
def table(shipped) -> rules.Rules:
    return rules.Rules.from_matrix(shipped)


def _json(capsys, *argv) -> tuple[int, dict]:
    code = cli(["explain", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_rank5_device_error_then_ranks_0_3_7_time_out_names_rank5(capsys):
    code, doc = _json(capsys, os.path.join(FIX, "rank5-aicore-then-timeouts.log"))
    assert code == 0 and doc["schema"] == "provision.explain/1" and doc["status"] == "explained"
    assert doc["first_failing_rank"] == 5 and doc["device"] == 5 and doc["chip"] == 5
    assert doc["cause_id"] == "aicore-exception" and doc["code"] == "507015" and "ASCEND_LAUNCH_BLOCKING" in doc["fix"]
    assert [c["rank"] for c in doc["consequences"]] == [0, 3, 7]
    assert doc["also_failed"] == [] and doc["line"]["line"] == 10
    times = [e["time"] for e in doc["events"]]
    assert times == sorted(times)  # in time order although rank 7's lines come first in the file
    assert doc["events"][0]["rank"] == 5
    code = cli(["explain", os.path.join(FIX, "rank5-aicore-then-timeouts.log")])
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("first failure: rank 5 (device 5, chip 5")
    assert "consequences: rank(s) 0, 3, 7 then timed out waiting for rank 5" in out


def test_the_earliest_cause_wins_not_the_first_in_the_file(tmp_path, table):
    # rank 2's out-of-memory is printed first but happened 4 s after rank 6's aicore exception
    log = tmp_path / "mixed.log"
    log.write_text(
        "[rank2]:[ERROR] 2025-06-09-06:57:58 (PID:45464, Device:2, RankID:2) ERR00100 PTA call acl api failed\n"
        "[rank2]:RuntimeError: NPU out of memory. Tried to allocate 30.00 MiB (NPU 2; 60.96 GiB total capacity;"
        " 60.34 GiB already allocated; 60.34 GiB current active; 14.24 MiB free; 60.60 GiB reserved in total by PyTorch)\n"
        "[rank6]:[ERROR] 2025-06-09-06:57:54 (PID:45468, Device:6, RankID:6) ERR00100 PTA call acl api failed\n"
        "[rank6]:[Error]: The aicore execution is abnormal. \n")
    doc = analyze.explain(readlogs.read_paths([str(log)]), table)
    assert doc["first_failing_rank"] == 6 and doc["cause_id"] == "aicore-exception"
    assert doc["also_failed"][0]["rank"] == 2 and doc["also_failed"][0]["id"] == "npu-out-of-memory"


def test_a_plog_names_the_cause_and_its_pid_the_rank(capsys):
    code, doc = _json(capsys, os.path.join(FIX, "rank5-plogs"))
    assert code == 0 and doc["first_failing_rank"] == 5 and doc["cause_id"] == "hccp-rdma-init"
    assert doc["chip"] == 5 and doc["pid"] == 38015 and doc["line"]["source"].endswith("plog-38015_20250715124532997.log")
    assert {c["rank"] for c in doc["consequences"]} == {0, 1}
    assert {s["kind"] for s in doc["sources"]} == {"stream", "plog"}
    # the INFO line of the plog is not an event
    assert not any("start nic" in e["text"] for e in doc["events"])


def test_torchrun_log_dir_files_give_the_rank(capsys):
    code, doc = _json(capsys, os.path.join(FIX, "torchrun-logdir"))
    assert code == 0 and doc["first_failing_rank"] == 2 and doc["cause_id"] == "npu-out-of-memory"
    assert doc["device"] == 2 and [c["rank"] for c in doc["consequences"]] == [0, 1, 3]
    assert {s["rank"] for s in doc["sources"] if s["kind"] == "rank-file"} == {0, 1, 2, 3}


def test_only_time_outs_is_unexplained_and_names_the_rank_nobody_heard_from(tmp_path, capsys):
    text = ("Getting socket times out. Reason: Remote Rank did not send the data in time. Please check the reason"
            " for the rank being stuck")
    log = tmp_path / "out.log"
    log.write_text("".join(f"[rank{r}]:{{'loss': 3.5534, 'epoch': 0.01}}\n" for r in range(4))
                   + "".join(f"[rank{r}]:EI0006: [PID: 1292{r}] 2025-04-08-18:07:2{r}.444.436 {text}\n" for r in (0, 1, 2)))
    code, doc = _json(capsys, str(log))
    assert code == 1 and doc["status"] == "unexplained"
    assert doc["suspects"] == [3] and doc["first_failing_rank"] == 3 and doc["suspected"] is True
    assert doc["cause_id"] == "hccl-socket-timeout" and "HCCL_CONNECT_TIMEOUT" in doc["fix"]


def test_warnings_alone_are_no_failure(tmp_path, capsys):
    log = tmp_path / "out.log"
    log.write_text("[rank0]:[W VariableFallbackKernel.cpp:51] Warning: CAUTION: The operator"
                   " 'aten::isin.Tensor_Tensor_out' is not currently supported on the NPU backend and will fall back"
                   " to run on the CPU. This may have performance implications. (function npu_cpu_fallback)\n")
    code, doc = _json(capsys, str(log))
    assert code == 0 and doc["status"] == "clean" and doc["first_failing_rank"] is None
    assert doc["warnings"][0]["id"] == "cpu-fallback" and doc["warnings"][0]["ranks"] == [0]


def test_an_unknown_python_error_still_names_the_first_rank_that_raised(tmp_path, table):
    log = tmp_path / "out.log"
    log.write_text("[rank3]:ValueError: an unknown error of this job\n[rank1]:ValueError: an unknown error of this job\n")
    doc = analyze.explain(readlogs.read_paths([str(log)]), table)
    assert doc["status"] == "unexplained" and analyze.exit_code(doc) == 1
    assert doc["first_failing_rank"] == 3 and doc["cause_id"] == "python-exception"


def test_every_row_classifies_its_own_example_and_cites_a_source(shipped, table):
    rows = shipped.rows("errors")
    assert len(rows) >= 25
    for row in rows:
        assert row["source"], row["id"]
        if row["role"] == "cause":
            assert row.get("fix"), row["id"]
        if row.get("example"):
            hit = table.classify(readlogs.parse_line(row["example"], 0, 1).text)
            assert hit is not None and hit[0].id == row["id"], (row["id"], hit and hit[0].id)
    kinds = {r["id"] for r in rows}
    for needed in ("aicore-exception", "aivector-exception", "npu-out-of-memory", "hccl-notify-timeout", "op-not-on-npu",
                   "hccl-socket-timeout", "cpu-fallback", "hccp-port-down", "open-device-failed"):
        assert needed in kinds


def test_a_cann_code_without_a_row_is_a_symptom(table):
    rule, code = table.classify("[PID: 758] 2026-05-08-03:20:31.532.507 Invalid_Argument(EL0003): The argument is invalid.")
    assert rule.id == "cann-error-code" and code == "EL0003"


def test_times_of_each_kind(tmp_path):
    src = readlogs.from_lines([
        "[ERROR] HCCL(2717288,python3):2025-07-23-03:49:57.177.194 [hccl_socket_manager.cc:778] x",
        "[rank1]:[E626 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 1] y",
        "[ERROR] 2025-06-25-10:45:23 (PID:13075, Device:0, RankID:8) ERR00100 PTA call acl api failed",
        "(EngineCore_DP0 pid=1228) ERROR 03-30 03:00:55 [patch_core.py:68] EngineCore failed to start.",
    ], "t")
    a, b, c, d = (ln.stamp for ln in src.lines)
    assert d == (None, 3, 30, 3, 0, 55, 0) and src.lines[3].pid == 1228
    assert a == (2025, 7, 23, 3, 49, 57, 177194)
    assert b == (None, 6, 26, 6, 24, 44, 903881) and src.lines[1].rank == 1
    assert c == (2025, 6, 25, 10, 45, 23, 0) and src.lines[2].rank == 8 and src.lines[2].pid == 13075
    assert all(ln.time is not None for ln in src.lines)  # the glog line took the file's year


@pytest.mark.parametrize("argv, fragment", [
    ([], "name at least one LOG"),
    (["/nonexistent/x.log"], "no such file or directory"),
    (["/dev/null"], "not a regular file"),
])
def test_bad_input_is_one_line_and_exit_2(argv, fragment, capsys):
    assert cli(["explain", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0]


def test_a_directory_without_logs_is_refused(tmp_path, capsys):
    (tmp_path / "notes.md").write_text("x")
    assert cli(["explain", str(tmp_path)]) == 2 and "no log files" in capsys.readouterr().err


def test_hostile_lines_are_cleaned_and_bounded(tmp_path, capsys):
    log = tmp_path / "evil.log"
    log.write_bytes(b"[rank4]:\x1b[2J\x1b]0;pwned\x07RuntimeError: NPU out of memory. Tried to allocate 1 GiB (NPU 4; "
                    + b"A" * 100000 + b"\xff\xfe\n" + b"[rank9999999]:x\n")
    code, doc = _json(capsys, str(log))
    assert code == 0 and doc["first_failing_rank"] == 4
    text = doc["line"]["text"]
    assert "\x1b" not in text and "\x07" not in text and len(text) <= 300


def test_a_failed_launch_prints_the_explanation(shipped):
    from provisioner.launch import container
    from provisioner.launch import run as launch

    with open(os.path.join(FIX, "rank5-aicore-then-timeouts.log")) as fh:
        lines = fh.read().splitlines()
    result = container.RunResult("run", "c1", [], exit_code=1, log=lines)
    found = launch.explanation(result)
    assert found["first_failing_rank"] == 5 and found["cause_id"] == "aicore-exception"
    assert launch.explanation(container.RunResult("run", "c1", [], exit_code=0)) is None
    shown = launch.explanation_lines({"explanation": found})
    assert shown[0].startswith("explain: first failure: rank 5")


def test_a_time_out_that_names_its_peer_points_at_that_rank(tmp_path, table):
    log = tmp_path / "out.log"
    log.write_text("".join(f"[rank{r}]:{{'loss': 3.5534, 'epoch': 0.01}}\n" for r in range(4))
                   + "[rank1]:EI0009: [PID: 2225827] 2025-09-24-20:59:48.119.066 Transport init error. Reason:"
                   " [Create][DestLink]Create Dest error! createLink para:rank[1]-localUserrank[1]-localIpAddr"
                   "[172.16.0.114], dst_rank[0]-remoteUserrank[0]-remote_ip_addr[172.16.0.114]\n")
    doc = analyze.explain(readlogs.read_paths([str(log)]), table)
    assert doc["status"] == "unexplained" and doc["cause_id"] == "hccl-transport-init"
    assert doc["suspects"] == [0] and doc["first_failing_rank"] == 0 and doc["suspected"] is True
    assert [c["rank"] for c in doc["consequences"]] == [1]
