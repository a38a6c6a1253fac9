"""The torch_npu test double keeps the contracts of the real wheel that the trainer relies on.

Each observation comes from tests/train/fake_probe.py run under the double for one SoC; the expected values
are what torch_npu does on that chip (the wheel files are cited in tests/fakes/torch_npu/).
"""

from __future__ import annotations

import json

import pytest

from tests.train import npu_fake

# npu_fusion_attention's documented parameters (torch_npu/_op_plugin_docs.py), in order.
FA_PARAMS = ["query", "key", "value", "head_num", "input_layout", "pse", "padding_mask", "atten_mask", "scale",
             "keep_prob", "pre_tockens", "next_tockens", "inner_precise", "prefix", "actual_seq_qlen",
             "actual_seq_kvlen", "sparse_mode", "gen_mask_parallel", "sync", "softmax_layout"]


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    cache: dict[str, dict] = {}

    def get(soc: str) -> dict:
        if soc not in cache:
            env = npu_fake.env(tmp_path_factory.mktemp("probe"), soc=soc)
            proc = npu_fake.run(["tests/train/fake_probe.py"], env)
            assert proc.returncode == 0, proc.stderr[-3000:]
            cache[soc] = json.loads(proc.stdout.strip().splitlines()[-1])
        return cache[soc]

    return get


def test_import_fails_without_cann_like_the_wheel(tmp_path):
    env = npu_fake.env(tmp_path)
    env.pop("ASCEND_HOME_PATH")
    proc = npu_fake.run(["-c", "import torch_npu"], env)
    assert proc.returncode == 1 and "ImportError: libhccl.so" in proc.stderr


def test_a2_chip(probe):
    p = probe("Ascend910B3")
    assert (p["name"], p["count"], p["bf16"], p["inf_nan"]) == ("Ascend910B3", 1, True, True)
    assert "error code 107001" in p["bad_device"]
    assert p["bf16_matmul"] is None and p["fp16_matmul"] == 64.0
    # Inf/NaN mode: overflow is inf, and the saturation-mode flag API refuses (utils.py get_npu_overflow_flag)
    assert p["overflow_value"] == "inf" and p["check_overflow"] is True
    assert p["overflow_flag"].startswith("RuntimeError: Unsupported api when soc_version >= Ascend910B1")
    assert p["jit_compile_false_default"] is True  # binary operators


def test_first_generation_910(probe):
    p = probe("Ascend910A")
    assert (p["bf16"], p["inf_nan"]) == (False, False)
    assert "does not support data type DT_BFLOAT16" in p["bf16_matmul"]
    # saturation mode: the largest fp16 instead of inf, and the float status flag says so
    assert p["overflow_value"] == 65504.0 and p["overflow_flag"] is True and p["check_overflow"] is True
    assert p["fa_error"].startswith("RuntimeError: npu_fusion_attention is not supported on Ascend910A")
    assert p["jit_compile_false_default"] is False  # online compilation


@pytest.mark.parametrize("soc", ["Ascend910B3", "Ascend910A"])
def test_grad_scaler_skips_overflowing_steps(probe, soc):
    """On both modes: the NPU GradScaler sees the overflow (Inf/NaN, or the flag), skips, halves the scale."""
    p = probe(soc)
    assert p["scaler_cpu_outputs"] == "ValueError: Device type of outputs should be npu."
    assert p["scaler_skipped"] is True and p["scaler_scale_after_overflow"] == 2.0**15


def test_fused_adamw_contract(probe):
    p = probe("Ascend910B3")
    assert p["fused_set_to_none"] == "ValueError: set_to_none is not supported in fused optimizers"
    assert p["grads_in_buffer"] and p["fused_zero_grad_zeroes"] and p["fused_matches_adamw"]
    assert p["fused_fp64_params"].startswith("TypeError: Fused optimizer's parameters must be either float32")
    assert p["module_to_dtype"] == ["torch.float64", "torch.float64"]


def test_memory_and_rng(probe):
    p = probe("Ascend910B3")
    assert p["memory_grew"] == p["memory_peak_kept"] == 4 * 1024 * 1024 and p["memory_freed"] == 0
    assert p["oom"].startswith("OutOfMemoryError: NPU out of memory. Tried to allocate")
    assert p["rng_reproducible"] and p["rng_state_roundtrip"] and p["rng_not_host"]
    assert p["rng_state_type"] == ["torch.uint8", "cpu"]


