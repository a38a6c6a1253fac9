"""`provision preflight` on the fixture hosts (tests/fixtures/preflight): each broken host is one failing line
with its fix, the clean host passes, the JSON lists every check; the checks' edges on edited facts; the live
path through stand-in tools; bad input."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from provisioner.cli import main
from provisioner.matrix import loader
from provisioner.preflight import bandwidth, report

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "preflight"
CHECKS = ["chip-health", "chip-ecc", "chip-temperature", "chip-power", "chip-hbm-in-use", "chip-processes",
          "npu-net-config", "npu-subnet", "npu-link", "npu-net-health", "npu-tls", "npu-ping", "clock-skew",
          "hccl-bandwidth", "chip-matmul", "chip-stress"]
# host -> the one failing check and words its message names
BROKEN = {
    "preflight-busy-chip": ("chip-processes", "NPU 3: pid 1203463 python3.10"),
    "preflight-ecc-error": ("chip-ecc", "NPU 5: hbm double 2"),
    "preflight-link-down": ("npu-link", "NPU 6: DOWN"),
    "preflight-wrong-subnet": ("npu-subnet", "NPU 2: 29.2.140.17/16 is not in the subnet of its gateway 29.1.0.1"),
}


def args(name):
    return ["preflight", "--root", str(FIXTURES / name / "tree"), "--saved", str(FIXTURES / name / "npu_info_before.txt")]


def run_json(name, *extra, capsys):
    rc = main([*args(name), *extra, "--json"])
    out = capsys.readouterr()
    assert out.err == ""
    doc = json.loads(out.out)
    assert doc["exit_code"] == rc and doc["schema"] == "provision.preflight/1"
    return rc, doc


@pytest.fixture(scope="module")
def matrix():
    return loader.load([])


def test_clean_host_passes_and_lists_every_check(capsys):
    rc, doc = run_json("preflight-clean", capsys=capsys)
    assert rc == 0
    assert [c["id"] for c in doc["checks"]] == CHECKS
    status = {c["id"]: c["status"] for c in doc["checks"]}
    assert not [k for k, v in status.items() if v in ("fail", "warn")]
    # what could not be measured here is n/a, never pass
    assert {k for k, v in status.items() if v == "n/a"} == {"chip-temperature", "npu-ping", "hccl-bandwidth",
                                                            "chip-matmul", "chip-stress"}
    assert len(doc["chips"]) == 8 and doc["tools_run"] is False
    assert doc["summary"] == {"fail": 0, "warn": 0, "n/a": 5, "pass": 11}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_each_broken_host_is_one_failing_line_with_its_fix(name, capsys):
    check, words = BROKEN[name]
    rc, doc = run_json(name, capsys=capsys)
    failing = [c for c in doc["checks"] if c["status"] == "fail"]
    assert rc == 2 and [c["id"] for c in failing] == [check]
    assert words in failing[0]["message"] and failing[0]["fix"]
    assert not [c for c in doc["checks"] if c["status"] == "warn"]
    # the text report: one line per check, the failing one with its fix
    assert main(args(name)) == 2
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(CHECKS) + 2
    line = next(x for x in lines if x.startswith("FAIL"))
    assert check in line and words in line and "-> fix:" in line


def _edited(tmp_path, name, old, new, conf=None):
    src = FIXTURES / name
    dest = tmp_path / name
    shutil.copytree(src, dest)
    saved = dest / "npu_info_before.txt"
    text = saved.read_text()
    assert old in text
    saved.write_text(text.replace(old, new))
    if conf:
        (dest / "tree/etc/hccn.conf").write_text(conf((dest / "tree/etc/hccn.conf").read_text()))
    return dest


def _run(matrix, host, **kw):
    return report.run(matrix, str(host / "tree"), saved=[str(host / "npu_info_before.txt")], **kw)


def _status(doc, check):
    return next((c["status"], c["message"]) for c in doc["checks"] if c["id"] == check)


def test_tls_switch_that_differs_fails(matrix, tmp_path):
    host = _edited(tmp_path, "preflight-clean", "dev_id:4, tls switch[0]", "dev_id:4, tls switch[1]")
    status, message = _status(_run(matrix, host), "npu-tls")
    assert status == "fail" and message.startswith("TLS switch differs: enabled on NPU 4; disabled on NPU 0")


def test_unhealthy_chip_and_single_bit_errors(matrix, tmp_path):
    host = _edited(tmp_path, "preflight-clean", "HBM Single Bit Error Count               : 0\n"
                   "HBM Double Bit Error Count               : 0\nHBM Single Bit Aggregate Total Err Cnt   : 0\n"
                   "HBM Double Bit Aggregate Total Err Cnt   : 0\nHBM Single Bit Isolated Pages Count      : 0\n"
                   "HBM Double Bit Isolated Pages Count      : 0\nChip ID                                  : 0\n\n"
                   "/usr/local/bin/npu-smi info -i 0 -t usages",
                   "HBM Single Bit Error Count               : 7\n"
                   "HBM Double Bit Error Count               : 0\nHBM Single Bit Aggregate Total Err Cnt   : 7\n"
                   "HBM Double Bit Aggregate Total Err Cnt   : 0\nHBM Single Bit Isolated Pages Count      : 0\n"
                   "HBM Double Bit Isolated Pages Count      : 0\nChip ID                                  : 0\n\n"
                   "/usr/local/bin/npu-smi info -i 0 -t usages")
    saved = host / "npu_info_before.txt"
    text = saved.read_text()
    marker = "/usr/local/bin/npu-smi info -i 2 -c 0 -t health\nHealth Status                  : OK\nError Code                     : NA"
    assert marker in text
    saved.write_text(text.replace(marker, marker.replace(": OK", ": Alarm").replace(": NA", ": 0x80E01801")))
    doc = _run(matrix, host)
    assert _status(doc, "chip-ecc") == ("warn", "corrected (single-bit) memory errors: NPU 0: hbm single 7,"
                                                " hbm single total 7")
    status, message = _status(doc, "chip-health")
    assert status == "fail" and message == "unhealthy: NPU 2: Alarm (error code 0x80E01801)"
    assert doc["exit_code"] == 2


def test_hbm_in_use_and_unread_chips(matrix, tmp_path):
    host = _edited(tmp_path, "preflight-clean", "NPU ID                         : 1\n        Chip Count                     : 1\n\n"
                   "        DDR Capacity(MB)               : 0\n        DDR Usage Rate(%)              : 0\n"
                   "        DDR Hugepages Total(page)      : 0\n        DDR Hugepages Usage Rate(%)    : 0\n"
                   "        HBM Capacity(MB)               : 65536\n        HBM Usage Rate(%)              : 4",
                   "NPU ID                         : 1\n        Chip Count                     : 1\n\n"
                   "        DDR Capacity(MB)               : 0\n        DDR Usage Rate(%)              : 0\n"
                   "        DDR Hugepages Total(page)      : 0\n        DDR Hugepages Usage Rate(%)    : 0\n"
                   "        HBM Capacity(MB)               : 65536\n        HBM Usage Rate(%)              : 57")
    status, message = _status(_run(matrix, host), "chip-hbm-in-use")
    assert status == "warn" and "NPU 1: 57%" in message
    # ECC output missing for one chip: that chip is named, not passed
    host2 = _edited(tmp_path / "b", "preflight-clean", "/usr/local/bin/npu-smi info -i 7 -t ecc", "echo skipped")
    status, message = _status(_run(matrix, host2), "chip-ecc")
    assert status == "warn" and message.startswith("ECC counters not read for NPU 7")


def test_duplicate_address_and_off_subnet_chip(matrix, tmp_path):
    host = _edited(tmp_path, "preflight-clean", "ipaddr:29.1.151.33", "ipaddr:29.1.151.9",
                   conf=lambda t: t.replace("address_3=29.1.151.33", "address_3=29.1.151.9"))
    status, message = _status(_run(matrix, host), "npu-net-config")
    assert status == "fail" and "NPU 2, NPU 3 share address 29.1.151.9" in message
    # conf and NIC disagree
    host2 = _edited(tmp_path / "b", "preflight-clean", "ipaddr:29.1.151.33", "ipaddr:29.1.151.34")
    status, message = _status(_run(matrix, host2), "npu-net-config")
    assert status == "fail" and "NPU 3: /etc/hccn.conf says 29.1.151.33/255.255.0.0, the NIC has 29.1.151.34" in message


def test_clock_skew_against_hccl_connect_timeout(matrix, tmp_path, capsys):
    host = _edited(tmp_path, "preflight-clean", "0.000669840 seconds slow", "75.2 seconds fast")
    status, message = _status(_run(matrix, host), "clock-skew")
    assert status == "fail" and "150.4 s apart" in message and "HCCL_CONNECT_TIMEOUT 120 s" in message
    status, _ = _status(_run(matrix, host, env={"HCCL_CONNECT_TIMEOUT": "3600"}), "clock-skew")
    assert status == "pass"
    # chrony that never reached a server reports a zero offset (the powersj.io sample): not a pass
    host2 = _edited(tmp_path / "b", "preflight-clean", "0.000669840 seconds slow of NTP time",
                    "0.000000000 seconds fast of NTP time")
    saved = host2 / "npu_info_before.txt"
    saved.write_text(saved.read_text().replace("Leap status     : Normal", "Leap status     : Not synchronised"))
    status, message = _status(_run(matrix, host2), "clock-skew")
    assert status == "warn" and "Leap status Not synchronised" in message


def test_another_hosts_tree_without_saved_output_measures_nothing(matrix, tmp_path, capsys):
    rc = main(["preflight", "--root", str(FIXTURES / "preflight-clean" / "tree"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["summary"]["pass"] == 0
    assert all(c["status"] == "n/a" for c in doc["checks"])
    assert "nothing on it is run" in doc["checks"][0]["message"]


SEED_310 = FIXTURES.parent / "hosts" / "seed-310-300i" / "tree"


def test_power_judged_against_the_a2_tdp(matrix, tmp_path):
    """910b: power_max_w 350 (FlagPerf's Atlas 800T A2 TDP); no sourced 910b temperature limit, so n/a."""
    doc = _run(matrix, FIXTURES / "preflight-clean")
    assert _status(doc, "chip-power") == ("pass", "power 97.9-105.4 W, under the limit")
    status, message = _status(doc, "chip-temperature")
    assert status == "n/a" and "no sourced limit for 910b" in message
    host = _edited(tmp_path, "preflight-clean", "| 3     910B2               | OK            | 105.4",
                   "| 3     910B2               | OK            | 352.5")
    got = next(c for c in _run(matrix, host)["checks"] if c["id"] == "chip-power")
    assert got["status"] == "fail" and got["chips"] == ["NPU 3"]
    assert got["message"] == "power at or over the chip's limit: NPU 3: 352.5 W (limit 350)" and got["fix"]


def test_temperature_judged_against_the_310_junction_limit(matrix, tmp_path):
    """310: temp_max_c 100 (Atlas 200 AI module: the reported junction temperature must stay at or under 100 C);
    the seed Atlas 300I sample reads 65-74 C."""
    table, mapping = (SEED_310 / "usr/local/share/npu-smi-fixture" / n for n in ("info.txt", "info-m.txt"))
    doc = report.run(matrix, str(SEED_310), npu_smi_outputs=[str(table), str(mapping)])
    assert _status(doc, "chip-temperature") == ("pass", "temperature 65-74 C, under the limit")
    assert "no sourced limit for 310" in _status(doc, "chip-power")[1]
    hot = tmp_path / "info.txt"
    hot.write_text(table.read_text().replace("12.8              74 ", "12.8              101", 1))
    got = next(c for c in report.run(matrix, str(SEED_310), npu_smi_outputs=[str(hot), str(mapping)])["checks"]
               if c["id"] == "chip-temperature")
    assert got["status"] == "fail" and got["chips"] == ["NPU 6 chip 1"]
    assert "NPU 6 chip 1: 101 C (limit 100)" in got["message"]


def _collective(busbw):
    return {"schema": bandwidth.SCHEMA, "op": "all_reduce", "world_size": 8,
            "results": [{"bytes": 1 << 20, "busbw_gbps": busbw / 4, "algbw_gbps": busbw / 7},
                        {"bytes": 256 << 20, "busbw_gbps": busbw, "algbw_gbps": busbw / 1.75}],
            "links": [{"a": r, "b": (r + 1) % 8, "busbw_gbps": busbw / 3 if 5 in (r, (r + 1) % 8) else busbw}
                      for r in range(8)]}


def test_bandwidth_judged_only_against_a_sourced_floor(matrix, tmp_path):
    host = FIXTURES / "preflight-clean"
    status, message = _status(_run(matrix, host, bandwidth_doc=_collective(150.0)), "hccl-bandwidth")
    assert status == "n/a" and "no sourced floor for hccs-8-a2" in message and "busbw 150.00 GB/s" in message
    overlay = tmp_path / "floor.yaml"
    overlay.write_text("preflight_bandwidth:\n  - id: test-floor\n    topology: hccs-8-a2\n    op: all_reduce\n"
                       "    min_bytes: 16777216\n    busbw_min_mbps: 100000\n    source: test overlay\n")
    floored = loader.load([str(overlay)])
    assert _status(_run(floored, host, bandwidth_doc=_collective(150.0)), "hccl-bandwidth")[0] == "pass"
    status, message = _status(_run(floored, host, bandwidth_doc=_collective(60.0)), "hccl-bandwidth")
    assert status == "fail" and "all_reduce 256 MiB: 60.00 GB/s < 100 GB/s (test-floor)" in message
    slow = _collective(150.0)
    slow["results"][1]["busbw_gbps"] = 40.0
    status, message = _status(_run(floored, host, bandwidth_doc=slow), "hccl-bandwidth")
    assert status == "fail" and message.endswith("slow: link 4-5 (50.00 GB/s), link 5-6 (50.00 GB/s); in every slow"
                                                 " link: rank 5")


def _between_nodes(algbw_64m):
    """A 2-node sweep of 16 ranks as provision.launch.collective prints it (busbw = algbw x 2(16-1)/16)."""
    rows = [{"bytes": size << 20, "algbw_gbps": bw, "busbw_gbps": round(bw * 30 / 16, 4)}
            for size, bw in ((16, 16.2), (64, algbw_64m), (256, algbw_64m * 1.04))]
    return {"schema": bandwidth.SCHEMA, "op": "all_reduce", "world_size": 16, "results": rows}


def test_between_nodes_judged_against_the_published_roce_floor(matrix):
    """roce-a2-all-reduce: half of the busbw of a published 2 x 8 910B3 hccl_test run (23.80 GB/s algbw at 64M:
    busbw 44.6 GB/s, floor 22.3 GB/s) from 64 MiB up; one node's sweep is not judged against it."""
    host = FIXTURES / "preflight-clean"
    status, message = _status(_run(matrix, host, bandwidth_doc=_between_nodes(23.8), nodes=2), "hccl-bandwidth")
    assert status == "pass" and message.startswith("roce: all_reduce") and "64 MiB: busbw 44.62 GB/s" in message
    status, message = _status(_run(matrix, host, bandwidth_doc=_between_nodes(9.0), nodes=2), "hccl-bandwidth")
    assert status == "fail" and "all_reduce 64 MiB: 16.88 GB/s < 22.3 GB/s (roce-a2-all-reduce)" in message
    # 16 MiB is below the row's min_bytes: a small message is latency, never judged against the floor
    assert "16 MiB" not in message.split("below the floor:")[1]
    status, message = _status(_run(matrix, host, bandwidth_doc=_between_nodes(9.0)), "hccl-bandwidth")
    assert status == "n/a" and "no sourced floor for hccs-8-a2" in message


STANDIN = """#!{python}
import sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from provisioner.preflight import parse
tool = Path(sys.argv[0]).name
text = Path({saved!r}).read_text()
want = parse._command(tool, " ".join(sys.argv[1:]))
# with -c C, the saved output of the whole NPU (-i N alone) holds that chip's block
for cmd, out in parse.split_collected(text):
    if want is not None and (cmd == want or cmd == dict(want, chip=None)):
        print(out)
        sys.exit(0)
sys.stderr.write("no saved output\\n")
sys.exit(2)
"""


def test_live_path_runs_the_tools_per_chip(matrix, tmp_path):
    """run_tree_programs: the tree's stand-in npu-smi and hccn_tool print the saved outputs; preflight runs them
    per chip as on a live host (npu-smi info -t KIND -i N -c 0, hccn_tool -i N -KIND -g)."""
    host = FIXTURES / "preflight-link-down"
    root = tmp_path / "root"
    shutil.copytree(host / "tree", root)
    repo = str(Path(__file__).resolve().parents[2])
    for rel in ("usr/local/bin/npu-smi", "usr/local/Ascend/driver/tools/hccn_tool"):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(STANDIN.format(python=sys.executable, repo=repo, saved=str(host / "npu_info_before.txt")))
        p.chmod(0o755)
    doc = report.run(matrix, str(root), run_tree_programs=True, timeout=30)
    assert doc["tools_run"] is True and len(doc["chips"]) == 8
    failing = [c["id"] for c in doc["checks"] if c["status"] == "fail"]
    assert failing == ["npu-link"]
    assert _status(doc, "chip-ecc")[0] == "pass" and _status(doc, "npu-tls")[0] == "pass"


@pytest.mark.parametrize("extra, words", [
    (["--peer", "not-an-ip"], "not an IPv4 address"),
    (["--saved", "/nonexistent/x.txt"], "--saved /nonexistent/x.txt: no such file"),
    (["-e", "NOEQUALS"], "write KEY=VALUE"),
    (["--timeout", "nan"], "--timeout"),
])
def test_bad_input_is_one_line_and_exit_2(extra, words, capsys):
    rc = main([*args("preflight-clean"), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and len(err.strip().splitlines()) == 1


def test_bandwidth_file_must_hold_a_collective_document(tmp_path, capsys):
    bad = tmp_path / "bw.txt"
    bad.write_text("size time\n{\"schema\": \"other/1\"}\n")
    rc = main([*args("preflight-clean"), "--bandwidth", str(bad)])
    assert rc == 2 and "no provision.collective/1 JSON line" in capsys.readouterr().err
    good = tmp_path / "bw.json"
    good.write_text("table\n" + json.dumps(_collective(150.0)) + "\n")
    rc, doc = run_json("preflight-clean", "--bandwidth", str(good), capsys=capsys)
    assert rc == 0 and _status(doc, "hccl-bandwidth")[0] == "n/a"


def test_a_path_with_a_newline_cannot_start_a_printed_line(tmp_path, capsys):
    root = tmp_path / "x\nCANARY injected"
    shutil.copytree(FIXTURES / "preflight-clean" / "tree", root)
    saved = tmp_path / "saved\nCANARY.txt"
    saved.write_text("\n")
    rc = main(["preflight", "--root", str(root), "--saved", str(saved)])
    out = capsys.readouterr().out
    assert rc == 1 and not [line for line in out.splitlines() if line.startswith("CANARY")]


def _selftest(status, ranks_failed=()):
    return {"schema": "provision.selftest/1", "status": "ok" if status == "ok" else "failed", "world_size": 8,
            "checks": [{"id": "npu", "status": "ok", "detail": "8 chips"},
                       {"id": "matmul", "status": status, "detail": "fp16 and bf16 within tolerance",
                        "error": None if status == "ok" else "bf16 matmul differs from the fp32 reference by 3.1",
                        "fix": None if status == "ok" else "take the chip out of jobs", "seconds": 1.2,
                        "ranks_failed": list(ranks_failed), "figures": None}]}


def test_matmul_from_a_selftest_document(tmp_path, capsys):
    path = tmp_path / "selftest.txt"
    path.write_text("selftest: npu ok\n[rank0]:" + json.dumps(_selftest("fail", [3])) + "\n")
    rc, doc = run_json("preflight-clean", "--selftest", str(path), capsys=capsys)
    got = next(c for c in doc["checks"] if c["id"] == "chip-matmul")
    assert rc == 2 and got["status"] == "fail" and got["chips"] == ["rank 3"]
    assert "bf16 matmul differs" in got["message"] and got["fix"] == "take the chip out of jobs"
    path.write_text(json.dumps(_selftest("ok")) + "\n")
    rc, doc = run_json("preflight-clean", "--selftest", str(path), capsys=capsys)
    assert rc == 0 and _status(doc, "chip-matmul")[0] == "pass"
    status, message = _status(doc, "chip-stress")
    assert status == "n/a" and message == "the self-test has no hbm result (one from before the HBM stress)"
    path.write_text("no document\n")
    assert main([*args("preflight-clean"), "--selftest", str(path)]) == 2
    assert "no provision.selftest/1 JSON line" in capsys.readouterr().err


def _with_hbm(doc, bad_rank=None):
    """The self-test's hbm check as provisioner.train.selftest reports it: per chip, every worker at once."""
    chips = [{"rank": r, "device": f"npu:{r}", "bytes": 51 << 30, "chunk_bytes": 1 << 30, "chunks": 51,
              "passes": 2, "mismatches": 2 if r == bad_rank else 0, "read_gbps": 1210.5 + r, "write_gbps": 1300.0,
              "first_bad": {"chunk": 7, "word": 11, "pass": 0} if r == bad_rank else None} for r in range(8)]
    failed = bad_rank is not None
    doc["checks"].insert(2, {"id": "hbm", "status": "fail" if failed else "ok", "detail": "" if failed else
                             "npu:0: 51.00 GiB in 51 chunk(s), 2 passes read back intact",
                             "error": "npu:6: 2 word(s) read back differ" if failed else None,
                             "fix": "take it out of jobs" if failed else None, "seconds": 9.0,
                             "ranks_failed": [bad_rank] if failed else [], "figures": {"chips": chips}})
    return doc


def test_hbm_stress_from_a_selftest_document(tmp_path, capsys):
    """chip-stress judges the self-test's hbm check: a word read back wrong fails naming the rank and its chip;
    intact chips pass with their GB/s stated and not judged (no sourced floor); no document: n/a."""
    path = tmp_path / "selftest.txt"
    path.write_text(json.dumps(_with_hbm(_selftest("ok"), bad_rank=6)) + "\n")
    rc, doc = run_json("preflight-clean", "--selftest", str(path), capsys=capsys)
    got = next(c for c in doc["checks"] if c["id"] == "chip-stress")
    assert rc == 2 and got["status"] == "fail" and got["chips"] == ["rank 6"]
    assert got["message"] == "HBM read back wrong: rank 6 (npu:6): 2 word(s) wrong of 51.00 GiB"
    assert got["fix"] == "take it out of jobs" and _status(doc, "chip-matmul")[0] == "pass"
    path.write_text(json.dumps(_with_hbm(_selftest("ok"))) + "\n")
    rc, doc = run_json("preflight-clean", "--selftest", str(path), capsys=capsys)
    assert rc == 0 and _status(doc, "chip-stress") == (
        "pass", "HBM pattern read back intact on 8 chip(s) (51.00 GiB each); read 1210.5-1217.5 GB/s (not judged:"
        " no sourced HBM bandwidth floor)")
    rc, doc = run_json("preflight-clean", capsys=capsys)
    status, message = _status(doc, "chip-stress")
    assert status == "n/a" and message.startswith("no HBM stress ran on the chips")


@pytest.mark.slow
def test_tool_calls_run_in_parallel(matrix, tmp_path):
    """72 tool calls on an 8-chip host (5 npu-smi and 4 hccn_tool per chip): with each call taking 0.3 s they
    would take over 20 s one after another; run in parallel they stay far inside the 2-minute budget."""
    host = FIXTURES / "preflight-clean"
    root = tmp_path / "root"
    shutil.copytree(host / "tree", root)
    repo = str(Path(__file__).resolve().parents[2])
    body = STANDIN.format(python=sys.executable, repo=repo, saved=str(host / "npu_info_before.txt"))
    body = body.replace("want = ", "import time\ntime.sleep(0.3)\nwant = ", 1)
    for rel in ("usr/local/bin/npu-smi", "usr/local/Ascend/driver/tools/hccn_tool"):
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body)
        p.chmod(0o755)
    import time

    start = time.monotonic()
    doc = report.run(matrix, str(root), run_tree_programs=True, timeout=30)
    took = time.monotonic() - start
    assert doc["exit_code"] == 0 and _status(doc, "npu-link")[0] == "pass"
    assert took < 12, f"{took:.1f} s"
