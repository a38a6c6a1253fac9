"""NPU rules that need no device: SoC families, transformers features, attention choice, the process-group
timeout against HCCL_EXEC_TIMEOUT, the peak-FLOP table and the packing cap."""

from __future__ import annotations

import pytest

from provisioner.train import ascend, attention
from provisioner.train import dist as tdist
from provisioner.train.config import ConfigError
from provisioner.train.device import DeviceInfo, Precision
from provisioner.train.metrics import peak_tflops
from provisioner.train.packing import pack_rows
from provisioner.train.sampler import MicroBatchStream, group_rows

CPU = DeviceInfo("cpu", 0, "gloo", "cpu")


def npu(name: str, inf_nan: bool = True) -> DeviceInfo:
    return DeviceInfo("npu", 0, "hccl", name, ascend.soc_family(name), inf_nan, False)


@pytest.mark.parametrize("name, family, fa, jit", [
    ("Ascend910B3", "a2", True, False), ("Ascend910B4-1", "a2", True, False), ("Ascend910_9392", "a3", True, False),
    ("Ascend910A", "ascend910", False, True), ("Ascend910B", "ascend910", False, True),
    ("Ascend910PremiumA", "ascend910", False, True), ("Ascend310P3", "ascend310p", False, None),
])
def test_soc_families(name, family, fa, jit):
    fam = ascend.soc_family(name)
    assert (fam.id, fam.fusion_attention, fam.jit_compile) == (family, fa, jit)


def test_unknown_soc_has_no_family():
    assert ascend.soc_family("Ascend999") is None
    assert "not a known Ascend SoC" in attention.npu_flash_problem(npu("Ascend999"))


@pytest.mark.parametrize("version, npu_fa, autocast, hub_swap", [
    ("4.46.3", False, False, False), ("4.47.1", False, False, False), ("4.50.3", False, False, False),
    ("4.51.0", True, False, False), ("4.55.4", True, False, False), ("4.56.0", True, False, True),
    ("4.57.6", True, False, True), ("5.0.0", True, False, False), ("5.9.0", True, False, False),
    ("5.10.1", True, True, False), ("5.20.2", True, True, False),
])
def test_transformers_features_by_release(version, npu_fa, autocast, hub_swap):
    assert ascend.transformers_has("npu_flash_attention", version) is npu_fa
    assert ascend.transformers_has("flash_attention_autocast_any_device", version) is autocast
    swaps = (ascend.transformers_has("flash_attention_hub_fallback", version)
             and not ascend.transformers_has("flash_attention_hub_fallback_skips_npu", version))
    assert swaps is hub_swap


def test_auto_attention_follows_chip_and_transformers(monkeypatch):
    assert attention.pick_attention("auto", npu("Ascend910B3")) == "flash_attention_2"
    assert attention.pick_attention("auto", npu("Ascend910_9392")) == "flash_attention_2"
    assert attention.pick_attention("auto", npu("Ascend910A", inf_nan=False)) == "sdpa"
    assert attention.pick_attention("auto", CPU) == "sdpa"
    with pytest.raises(ConfigError, match="does not run on Ascend910A .first-generation Ascend 910"):
        attention.pick_attention("flash_attention_2", npu("Ascend910A", inf_nan=False))
    with pytest.raises(ConfigError, match="only flash_attention_2"):
        attention.pick_attention("flash_attention_3", npu("Ascend910B3"))
    monkeypatch.setattr(ascend, "installed_version", lambda dist: "4.47.1")
    assert attention.pick_attention("auto", npu("Ascend910B3")) == "sdpa"


def test_sdpa_gate_of_older_transformers(monkeypatch):
    """transformers 4.46 refuses SDPA below torch 2.1.1 (utils/import_utils.py is_torch_sdpa_available)."""
    import transformers.utils

    monkeypatch.setattr(transformers.utils, "is_torch_sdpa_available", lambda: False, raising=False)
    assert attention.pick_attention("auto", npu("Ascend910A", inf_nan=False)) == "eager"
    with pytest.raises(ConfigError, match="refuses SDPA with torch .*; use eager or auto"):
        attention.pick_attention("sdpa", CPU)


def test_flash_autocast_fix_only_where_needed(monkeypatch):
    bf16 = Precision("bf16", False)
    assert attention.fix_flash_autocast(CPU, bf16, "flash_attention_2") is False
    assert attention.fix_flash_autocast(npu("Ascend910B3"), Precision("fp32", False), "flash_attention_2") is False
    assert attention.fix_flash_autocast(npu("Ascend910B3"), bf16, "sdpa") is False
    # The installed transformers (5.x) already casts fp32 queries for any device.
    assert attention.fix_flash_autocast(npu("Ascend910B3"), bf16, "flash_attention_2") is False


