"""`python -m provisioner.train.selftest` on CPU (NPU checks n/a) and on simulated NPUs under the torch_npu
double, with the fix named for each failing check."""

from __future__ import annotations

import importlib.metadata
import json

import pytest

from provisioner.devices.torchrun import Target
from provisioner.preflight import stress as preflight_stress
from provisioner.train import allreduce, hbm, selftest
from tests.train import npu_fake
from tests.train.conftest import write_config


def run_selftest(tmp_path, workers: int, env: dict, *args: str, timeout: int = 900) -> tuple[int, dict | None, str]:
    if "FAKE_NPU_SOC" in env and "--hbm-mib" not in args:
        args = (*args, "--hbm-mib", "64")  # the double's 64 GiB chips are host memory: stress a slice of them
    argv = ["-m", "provisioner.train.selftest", *args]
    if workers > 1:
        argv = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(workers), *argv]
    proc = npu_fake.run(argv, env, timeout=timeout)
    docs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"schema":"provision.selftest/1"')]
    return proc.returncode, (docs[-1] if docs else None), proc.stdout + proc.stderr


def checks(doc: dict) -> dict[str, dict]:
    return {c["id"]: c for c in doc["checks"]}


def cpu_env(tmp_path) -> dict:
    env = npu_fake.env(tmp_path)
    for key in ("ASCEND_HOME_PATH", "FAKE_NPU_SOC", "FAKE_NPU_COUNT"):
        env.pop(key)
    env["PYTHONPATH"] = str(npu_fake.REPO)  # no double: a CPU machine with no NPU software at all
    return env


@pytest.mark.slow
def test_on_cpu_the_npu_checks_do_not_apply(tmp_path):
    config = write_config(tmp_path / "train.yaml", method="full", model="/not/needed", data=["/not/needed.json"])
    code, doc, out = run_selftest(tmp_path, 2, cpu_env(tmp_path), "--config", str(config))
    assert code == 0, out[-4000:]
    c = checks(doc)
    assert doc["status"] == "ok" and doc["world_size"] == 2
    assert {k: v["status"] for k, v in c.items()} == {"npu": "n/a", "matmul": "n/a", "hbm": "ok", "attention": "ok",
                                                      "fused-optimizer": "n/a", "all-reduce": "ok", "train-steps": "ok"}
    assert c["npu"]["detail"] == "no CANN toolkit in this container: running on cpu"
    assert "2 workers on gloo" in c["all-reduce"]["detail"] and "HCCL not applicable on CPU" in c["all-reduce"]["detail"]
    # The CPU sweep of selftest.yaml: figures per size, busbw at the largest.
    fig = c["all-reduce"]["figures"]
    assert [r["bytes"] for r in fig["sizes"]] == list(allreduce.plan("cpu").sizes)
    assert fig["busbw_gbps"] == fig["sizes"][-1]["busbw_gbps"] > 0 and fig["bytes"] == fig["sizes"][-1]["bytes"]
    assert c["train-steps"]["detail"].startswith("full, fp32, ddp, sdpa, AdamW: loss ")
    # The HBM stress runs on the CPU too, on the small buffer of selftest.yaml, and reports every worker.
    assert c["hbm"]["detail"].startswith("cpu: 0.03 GiB in 4 chunk(s), 2 passes read back intact; write ")
    assert [(x["rank"], x["bytes"], x["mismatches"]) for x in c["hbm"]["figures"]["chips"]] == [(0, 32 << 20, 0),
                                                                                               (1, 32 << 20, 0)]
    lines = [line for line in out.splitlines() if line.startswith("selftest: ")]
    assert len(lines) == 8 and lines[-1] == "selftest: self-test passed on 2 workers"  # rank 0 only


@pytest.mark.slow
def test_two_a2_chips_pass_every_check(tmp_path):
    code, doc, out = run_selftest(tmp_path, 2, npu_fake.env(tmp_path, count=2))
    assert code == 0, out[-4000:]
    c = checks(doc)
    assert all(v["status"] == "ok" for v in c.values()), c
    assert c["npu"]["detail"].startswith("2 x Ascend910B3 (Atlas A2") and "bf16, Inf/NaN mode" in c["npu"]["detail"]
    assert c["attention"]["detail"].startswith("flash_attention_2 (npu_fusion_attention) in bf16")
    assert c["fused-optimizer"]["detail"].startswith("NpuFusedAdamW: 2 steps")
    assert c["hbm"]["detail"].startswith("npu:0: 0.06 GiB in 1 chunk(s), 2 passes read back intact")
    assert [(x["rank"], x["device"], x["mismatches"]) for x in c["hbm"]["figures"]["chips"]] == [
        (0, "npu:0", 0), (1, "npu:1", 0)]
    assert "2 workers on hccl" in c["all-reduce"]["detail"]
    # Not one latency-bound 16 MiB figure: the sweep runs to 256 MiB and reports busbw there.
    fig = c["all-reduce"]["figures"]
    assert fig["bytes"] == 256 << 20 and len(fig["sizes"]) >= 3
    assert f"busbw {fig['busbw_gbps']:.2f} GB/s at 256 MiB" in c["all-reduce"]["detail"]
    assert all(r["busbw_gbps"] == pytest.approx(r["algbw_gbps"], rel=1e-3) for r in fig["sizes"])  # N = 2
    assert c["train-steps"]["detail"].startswith("lora, bf16, ddp, flash_attention_2, NpuFusedAdamW")
    # preflight's chip-stress on this host (no bad HBM cell): every chip intact, the GB/s stated but not judged
    judged = preflight_stress.judge_stress(doc)
    assert judged["status"] == "pass" and judged["message"].startswith(
        "HBM pattern read back intact on 2 chip(s) (0.06 GiB each); read ")
    assert judged["message"].endswith("GB/s (not judged: no sourced HBM bandwidth floor)")


