"""torch_npu.npu_fusion_attention: signature, limits and semantics, computed on CPU.

Mirrors the op's schema (torch_npu/csrc/aten/npu_native_functions_by_codegen.yaml, func: npu_fusion_attention)
and its documentation (torch_npu/_op_plugin_docs.py, "npu_fusion_attention": 参数说明 and 约束说明):
layouts BSH, SBH, BSND, BNSD, TND (TND needs actual_seq_qlen/actual_seq_kvlen, cumulative lengths);
query/key/value of one dtype among float16, bfloat16, float32; D <= 768 with Dq == Dk >= Dv; Nq <= 256 and
Nq a multiple of Nkv; varlen (TND) at most 1K sequences per call ("varlen场景下长度最大支持1K") and
T <= 1M; atten_mask True = masked out, and for sparse_mode 2 (top-left causal) / 3 (bottom-right causal)
the compressed 2048x2048 upper-triangular mask; padding_mask not supported; sparse_mode 5 not in varlen;
supported on Atlas A2 training products (and A3), not on first-generation 910.
Returns (attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels).
"""

from __future__ import annotations

import torch

from . import _soc

LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")
MAX_VARLEN_SEQS = 1024
STATS = {"calls": 0, "dtypes": [], "max_seqs": 0, "layouts": []}


def _fail(msg: str) -> None:
    raise RuntimeError(f"npu_fusion_attention: {msg} (EZ1001: the operator's parameter check failed)")


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None, atten_mask=None,
                         scale=1.0, keep_prob=1.0, pre_tockens=2147483647, next_tockens=2147483647,
                         inner_precise=0, prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None,
                         sparse_mode=0, gen_mask_parallel=True, sync=False, softmax_layout="", sink=None):
    if not _soc.fusion_attention_supported():
        raise RuntimeError(f"npu_fusion_attention is not supported on {_soc.name()} (EZ9999: FlashAttentionScore "
                           "has no kernel for this SoC; it runs on Atlas A2/A3 training products)")
    for t in (query, key, value):
        if not isinstance(t, torch.Tensor) or t.device.type != "npu":
            _fail("query, key and value must be NPU tensors")
    if not query.dtype == key.dtype == value.dtype or query.dtype not in (torch.float16, torch.bfloat16,
                                                                         torch.float32):
        _fail(f"query/key/value dtypes must match and be float16, bfloat16 or float32, got "
              f"{query.dtype}/{key.dtype}/{value.dtype}")
    if input_layout not in LAYOUTS:
        _fail(f"input_layout must be one of {', '.join(LAYOUTS)}, got {input_layout!r}")
    if padding_mask is not None:
        _fail("padding_mask is not supported")
    if not 0.0 < keep_prob <= 1.0:
        _fail(f"keep_prob must be in (0, 1], got {keep_prob}")
    if sparse_mode not in range(9):
        _fail(f"sparse_mode must be 0..8, got {sparse_mode}")
    if sparse_mode in (2, 3, 4, 6, 7, 8) and atten_mask is None:
        _fail(f"sparse_mode {sparse_mode} needs the compressed atten_mask")
    if sparse_mode in (2, 3) and tuple(atten_mask.shape) != (2048, 2048):
        _fail(f"sparse_mode {sparse_mode} takes the optimised 2048x2048 lower-triangular atten_mask, got "
              f"{tuple(atten_mask.shape)}")
    if atten_mask is not None and atten_mask.dtype not in (torch.bool, torch.uint8):
        _fail(f"atten_mask must be bool or uint8, got {atten_mask.dtype}")

    q, k, v, seqs = _to_bnsd(query, key, value, head_num, input_layout, actual_seq_qlen, actual_seq_kvlen,
                             sparse_mode)
    nq, nkv, dq, dk, dv = q.shape[1], k.shape[1], q.shape[-1], k.shape[-1], v.shape[-1]
    if not 1 <= dq <= 768 or dq != dk or dk < dv:
        _fail(f"head dims must satisfy Dq == Dk >= Dv, 1..768; got {dq}/{dk}/{dv}")
    if not 1 <= nq <= 256 or nkv == 0 or nq % nkv:
        _fail(f"Nq must be 1..256 and a multiple of Nkv; got {nq}/{nkv}")
    STATS["calls"] += 1
    STATS["dtypes"].append(str(query.dtype).replace("torch.", ""))
    STATS["layouts"].append(input_layout)
    STATS["max_seqs"] = max(STATS["max_seqs"], sum(1 for (qs, qe), _ in seqs if qe > qs))

    params = (scale, keep_prob, atten_mask, sparse_mode, pre_tockens, next_tockens, pse)
    with torch.autocast("npu", enabled=False):
        if keep_prob == 1.0 and pse is None:
            out, softmax_max, softmax_sum = _Kernel.apply(q, k, v, seqs, params)
        else:  # dropout draws from the chip's generator and pse takes a gradient: op by op on the npu tensors
            out, softmax_max, softmax_sum = _spans(q, k, v, seqs, params)
        out = out.to(query.dtype)
    out = _from_bnsd(out, query, head_num, input_layout)
    empty = torch.empty(0, dtype=query.dtype, device=query.device)
    return out, softmax_max, softmax_sum, empty, 0, 0, 0