@pytest.mark.parametrize("configured, exec_s, want", [
    (None, None, 1800), (None, "600", 1800), (None, "3600", 3900), (None, "0", 7 * 24 * 3600), (7200, "3600", 7200),
])
def test_process_group_timeout_exceeds_hccl_exec_timeout(configured, exec_s, want):
    env = {} if exec_s is None else {"HCCL_EXEC_TIMEOUT": exec_s}
    assert tdist.timeout_s(configured, npu("Ascend910B3"), env) == want
    assert tdist.timeout_s(None, CPU, {"HCCL_EXEC_TIMEOUT": "3600"}) == 1800  # HCCL is not in play


def test_process_group_timeout_refusals():
    with pytest.raises(ConfigError, match=r"dist_timeout_s: 1800 s does not exceed HCCL_EXEC_TIMEOUT=3600 s"):
        tdist.timeout_s(1800, npu("Ascend910B3"), {"HCCL_EXEC_TIMEOUT": "3600"})
    with pytest.raises(ConfigError, match=r"HCCL_EXEC_TIMEOUT=0 \(never\)"):
        tdist.timeout_s(7200, npu("Ascend910B3"), {"HCCL_EXEC_TIMEOUT": "0"})
    with pytest.raises(ConfigError, match="HCCL_EXEC_TIMEOUT='1h': must be a whole number"):
        tdist.timeout_s(None, npu("Ascend910B3"), {"HCCL_EXEC_TIMEOUT": "1h"})


def test_peak_flops_by_soc_name():
    assert peak_tflops("Ascend910_9392", "npu", "bf16", None) == 390  # A3 is not the first-generation row
    assert peak_tflops("Ascend910_9362", "npu", "fp16", None) == 390
    assert peak_tflops("Ascend910B3", "npu", "bf16", None) == 320
    assert peak_tflops("Ascend910B", "npu", "fp16", None) == 256  # the first-generation SoC of that name
    assert peak_tflops("Ascend910B", "npu", "bf16", None) is None
    assert peak_tflops("Ascend910ProA", "npu", "fp16", None) == 256


def test_packing_cap_limits_samples_per_row_and_batch():
    lengths = [3] * 50
    rows = pack_rows(lengths, list(range(50)), capacity=1000, max_items=8)
    assert max(len(r) for r in rows) == 8 and sorted(i for r in rows for i in r) == list(range(50))
    assert len(pack_rows(lengths, list(range(50)), capacity=1000)) == 1
    batches = group_rows([[0] * 8, [1] * 8, [2] * 3, [3] * 8], per_batch=4, max_seqs=16)
    assert [[len(r) for r in b] for b in batches] == [[8, 8], [3, 8]]
    stream = MicroBatchStream([5] * 3000, micro_batch_size=2, max_seq_len=100000, packing=True, seed=0,
                              max_seqs=1024)
    sizes = [sum(len(r) for r in stream.get(i)) for i in range(stream.epoch_size(0))]
    assert max(sizes) <= 1024 and sum(sizes) == 3000


@pytest.mark.parametrize("strategy", ["zero2", "zero3"])
def test_zero_with_fp16_is_refused_on_a_saturating_chip_at_either_stage(strategy):
    """DeepSpeed's stage 2 and stage 3 both detect overflow only by Inf/NaN (_has_inf_or_nan)."""
    from provisioner.train import zero

    with pytest.raises(ConfigError, match=f"strategy: {strategy} with fp16 would apply saturated gradients"):
        zero.check_supported(npu("Ascend910A", inf_nan=False), Precision("fp16", True), strategy)
    zero.check_supported(npu("Ascend910B3"), Precision("fp16", True), strategy)  # Inf/NaN mode: fine
    zero.check_supported(npu("Ascend910A", inf_nan=False), Precision("fp32", False), strategy)


def test_grpo_gives_transformers_a_process_group_timeout_on_the_npu(monkeypatch):
    """transformers makes timedelta(seconds=ddp_timeout) off the CPU: the GRPO arguments carry the trainer's own
    process-group timeout (1800 s, or HCCL_EXEC_TIMEOUT + margin), never None."""
    pytest.importorskip("trl")
    from provisioner.train.config import TrainConfig
    from provisioner.train.grpo.trainer import grpo_args

    monkeypatch.delenv("HCCL_EXEC_TIMEOUT", raising=False)
    cfg = TrainConfig(method="grpo", output_dir="o", micro_batch_size=8)
    args = grpo_args(cfg, npu("Ascend910B3"), Precision("fp32", False), False)
    assert args.ddp_timeout_delta.total_seconds() == tdist.timeout_s(None, npu("Ascend910B3")) == 1800
    monkeypatch.setenv("HCCL_EXEC_TIMEOUT", "3600")
    args = grpo_args(cfg, npu("Ascend910B3"), Precision("fp32", False), False)
    assert args.ddp_timeout == tdist.timeout_s(None, npu("Ascend910B3")) > 3600