@pytest.mark.slow
def test_first_generation_910_with_a_config_it_cannot_run(tmp_path):
    """The user's config asks for flash attention and ZeRO-2 with fp16: both checks fail with their fix."""
    config = write_config(tmp_path / "train.yaml", attn_implementation="flash_attention_2", strategy="zero2")
    code, doc, out = run_selftest(tmp_path, 1, npu_fake.env(tmp_path, soc="Ascend910A"), "--config", str(config))
    assert code == 1 and doc["status"] == "failed", out[-4000:]
    c = checks(doc)
    assert c["npu"]["status"] == "ok" and "no bf16, saturation mode" in c["npu"]["detail"]
    assert c["matmul"]["detail"].endswith("bf16 not on this chip")
    assert c["attention"]["status"] == "fail" and "npu_fusion_attention does not run on Ascend910A" in c["attention"]["error"]
    assert c["attention"]["fix"] == "set attn_implementation: sdpa (or auto)"
    assert c["train-steps"]["status"] == "fail" and "zero2 with fp16" in c["train-steps"]["error"]
    assert "FAIL  attention" in out and "fix: set attn_implementation: sdpa (or auto)" in out
    # The same chip with the config's defaults passes.
    code, doc, out = run_selftest(tmp_path, 1, npu_fake.env(tmp_path, soc="Ascend910A"))
    assert code == 0, out[-4000:]
    assert checks(doc)["train-steps"]["detail"].startswith("lora, fp16, ddp, sdpa, NpuFusedAdamW")
    assert "loss scale" in checks(doc)["train-steps"]["detail"]


def test_an_npu_image_without_a_visible_chip_fails_with_the_fix(tmp_path):
    code, doc, out = run_selftest(tmp_path, 1, npu_fake.env(tmp_path, ASCEND_RT_VISIBLE_DEVICES="3"))
    assert code == 1, out[-3000:]
    c = checks(doc)
    assert c["npu"]["status"] == "fail"
    assert c["npu"]["error"] == ("RuntimeError: CANN is set up but torch_npu sees no NPU (0 visible, "
                                 "ASCEND_RT_VISIBLE_DEVICES=3)")
    assert c["npu"]["fix"].startswith("the chip is not visible: map it")
    assert all(c[k]["detail"] == "skipped: the npu check failed" for k in selftest.CHECKS[1:])


@pytest.mark.slow
def test_a_chip_with_bad_hbm_fails_the_stress_and_preflight_names_it(tmp_path):
    """Two A2 chips, chip 1 with a bad HBM cell (FAKE_NPU_BAD_HBM): both workers stress their chip at once;
    rank 1 reads back one wrong word per pass and fails with the fix, rank 0 passes; the training steps are
    skipped (a worker failed) and preflight --selftest fails chip-stress naming rank 1 and its chip."""
    code, doc, out = run_selftest(tmp_path, 2, npu_fake.env(tmp_path, count=2, FAKE_NPU_BAD_HBM="1"))
    assert code == 1 and doc is not None, out[-4000:]
    c = checks(doc)
    assert c["hbm"]["status"] == "fail" and c["hbm"]["ranks_failed"] == [1]
    assert c["hbm"]["error"] == ("npu:1: 2 word(s) read back differ from the pattern written (first at byte"
                                 " 33554432 of the 0.06 GiB in 1 chunk(s), 2 passes, pass 1)")
    assert c["hbm"]["fix"] == selftest.DEFAULT_FIX["hbm"]
    chips = {x["rank"]: x for x in c["hbm"]["figures"]["chips"]}
    assert (chips[0]["mismatches"], chips[1]["mismatches"]) == (0, 2) and chips[1]["device"] == "npu:1"
    assert chips[0]["read_gbps"] > 0 and chips[0]["bytes"] == 64 << 20
    assert c["matmul"]["status"] == "ok" and c["train-steps"]["status"] == "n/a"
    judged = preflight_stress.judge_stress(doc)
    assert judged["status"] == "fail" and judged["chips"] == ["rank 1"]
    assert judged["message"] == "HBM read back wrong: rank 1 (npu:1): 2 word(s) wrong of 0.06 GiB"
    # the same host without the bad cell: test_two_a2_chips_pass_every_check