class _Kernel(torch.autograd.Function):
    """The op as one autograd node with its own backward, as on the chip (npu_fusion_attention_grad). Its math
    runs on the CPU data behind the npu tensors: a varlen call over a thousand sequences would otherwise send
    every op of every sequence through the backend's Python dispatch, forward, recomputed and backward."""

    @staticmethod
    def forward(ctx, q, k, v, seqs, params):
        from ._backend import NPUTensor

        mask = params[2]
        params = (*params[:2], mask.elem if isinstance(mask, NPUTensor) else mask, *params[3:])
        ctx.seqs, ctx.params = seqs, params
        ctx.save_for_backward(q, k, v)
        outs = _spans(q.elem, k.elem, v.elem, seqs, params)
        ctx.mark_non_differentiable(outs[1], outs[2])
        return tuple(NPUTensor(o, q.device) for o in outs)

    @staticmethod
    def backward(ctx, grad_out, _grad_max, _grad_sum):
        from ._backend import NPUTensor

        q, k, v = ctx.saved_tensors
        leaves = [t.elem.detach().requires_grad_() for t in (q, k, v)]
        with torch.enable_grad():
            out = _spans(*leaves, ctx.seqs, ctx.params)[0]
        grads = torch.autograd.grad(out, leaves, grad_out.elem)
        return (*(NPUTensor(g, q.device) for g in grads), None, None)


def _spans(q, k, v, seqs, params):
    """Attention within each (query span, key span) of `seqs`: fp32 output and the softmax statistics."""
    outs, maxes, sums = [], [], []
    # One split per tensor rather than a slice per sequence: a slice's backward zero-fills the whole tensor's
    # gradient, which with a thousand varlen sequences costs more than the attention itself.
    qlens = [qe - qs for (qs, qe), _ in seqs]
    kvlens = [ke - ks for _, (ks, ke) in seqs]
    parts = zip(torch.split(q, qlens, dim=2), torch.split(k, kvlens, dim=2), torch.split(v, kvlens, dim=2),
                strict=True)
    for qi, ki, vi in parts:
        if qi.shape[2] == 0:
            continue
        o, m, s = _attend(qi, ki, vi, *params)
        outs.append(o)
        maxes.append(m)
        sums.append(s)
    softmax_max = torch.cat(maxes, dim=2).unsqueeze(-1).expand(*maxes[0].shape[:2], -1, 8)
    softmax_sum = torch.cat(sums, dim=2).unsqueeze(-1).expand(*sums[0].shape[:2], -1, 8)
    return torch.cat(outs, dim=2), softmax_max, softmax_sum