def test_fusion_attention_contract(probe):
    p = probe("Ascend910B3")
    assert p["fa_params"][: len(FA_PARAMS)] == FA_PARAMS
    assert p["fa_error"] is None and p["fa_matches_sdpa"] and p["fa_backward"]
    assert "varlen supports at most 1024" in p["fa_varlen_limit"] and p["fa_varlen_1024"] is None
    assert "1..768" in p["fa_head_dim"] and "dtypes must match" in p["fa_mixed_dtypes"]
    assert "needs the compressed atten_mask" in p["fa_no_mask_causal"]


def test_a3_and_unknown_socs(tmp_path):
    code = ("import json, torch, torch_npu; print(json.dumps([torch.npu.get_device_name(), "
            "torch.npu.is_bf16_supported(), torch_npu.npu.utils.is_support_inf_nan()]))")
    assert npu_fake.run_json(code, npu_fake.env(tmp_path, soc="Ascend910_9392")) == ["Ascend910_9392", True, True]
    assert npu_fake.run_json(code, npu_fake.env(tmp_path, soc="Ascend310P3")) == ["Ascend310P3", False, False]
    proc = npu_fake.run(["-c", code], npu_fake.env(tmp_path, soc="Ascend999"))
    assert proc.returncode == 1 and "Unsupported soc version: Ascend999" in proc.stderr


def test_visible_devices_select_chips(tmp_path):
    code = "import json, torch, torch_npu; print(json.dumps(torch.npu.device_count()))"
    assert npu_fake.run_json(code, npu_fake.env(tmp_path, count=8)) == 8
    assert npu_fake.run_json(code, npu_fake.env(tmp_path, count=8, ASCEND_RT_VISIBLE_DEVICES="2,5")) == 2
    # ascending only; parsing stops at the first bad entry (CANN envref_07_0028)
    assert npu_fake.run_json(code, npu_fake.env(tmp_path, count=8, ASCEND_RT_VISIBLE_DEVICES="3,1")) == 1


HCCL = """
import json, os, torch, torch.distributed as dist, torch_npu
rank = int(os.environ["LOCAL_RANK"]); torch.npu.set_device(rank)
dist.init_process_group("hccl")
t = torch.full((4,), float(rank + 1), device=f"npu:{rank}")
dist.all_reduce(t)
try:
    dist.all_reduce(torch.ones(1, device=f"npu:{rank}"), op=dist.ReduceOp.AVG)
    avg = None
except RuntimeError as exc:
    avg = str(exc)
doc = {"rank": rank, "sum": t.cpu().tolist(), "backend": dist.get_backend(), "avg": avg}
with open(os.path.join(os.environ["OUT_DIR"], f"rank{rank}.json"), "w") as fh:  # not stdout: lines interleave
    json.dump(doc, fh)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_hccl_backend_reduces_npu_tensors_across_processes(tmp_path):
    script = tmp_path / "hccl.py"
    script.write_text(HCCL)
    env = npu_fake.env(tmp_path, count=2, OUT_DIR=tmp_path)
    proc = npu_fake.run(["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script)],
                        env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    docs = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [d["sum"] for d in docs] == [[3.0] * 4, [3.0] * 4] and {d["backend"] for d in docs} == {"hccl"}
    assert all("Unsupported ReduceOp AVG" in d["avg"] for d in docs)


MAPPING = """
import json, torch, torch_npu, transformers
from transformers import AutoModelForCausalLM
try:
    m = AutoModelForCausalLM.from_pretrained({model!r}, attn_implementation="flash_attention_2").to("npu:0")
    ids = torch.arange(12, device="npu:0").reshape(1, 12)
    with torch.autocast("npu", dtype=torch.bfloat16):
        m(input_ids=ids)
    error = None
except Exception as exc:
    error = f"{{type(exc).__name__}}: {{exc}}"
print(json.dumps({{"version": transformers.__version__, "error": error, "calls": torch_npu._ATTENTION_STATS["calls"]}}))
"""


@pytest.mark.slow
def test_what_transformers_makes_of_flash_attention_on_the_npu(tmp_path, tiny_model_dir):
    """The double is real enough for transformers to take its NPU paths: the installed release (5.x) runs
    flash_attention_2 through npu_fusion_attention; 4.46.3 (torch 2.1-2.4 sets) has no NPU flash attention."""
    code = MAPPING.format(model=str(tiny_model_dir))
    new = npu_fake.run_json(code, npu_fake.env(tmp_path))
    assert new["error"] is None and new["calls"] == 2  # one call per layer
    old = npu_fake.run_json(code, npu_fake.env(tmp_path, path=(npu_fake.transformers_env("4.46.3"),)))
    assert old["version"] == "4.46.3" and old["calls"] == 0
    assert old["error"].startswith("ImportError:") and "flash_attn" in old["error"]
