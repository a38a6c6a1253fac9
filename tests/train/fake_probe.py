"""Observe the torch_npu double's contracts in one process and print them as one JSON line.

Run by test_fake_torch_npu.py with the double on PYTHONPATH and FAKE_NPU_SOC set; every entry is what the
real torch_npu would answer or raise on that SoC (the citations are in tests/fakes/torch_npu/).
"""

from __future__ import annotations

import inspect
import json
import math


def _error(fn) -> str | None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - the error is the observation
        return f"{type(exc).__name__}: {exc}"
    return None


def main() -> None:
    import torch
    import torch_npu

    out: dict = {}
    torch.npu.set_device(0)
    out["name"] = torch.npu.get_device_name(0)
    out["count"] = torch.npu.device_count()
    out["bf16"] = torch.npu.is_bf16_supported()
    out["inf_nan"] = torch_npu.npu.utils.is_support_inf_nan()
    out["bad_device"] = _error(lambda: torch.npu.set_device(torch.npu.device_count()))
    out["jit_compile_false_default"] = torch.npu.is_jit_compile_false()

    # bf16 compute
    a = torch.ones(4, 4, device="npu")
    out["bf16_matmul"] = _error(lambda: (a.bfloat16() @ a.bfloat16()).float().sum().item())
    out["fp16_matmul"] = float((a.half() @ a.half()).float().sum())

    # overflow: saturation vs Inf/NaN
    big = torch.full((2,), 60000.0, dtype=torch.float16, device="npu")
    if not out["inf_nan"]:
        torch_npu.npu.utils.clear_npu_overflow_flag()
    doubled = (big * 2).float().cpu().tolist()
    out["overflow_value"] = "inf" if math.isinf(doubled[0]) else doubled[0]
    out["overflow_flag"] = _error(torch_npu.npu.utils.get_npu_overflow_flag) if out["inf_nan"] else \
        torch_npu.npu.utils.get_npu_overflow_flag()
    out["check_overflow"] = torch_npu.npu.utils.npu_check_overflow(big * 2)

    # GradScaler: an overflowing step is skipped and the scale backs off
    lin = torch.nn.Linear(4, 4).npu()
    opt = torch_npu.optim.NpuFusedAdamW(lin.parameters(), lr=0.1)
    scaler = torch_npu.npu.amp.GradScaler(init_scale=2.0**16)
    out["scaler_cpu_outputs"] = _error(lambda: scaler.scale(torch.ones(1)))
    before = lin.weight.detach().cpu().clone()
    with torch.autocast("npu", dtype=torch.float16):
        loss = (lin(torch.full((8, 4), 30000.0, device="npu")) ** 2).sum()
    scaler.scale(loss.float()).backward()
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    out["scaler_scale_after_overflow"] = float(scaler.get_scale())
    out["scaler_skipped"] = bool(torch.equal(before, lin.weight.detach().cpu()))

    # NpuFusedAdamW: combined buffers, zero_grad contract, same maths as AdamW
    torch.manual_seed(0)
    ref = torch.nn.Linear(6, 3)
    fused = torch.nn.Linear(6, 3).npu()
    fused.load_state_dict(ref.state_dict())
    x = torch.randn(5, 6)
    r_opt = torch.optim.AdamW(ref.parameters(), lr=0.01, weight_decay=0.1)
    f_opt = torch_npu.optim.NpuFusedAdamW(fused.parameters(), lr=0.01, weight_decay=0.1)
    for _ in range(3):
        ref(x).pow(2).sum().backward()
        fused(x.npu()).pow(2).sum().backward()
        r_opt.step()
        f_opt.step()
        r_opt.zero_grad()
        f_opt.zero_grad()
    out["fused_matches_adamw"] = bool(torch.allclose(ref.weight, fused.weight.detach().cpu(), atol=1e-6))
    out["fused_set_to_none"] = _error(lambda: f_opt.zero_grad(set_to_none=True))
    combined = f_opt.grads_all_group_combined[0]
    start = combined.data_ptr()
    end = start + combined.numel() * combined.element_size()
    out["grads_in_buffer"] = all(start <= p.grad.data_ptr() < end for p in fused.parameters())
    out["fused_zero_grad_zeroes"] = all(float(p.grad.abs().sum()) == 0.0 for p in fused.parameters())
    wide = torch.nn.Linear(2, 2).npu().to(torch.float64)
    wide.weight.grad = torch.zeros_like(wide.weight)
    out["fused_fp64_params"] = _error(lambda: torch_npu.optim.NpuFusedAdamW([wide.weight]).step())
    out["module_to_dtype"] = [str(wide.weight.dtype), str(wide.weight.elem.dtype)]

    # memory statistics and the HBM limit
    torch.npu.reset_peak_memory_stats()
    base = torch.npu.memory_allocated()
    block = torch.empty(1024, 1024, device="npu")
    out["memory_grew"] = torch.npu.memory_allocated() - base
    del block
    out["memory_peak_kept"] = torch.npu.max_memory_allocated() - base
    out["memory_freed"] = torch.npu.memory_allocated() - base
    out["oom"] = _error(lambda: torch.empty(int(torch.npu.mem_get_info()[1]) // 4 + 1024, device="npu"))

    # RNG: per device, seeded by torch.manual_seed, state as a host ByteTensor
    torch.manual_seed(7)
    first = torch.randn(4, device="npu").cpu()
    state = torch.npu.get_rng_state()
    second = torch.randn(4, device="npu").cpu()
    torch.npu.set_rng_state(state)
    again = torch.randn(4, device="npu").cpu()
    torch.manual_seed(7)
    out["rng_reproducible"] = bool(torch.equal(first, torch.randn(4, device="npu").cpu()))
    out["rng_state_roundtrip"] = bool(torch.equal(second, again))
    out["rng_state_type"] = [str(state.dtype), state.device.type]
    torch.manual_seed(7)
    torch.randn(100)  # host draws do not advance the device's generator
    out["rng_not_host"] = bool(torch.equal(first, torch.randn(4, device="npu").cpu()))

    # npu_fusion_attention
    params = list(inspect.signature(torch_npu.npu_fusion_attention).parameters)
    out["fa_params"] = params
    mask = torch.triu(torch.ones(2048, 2048, device="npu"), diagonal=1).bool()

    def fa(q, k, v, **kw):
        return torch_npu.npu_fusion_attention(q, k, v, kw.pop("heads", 2), kw.pop("layout", "BSND"), **kw)[0]

    q, k, v = (torch.randn(2, 5, 2, 8) for _ in range(3))
    want = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                            is_causal=True).transpose(1, 2)
    got = _error(lambda: out.__setitem__("_fa", fa(q.npu(), k.npu(), v.npu(), atten_mask=mask, sparse_mode=3,
                                                   scale=8**-0.5)))
    out["fa_error"] = got
    if got is None:
        out["fa_matches_sdpa"] = bool(torch.allclose(out.pop("_fa").cpu(), want, atol=1e-5))
        t = torch.randn(2 * 1100, 2, 8, device="npu")
        lens = tuple(range(2, 2 * 1100 + 1, 2))
        out["fa_varlen_limit"] = _error(lambda: fa(t, t, t, layout="TND", atten_mask=mask, sparse_mode=3,
                                                  actual_seq_qlen=lens, actual_seq_kvlen=lens))
        ok_lens = lens[:1023] + (2 * 1100,)
        out["fa_varlen_1024"] = _error(lambda: fa(t, t, t, layout="TND", atten_mask=mask, sparse_mode=3,
                                                 actual_seq_qlen=ok_lens, actual_seq_kvlen=ok_lens))
        wide = torch.randn(1, 4, 1, 800, device="npu")
        out["fa_head_dim"] = _error(lambda: fa(wide, wide, wide, heads=1))
        out["fa_mixed_dtypes"] = _error(lambda: fa(q.npu().half(), k.npu(), v.npu()))
        out["fa_no_mask_causal"] = _error(lambda: fa(q.npu(), k.npu(), v.npu(), sparse_mode=3))
        qq = q.npu().requires_grad_()
        fa(qq, k.npu(), v.npu(), atten_mask=mask, sparse_mode=2).sum().backward()
        out["fa_backward"] = bool(qq.grad is not None and torch.isfinite(qq.grad.cpu()).all())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
