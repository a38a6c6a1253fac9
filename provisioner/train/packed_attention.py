"""Attention for packed rows where no varlen flash kernel exists: each packed sequence attends on its own.

With flash attention (CUDA flash-attn, Ascend npu_fusion_attention in TND
layout) transformers runs a packed row as separate sequences. With ``sdpa``
(CPU, and NPU stacks whose transformers does not map flash_attention_2 to
torch_npu) it builds a block-diagonal causal mask over the whole row and
computes all T x T scores, most of them masked: a row of 2048 tokens holding
ten samples does ten times the attention work its samples need. This
attention function reads the sequence starts from the position ids (they
restart at 0 for every packed sample) and runs causal SDPA per sequence, so
the work is the sum of the samples' own squares and no mask is built. The
sequences are split() out of a token-major view of the batch, so backward
joins their gradients in one concatenation (slices would zero-fill a whole
row per sequence), and grouped-query heads are passed to SDPA as they are
where torch's kernel takes the groups itself (enable_gqa), not repeated.

Right-padded rows (the unpacked path) need no mask either: under causal
attention a real token never sees the padding after it. Models with sliding
windows, soft-capping or other attention variants keep plain sdpa (``usable``).
"""

from __future__ import annotations

from typing import Any

NAME = "provision_packed_sdpa"
# Model types whose attention is plain causal softmax attention (rotary positions, GQA allowed).
PLAIN_CAUSAL = ("qwen2", "qwen3", "llama")
_cache: dict[str, Any] = {"ref": None, "segments": None}
_gqa: dict[tuple[Any, ...], bool] = {}


def usable(model_config: dict[str, Any]) -> bool:
    """Only for decoders whose attention this function reproduces exactly."""
    text = model_config.get("text_config")
    c: dict[str, Any] = text if isinstance(text, dict) else model_config
    if str(model_config.get("model_type") or c.get("model_type")) not in PLAIN_CAUSAL:
        return False
    layer_types = c.get("layer_types")
    if isinstance(layer_types, list) and any(t != "full_attention" for t in layer_types):
        return False
    if c.get("use_sliding_window") or (c.get("sliding_window") and "use_sliding_window" not in c):
        return False
    return not c.get("attn_logit_softcapping")


def register() -> bool:
    """Make NAME a transformers attention implementation (and one that builds no mask); False on
    transformers releases without the attention interfaces."""
    try:
        from transformers import AttentionInterface
    except ImportError:
        return False
    AttentionInterface.register(NAME, packed_sdpa_forward)
    try:
        from transformers.masking_utils import AttentionMaskInterface

        AttentionMaskInterface.register(NAME, _no_mask)
    except ImportError:  # older releases build a mask this function ignores
        pass
    return True


def _no_mask(*args: Any, **kwargs: Any) -> None:
    return None


def _segments(position_ids: Any) -> list[list[tuple[int, int]]]:
    """Per row, the (start, end) of every sequence: a new one begins wherever the position id is 0.
    Computed once per forward (every layer gets the same position_ids tensor)."""
    import weakref

    ref = _cache["ref"]
    # The same tensor object (not just the same address: a freed batch's memory is reused) and unchanged.
    if ref is None or ref() is not position_ids or _cache["version"] != position_ids._version:
        pos = position_ids.detach().to("cpu")
        rows = []
        for b in range(pos.shape[0]):
            starts = (pos[b] == 0).nonzero().flatten().tolist() or [0]
            if starts[0] != 0:
                starts.insert(0, 0)
            ends = starts[1:] + [pos.shape[1]]
            rows.append(list(zip(starts, ends, strict=True)))
        _cache.update(ref=weakref.ref(position_ids), version=position_ids._version, segments=rows)
    return _cache["segments"]


def packed_sdpa_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' attention-function signature: query [B, H, T, D], key/value [B, Hkv, T, D];
    returns [B, T, H, D]."""
    import torch
    import torch.nn.functional as F

    position_ids = kwargs.get("position_ids")
    if position_ids is None or query.shape[2] != key.shape[2]:  # no positions, or decoding with a cache
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    B, H, T, D = query.shape
    segments = _segments(position_ids)
    if len(segments) != B:  # one row of positions shared by the batch
        segments = segments[:1] * B
    lengths = [e - s for segs in segments for s, e in segs]
    native_gqa = key.shape[1] != H and _native_gqa(query, key)
    if key.shape[1] != H and not native_gqa:  # grouped-query attention: repeat the key/value heads (as repeat_kv)
        key = key.repeat_interleave(H // key.shape[1], dim=1)
        value = value.repeat_interleave(H // value.shape[1], dim=1)
    gqa = {"enable_gqa": True} if native_gqa else {}
    p = dropout if module.training else 0.0
    # Every row's sequences end to end, token-major ([B*T, heads, D]: the layout the projections wrote, so
    # mostly views): split() into the sequences is one concatenation in backward, where slicing each
    # sequence out of the row would zero-fill and add a whole row's gradient per sequence.
    q, k, v = (x.transpose(1, 2).reshape(B * T, x.shape[1], D).split(lengths) for x in (query, key, value))
    parts = [
        F.scaled_dot_product_attention(
            qs.transpose(0, 1).unsqueeze(0), ks.transpose(0, 1).unsqueeze(0), vs.transpose(0, 1).unsqueeze(0),
            dropout_p=p, is_causal=True, scale=scaling, **gqa,
        )[0].transpose(0, 1)
        for qs, ks, vs in zip(q, k, v, strict=True)
    ]
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=0)
    return out.reshape(B, T, H, D), None


def _native_gqa(query: Any, key: Any) -> bool:
    """Does this torch run grouped-query SDPA (enable_gqa) on this device with the same kernel as plain SDPA,
    without repeating the key/value heads? Asked once per device type and dtype, of torch itself."""
    cache_key = (query.device.type, query.dtype, query.shape[1], key.shape[1])
    if cache_key not in _gqa:
        import torch

        try:
            q = torch.zeros((1, query.shape[1], 2, query.shape[3]), dtype=query.dtype, device=query.device)
            k = torch.zeros((1, key.shape[1], 2, key.shape[3]), dtype=key.dtype, device=key.device)
            grouped = torch._fused_sdp_choice(q, k, k, is_causal=True, enable_gqa=True)
            kr = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            _gqa[cache_key] = grouped == torch._fused_sdp_choice(q, kr, kr, is_causal=True)
        except Exception:  # a torch without enable_gqa or without the choice function: repeat the heads
            _gqa[cache_key] = False
    return _gqa[cache_key]