def test_hbm_plan_from_the_data():
    """Sizes come from selftest.yaml: a share of the free memory in chunks of at most 1 GiB on an accelerator,
    the chunk shrunk so that the scratch chunks fit in what is left; a fixed small buffer on the CPU."""
    gib = 1 << 30
    p = hbm.plan("npu", 60 * gib)
    assert (p.chunk_bytes, p.chunks, p.passes) == (gib, 51, 2)  # 0.85 x 60 GiB = 51 GiB
    small = hbm.plan("npu", 100 << 20)  # 100 MiB free: 85 MiB stressed, scratch under 15 MiB
    assert small.chunk_bytes * hbm.SCRATCH_CHUNKS <= (100 << 20) - small.total_bytes
    assert small.total_bytes <= 85 << 20 and small.chunks > 1
    assert hbm.plan("npu", 60 * gib, 64 << 20) == hbm.Plan(64 << 20, 1, 2)
    assert hbm.plan("cpu", None) == hbm.Plan(8 << 20, 4, 2)
    with pytest.raises(ValueError, match="--hbm-mib: 'lots' is not a size in MiB"):
        hbm.parse_mib("lots")


def test_hbm_stress_on_the_cpu_counts_what_reads_back_wrong(monkeypatch):
    import torch

    p = hbm.Plan(1 << 16, 3, 2)
    got = hbm.stress(p, torch.device("cpu"), lambda: None)
    assert (got["bytes"], got["mismatches"], got["first_bad"]) == (3 << 16, 0, None) and got["read_gbps"] > 0
    # memory that drops a bit: every write of chunk 2 (its key, in either pass) lands one word wrong
    real, keys = torch.bitwise_xor, {hbm._key(2, 0), hbm._key(2, 1)}

    def flaky(a, b, out=None):
        if out is None:
            return real(a, b)
        real(a, b, out=out)
        if b in keys:
            out[7] ^= 4
        return out

    monkeypatch.setattr(torch, "bitwise_xor", flaky)
    got = hbm.stress(p, torch.device("cpu"), lambda: None)
    assert got["mismatches"] == 2 and got["first_bad"] == {"chunk": 2, "word": 7, "pass": 0}


def test_bad_config_is_one_line_and_exit_2(tmp_path):
    config = write_config(tmp_path / "train.yaml", precision="fp8")
    code, doc, out = run_selftest(tmp_path, 1, cpu_env(tmp_path), "--config", str(config))
    assert code == 2 and doc is None
    assert out.strip() == "provision selftest: error: config: precision: must be one of auto, bf16, fp16, fp32 (got 'fp8')"


def test_bad_all_reduce_sizes_are_one_line_and_exit_2(tmp_path):
    code, doc, out = run_selftest(tmp_path, 1, cpu_env(tmp_path), "--all-reduce-mib", "1,lots")
    assert code == 2 and doc is None
    assert out.strip() == ("provision selftest: error: --all-reduce-mib: 'lots' is not a size in MiB "
                           "(write e.g. 1,16,256)")
    code, doc, out = run_selftest(tmp_path, 1, cpu_env(tmp_path), "--hbm-mib", "0")
    assert code == 2 and doc is None
    assert out.strip() == "provision selftest: error: --hbm-mib: the size must be in [1, 1048576] MiB (got 0)"


def test_fixes_and_report_lines():
    from provisioner.train import selftest_report as report

    assert "numpy<2" in report.fix_for("RuntimeError: SetPrecisionMode ... error code is 500001", "x")
    assert report.fix_for("ImportError: libascend_hal.so: cannot open shared object file", "x").startswith(
        "CANN or driver libraries are missing")
    assert report.fix_for("something else", "the default") == "the default"
    assert report.fix_for("ConfigError: config: strategy: fsdp: ...: use strategy: zero3 (DeepSpeed", "x") == (
        "set strategy: zero3 in the config (the way forward the error names)")
    ok = [report.Result(name, "ok", "fine", rank=r) for name in report.CHECKS for r in (0,)]
    bad = [report.Result(name, "ok", "fine", rank=1) for name in report.CHECKS]
    bad[5] = report.Result("all-reduce", "fail", error="boom", fix="do this", rank=1)
    doc = report.document([ok, bad], 2)
    assert doc["status"] == "failed" and checks(doc)["all-reduce"]["ranks_failed"] == [1]
    # A report from a real host carries the libraries that decided the checks (here: no torch_npu).
    assert list(doc["versions"]) == list(report.REPORTED)
    assert doc["versions"]["torch"] == importlib.metadata.version("torch") and doc["versions"]["torch_npu"] is None
    text = report.lines(doc)
    assert "FAIL  all-reduce       boom (ranks 1)" in text and any(line.endswith("fix: do this") for line in text)
    assert text[-1] == "self-test FAILED (1 of 7 checks) on 2 workers"