def _to_bnsd(query, key, value, head_num, layout, qlens, kvlens, sparse_mode):
    """q/k/v as [B, N, S, D] (TND: B = 1, sequences as spans of S) and the spans to attend within."""
    if layout == "TND":
        if qlens is None or kvlens is None:
            _fail("input_layout TND needs actual_seq_qlen and actual_seq_kvlen")
        qlens, kvlens = [int(x) for x in qlens], [int(x) for x in kvlens]
        if len(qlens) != len(kvlens):
            _fail("actual_seq_qlen and actual_seq_kvlen must have the same length")
        if len(qlens) > MAX_VARLEN_SEQS:
            _fail(f"actual_seq_qlen has {len(qlens)} entries; varlen supports at most {MAX_VARLEN_SEQS}")
        if sparse_mode == 5:
            _fail("sparse_mode 5 is not supported in varlen")
        for lens, t, what in ((qlens, query, "actual_seq_qlen"), (kvlens, key, "actual_seq_kvlen")):
            if any(b < a for a, b in zip([0, *lens], lens, strict=False)) or not lens or lens[-1] != t.shape[0]:
                _fail(f"{what} must be cumulative lengths ending at T={t.shape[0]}, got {lens[:8]}...")
            if t.shape[0] > 1024 * 1024:
                _fail("T must be at most 1M")
        q, k, v = (t.permute(1, 0, 2).unsqueeze(0) for t in (query, key, value))
        spans_q = list(zip([0, *qlens[:-1]], qlens, strict=True))
        spans_k = list(zip([0, *kvlens[:-1]], kvlens, strict=True))
        # Every span, empty ones included, so that together they cover q and k/v end to end (split, above).
        return q, k, v, list(zip(spans_q, spans_k, strict=True))
    if layout == "BNSD":
        q, k, v = query, key, value
    elif layout == "BSND":
        q, k, v = (t.transpose(1, 2) for t in (query, key, value))
    else:
        def split(t):
            if layout == "SBH":
                t = t.transpose(0, 1)
            b, s, h = t.shape
            n = head_num if t is query or t.shape[-1] == query.shape[-1] else None
            d = query.shape[-1] // head_num
            n = h // d if n is None else n
            return t.reshape(b, s, n, d).transpose(1, 2)

        q, k, v = split(query), split(key), split(value)
    if q.shape[0] > 2 * 1024 * 1024:
        _fail("B must be at most 2M")
    return q, k, v, [((0, q.shape[2]), (0, k.shape[2]))]


def _from_bnsd(out, query, head_num, layout):
    if layout == "TND":
        return out.squeeze(0).permute(1, 0, 2)
    if layout == "BNSD":
        return out
    if layout == "BSND":
        return out.transpose(1, 2)
    b, n, s, d = out.shape
    flat = out.transpose(1, 2).reshape(b, s, n * d)
    return flat.transpose(0, 1) if layout == "SBH" else flat


def _attend(q, k, v, scale, keep_prob, atten_mask, sparse_mode, pre, nxt, pse):
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2))
    if pse is not None:
        scores = scores + pse.float()
    scores = scores * scale
    sq, skv = scores.shape[-2], scores.shape[-1]
    masked = None
    if sparse_mode in (2, 3, 4) and atten_mask is not None:
        i = torch.arange(sq, device=q.device).unsqueeze(1)
        j = torch.arange(skv, device=q.device).unsqueeze(0)
        shift = skv - sq if sparse_mode in (3, 4) else 0
        masked = j > i + shift  # causal: no key after the query (aligned top-left or bottom-right)
        if sparse_mode == 4:
            masked = masked | (j < i + shift - pre) | (j > i + shift + nxt)
    elif atten_mask is not None:
        masked = atten_mask.bool()
        if masked.dim() == 2:
            masked = masked[:sq, :skv]
    if masked is not None:
        scores = scores.masked_fill(masked, float("-inf"))
    row_max = scores.amax(dim=-1)
    probs = torch.softmax(scores, dim=-1)
    row_sum = torch.exp(scores - row_max.unsqueeze(-1)).sum(dim=-1)
    if keep_prob < 1.0:
        probs = torch.nn.functional.dropout(probs, p=1.0 - keep_prob)
    return torch.matmul(probs, v.float()), row_max, row_sum


