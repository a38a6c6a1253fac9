"""Per-sequence attention for packed rows: the same losses and gradients as transformers' masked sdpa,
without the row-wide mask, and only for models whose attention it reproduces."""

from __future__ import annotations

import copy
import time

import numpy as np
import pytest
import torch

from provisioner.train import packed_attention as pa
from provisioner.train.chatml import Example
from provisioner.train.model import SFTLoss, make_batch


@pytest.fixture(scope="module")
def models():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    assert pa.register()
    cfg = Qwen2Config(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                      attn_implementation="sdpa")
    torch.manual_seed(0)
    plain = Qwen2ForCausalLM(cfg)
    packed = copy.deepcopy(plain)
    packed.set_attn_implementation(pa.NAME)
    return plain, packed


def _examples(lengths, seed=0):
    g = np.random.default_rng(seed)
    return [Example(g.integers(0, 1000, n).astype(np.int32), np.ones(n, dtype=bool)) for n in lengths]


@pytest.mark.parametrize(("packing", "rows"), [(True, [[0, 1, 2], [3, 4]]), (False, [[0], [1], [2]])])
def test_same_loss_and_gradients_as_masked_sdpa(models, packing, rows):
    plain, packed = models
    batch = make_batch(_examples((50, 37, 21, 60, 12)), rows, packing, 0, "sdpa")
    losses, grads = [], []
    for model in (plain, packed):
        model.zero_grad()
        loss = SFTLoss(model, 0)(*batch.inputs())
        loss.backward()
        losses.append(float(loss))
        grads.append(model.model.layers[0].self_attn.q_proj.weight.grad.clone())
    assert losses[0] == pytest.approx(losses[1], rel=1e-6)
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=1e-5)


def test_segments_follow_each_batch_not_a_reused_address(models):
    _, packed = models
    seen = []
    for lengths in ((30, 20, 14), (10, 54)):  # same row width, different sequences
        batch = make_batch(_examples(lengths), [[0, 1, 2] if len(lengths) == 3 else [0, 1]], True, 0, "sdpa")
        with torch.no_grad():
            packed.model(input_ids=batch.input_ids, position_ids=batch.position_ids)
        seen.append(pa._cache["segments"])
        del batch
    assert seen == [[[(0, 30), (30, 50), (50, 64)]], [[(0, 10), (10, 64)]]]


def test_cheaper_than_the_masked_row():
    """The reason it exists: a row of 2048 tokens holding 16 samples (fwd + bwd)."""
    import torch.nn.functional as F

    class Attn(torch.nn.Module):
        training = True

    H, D, T, n = 8, 64, 2048, 16
    q, k, v = (torch.randn(1, H, T, D, requires_grad=True) for _ in range(3))
    pos = torch.arange(T).remainder(T // n).unsqueeze(0)
    seg = torch.arange(T) // (T // n)
    mask = (seg[:, None] == seg[None, :]) & (torch.arange(T)[:, None] >= torch.arange(T)[None, :])

    def masked():
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()

    def per_sequence():
        pa.packed_sdpa_forward(Attn(), q, k, v, None, position_ids=pos)[0].sum().backward()

    # CPU time on one thread, best of five: other processes on a shared machine slow the wall clock (and make
    # idle worker threads spin), not the work itself.
    best = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for fn in (masked, per_sequence) * 5:
            t = time.process_time()
            fn()
            best[fn.__name__] = min(best.get(fn.__name__, 1e9), time.process_time() - t)
    finally:
        torch.set_num_threads(threads)
    assert best["per_sequence"] < best["masked"] / 2, best


def test_backward_costs_no_whole_row_per_sequence():
    """Slicing each sequence out of the row made backward zero-fill a whole row's gradient and add it up, per
    sequence and per q/k/v (~3 row-sized fills and adds per sequence per layer: a quarter of a packed step's CPU
    time at hidden 512). split() gives one concatenation instead; and grouped-query attention repeats no heads
    where torch's kernel takes the groups itself."""
    from torch.profiler import profile

    class Attn(torch.nn.Module):
        training = True

    H, D, T, n = 8, 64, 1024, 32
    q = torch.randn(1, H, T, D, requires_grad=True)
    k, v = (torch.randn(1, 2, T, D, requires_grad=True) for _ in range(2))
    pos = torch.arange(T).remainder(T // n).unsqueeze(0)
    pa.packed_sdpa_forward(Attn(), q, k, v, None, position_ids=pos)  # any one-off probe happens here
    with profile() as prof:
        pa.packed_sdpa_forward(Attn(), q, k, v, None, position_ids=pos)[0].sum().backward()
    calls = {e.key: e.count for e in prof.key_averages()}
    assert calls.get("aten::slice_backward", 0) == 0, calls
    assert calls.get("aten::fill_", 0) + calls.get("aten::add_", 0) < n, calls
    if pa._native_gqa(q, k):
        assert calls.get("aten::repeat_interleave", 0) == 0, calls


def test_only_for_plain_causal_attention():
    assert pa.usable({"model_type": "qwen2", "sliding_window": 4096, "use_sliding_window": False})
    assert pa.usable({"model_type": "llama"})
    assert not pa.usable({"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096})
    assert not pa.usable({"model_type": "mistral", "sliding_window": 4096})
    assert not pa.usable({"model_type": "gemma2"})
    assert not pa.usable({"model_type": "qwen3", "layer_types": ["full_attention", "sliding_attention"]})