def test_launch_passes_the_trainer_config_to_the_selftest():
    target = Target.train(["--config", "/data/train.yaml", "lr=1e-4", "--resume", "auto", "--json", "lora.r=16"])
    assert target.trainer_config_args() == ("--config", "/data/train.yaml", "lr=1e-4", "lora.r=16")
    assert Target("module", "my.module", ("--config", "x")).trainer_config_args() == ()


@pytest.mark.slow
def test_a_worker_whose_chip_fails_does_not_hang_the_others(tmp_path):
    """Two workers, one chip: rank 1 fails the npu check and cannot join the process group. Every worker
    learns that before any collective, so rank 0 still prints each check, the npu failure of rank 1 with its
    fix, and the document (before, rank 0 waited in init_process_group until torchrun killed it)."""
    code, doc, out = run_selftest(tmp_path, 2, npu_fake.env(tmp_path, count=1), timeout=120)
    assert code == 1 and doc is not None, out[-4000:]
    assert doc["status"] == "failed" and doc["world_size"] == 2
    c = checks(doc)
    assert c["npu"]["status"] == "fail" and c["npu"]["ranks_failed"] == [1]
    assert c["npu"]["error"] == "ConfigError: LOCAL_RANK 1 needs 2 NPUs but 1 visible (ASCEND_RT_VISIBLE_DEVICES=<unset>)"
    assert c["npu"]["fix"].startswith("the chip is not visible: map it")
    # Rank 0's chip is fine: its own checks run; the collectives are skipped on every worker.
    assert c["matmul"]["status"] == "ok" and c["fused-optimizer"]["status"] == "ok" and c["hbm"]["status"] == "ok"
    assert {c[k]["status"] for k in ("all-reduce", "train-steps")} == {"n/a"}
    assert c["all-reduce"]["detail"] == "skipped: the npu check failed on rank 1"
    lines = [line for line in out.splitlines() if line.startswith("selftest: ")]
    assert lines[0].startswith("selftest: FAIL  npu ") and lines[0].endswith("(ranks 1)")
    assert lines[1].startswith("selftest: ") and "fix: the chip is not visible" in lines[1]
    assert lines[-1] == "selftest: self-test FAILED (1 of 7 checks) on 2 workers"


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["fsdp", pytest.param("zero3", marks=pytest.mark.full)])
def test_train_steps_run_the_configured_sharded_strategy_over_two_workers(tmp_path, strategy):
    """The self-test reports the strategy it ran: FSDP2 and ZeRO-3 shard the tiny model over both workers
    through the trainer's own engine (before, both ran the DDP engine and passed whatever their support)."""
    if strategy == "zero3":
        pytest.importorskip("deepspeed")
    config = write_config(tmp_path / "train.yaml", method="full", strategy=strategy)
    code, doc, out = run_selftest(tmp_path, 2, cpu_env(tmp_path), "--config", str(config))
    assert code == 0, out[-4000:]
    detail = checks(doc)["train-steps"]["detail"]
    assert detail.startswith(f"full, fp32, {strategy}, sdpa, "), detail
    assert ("AdamW" if strategy == "fsdp" else "Stage3") in detail


@pytest.mark.slow
def test_fsdp_on_a_torch_25_stack_fails_the_self_test_with_zero3_named(tmp_path):
    """torch_npu 2.5 has no FSDP2 support (matrices/torch_npu.yaml torch_npu_features): train-steps fails with
    the trainer's own refusal and its way forward; the chip's checks still pass."""
    config = write_config(tmp_path / "train.yaml", strategy="fsdp")
    code, doc, out = run_selftest(tmp_path, 1, npu_fake.env(tmp_path, torch_npu="2.5.1.post1"), "--config",
                                  str(config))
    assert code == 1 and doc["status"] == "failed", out[-4000:]
    c = checks(doc)
    assert all(c[k]["status"] == "ok" for k in ("npu", "matmul", "attention", "fused-optimizer")), c
    assert doc["versions"]["torch_npu"] == "2.5.1.post1"
    step = c["train-steps"]
    assert step["status"] == "fail"
    assert step["error"].startswith("ConfigError: config: strategy: fsdp: torch_npu 2.5.1.post1 does not support "
                                    "PyTorch FSDP2 (fully_shard) on the NPU")
    assert step["fix"] == "set strategy: zero3 in the config (the way forward the error names)"
