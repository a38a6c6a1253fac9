"""The loss path on a real tiny Qwen2: packed == unpacked == transformers' own loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from provisioner.train.chatml import tokenize
from provisioner.train.config import QWEN25_SYSTEM_PROMPT, ConfigError, from_dict
from provisioner.train.data import to_conversation
from provisioner.train.device import DeviceInfo, Precision
from provisioner.train.model import SFTLoss, flop_shape, load_model, make_batch, packing_works
from tests.train.conftest import alpaca_records

CPU = DeviceInfo("cpu", 0, "gloo", "cpu")
FP32 = Precision("fp32", False)


@pytest.fixture(scope="module")
def examples(tokenizer):
    convs = [to_conversation(r, f"r:{i}") for i, r in enumerate(alpaca_records(8))]
    return tokenize(convs, tokenizer, 512, QWEN25_SYSTEM_PROMPT)[0]


def _model(tiny_model_dir, attn="sdpa", method="full", **extra):
    cfg = from_dict(
        {
            "model": str(tiny_model_dir),
            "data": ["x"],
            "output_dir": "x",
            "method": method,
            "gradient_checkpointing": False,
            **extra,
        }
    )
    return load_model(cfg, CPU, FP32, attn)


def _loss_and_grad(loss_fn, batch):
    loss_fn.zero_grad()
    loss = loss_fn(*batch.inputs())
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in loss_fn.parameters() if p.grad is not None])
    return loss.item(), grads


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_packed_and_unpacked_batches_give_the_same_loss_and_gradients(
    tiny_model_dir, tokenizer, examples, attn
):
    loss_fn = SFTLoss(_model(tiny_model_dir, attn), chunk_tokens=0)
    pad = tokenizer.pad_token_id
    packed = make_batch(examples, [[0, 1, 2, 3], [4, 5, 6, 7]], True, pad, attn)
    unpacked = make_batch(examples, [[i] for i in range(8)], False, pad, attn)
    assert packed.input_ids.numel() < unpacked.input_ids.numel()  # packing removed padding
    lp, gp = _loss_and_grad(loss_fn, packed)
    lu, gu = _loss_and_grad(loss_fn, unpacked)
    assert packed.n_targets == unpacked.n_targets
    assert lp == pytest.approx(lu, rel=1e-5)
    assert ((gp - gu).norm() / gu.norm()).item() < 1e-5  # float rounding only
    # Control: if positions did not restart, samples would attend to each other and the loss would move.
    leaky = make_batch(examples, [[0, 1, 2, 3], [4, 5, 6, 7]], True, pad, attn)
    leaky.position_ids = torch.arange(leaky.input_ids.shape[1]).expand_as(leaky.input_ids).clone()
    assert leaky.target_pos.tolist() == packed.target_pos.tolist()
    ll, _ = _loss_and_grad(loss_fn, leaky)
    assert abs(ll - lu) > 1e-3 * abs(lu)
    assert packing_works(loss_fn, CPU, torch.no_grad(), attn, len(tokenizer), tol=1e-4)


def test_loss_equals_transformers_own_loss(tiny_model_dir, tokenizer, examples):
    model = _model(tiny_model_dir)
    ours = SFTLoss(model, chunk_tokens=0)
    batch = make_batch(examples, [[0, 1, 2, 3, 4, 5, 6, 7]], True, tokenizer.pad_token_id, "sdpa")
    with torch.no_grad():
        total = ours(*batch.inputs()).item()
        ref_sum = 0.0
        for ex in examples:
            ids = torch.from_numpy(ex.ids.astype(np.int64))[None]
            labels = torch.where(torch.from_numpy(ex.trained)[None], ids, torch.tensor(-100))
            ref_sum += model(input_ids=ids, labels=labels).loss.item() * ex.n_targets
    assert total == pytest.approx(ref_sum, rel=1e-5)


def test_chunked_loss_matches_one_shot(tiny_model_dir, tokenizer, examples):
    model = _model(tiny_model_dir)
    batch = make_batch(examples, [[0, 1, 2, 3], [4, 5, 6, 7]], True, tokenizer.pad_token_id, "sdpa")
    l1, g1 = _loss_and_grad(SFTLoss(model, chunk_tokens=0), batch)
    l2, g2 = _loss_and_grad(SFTLoss(model, chunk_tokens=16), batch)
    # fp32 sums in another order: ~1e-6 apart on some CPUs; a wrong chunking is off by far more.
    assert l1 == pytest.approx(l2, rel=1e-6)
    assert ((g1 - g2).norm() / g1.norm()).item() < 1e-5


def test_lora_wraps_only_the_targets_and_counts_flops(tiny_model_dir):
    model = _model(tiny_model_dir, method="lora")
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable} == {"q_proj", "v_proj"}  # ...q_proj.lora_A.default.weight
    assert all(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad)
    shape = flop_shape(model, full=False)
    # 2 layers x (q, v) x (A: r x 64, B: out x r), r = 8; q out 64, v out 32 (2 kv heads x 16)
    assert shape.adapter_params == 2 * (8 * 64 + 64 * 8 + 8 * 64 + 32 * 8)
    assert shape.head_params == 151669 * 64 and shape.layers == 2 and shape.attn_width == 64
    with pytest.raises(ConfigError, match="no module named 'qkv'"):
        _model(tiny_model_dir, method="lora", lora={"target_modules": ["qkv"]})


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_head_cross_entropy_equals_torch_and_skips_log_softmax(dtype):
    """The head's loss: F.cross_entropy's sum and gradients (fp32 math on bf16 logits too), without
    log_softmax's passes over [targets, vocab] (forward, zero-filled one-hot and log_softmax backward)."""
    import torch.nn.functional as F
    from torch.profiler import profile

    from provisioner.train.model import _ce_sum

    torch.manual_seed(0)
    head = torch.nn.Linear(64, 5000, bias=False).to(dtype)
    h = torch.randn(300, 64, dtype=dtype, requires_grad=True)
    t = torch.randint(0, 5000, (300,))
    with profile() as prof:
        ours = _ce_sum(head, h, t)
        ours.backward(torch.tensor(0.7))
    grads = (h.grad.clone(), head.weight.grad.clone())
    h.grad = head.weight.grad = None
    ref = F.cross_entropy(head(h).float(), t, reduction="sum")
    ref.backward(torch.tensor(0.7))
    assert ours.dtype == torch.float32 and ours.item() == pytest.approx(ref.item(), rel=1e-6)
    for mine, theirs in zip(grads, (h.grad, head.weight.grad), strict=True):
        assert mine.dtype == theirs.dtype
        assert ((mine.float() - theirs.float()).norm() / theirs.float().norm()).item() < 1e-5
    calls = {e.key for e in prof.key_averages()}
    assert not calls & {"aten::_log_softmax", "aten::_log_softmax_backward_data", "aten::nll_loss_backward"}, calls


# ---- gradient_checkpointing: k of L layers (issue 27.8) -----------------------------------------------------

def _recomputes(loss_fn, batch) -> list[int]:
    """Forward calls of each decoder layer's MLP during one forward and backward: 2 where the layer is
    recomputed in backward, 1 where its activations were kept."""
    from provisioner.train.model import decoder_layers

    layers = decoder_layers(loss_fn.model)
    calls = [0] * len(layers)

    def counted(i: int, forward):
        def run(*args, **kwargs):
            calls[i] += 1
            return forward(*args, **kwargs)

        return run

    # The forward itself, not a forward hook: the recompute in backward runs without module hooks.
    for i, layer in enumerate(layers):
        layer.mlp.forward = counted(i, layer.mlp.forward)
    loss_fn.train()  # transformers checkpoints in training mode only
    try:
        loss_fn.zero_grad()
        loss_fn(*batch.inputs()).backward()
    finally:
        for layer in layers:
            del layer.mlp.forward
    return calls


def test_k_checkpointed_layers_recompute_exactly_the_first_k(tmp_path, tokenizer, examples):
    from tests.train.conftest import build_tiny_model

    four = build_tiny_model(tmp_path / "four", tokenizer, layers=4)
    batch = make_batch(examples, [[0, 1], [2, 3]], True, tokenizer.pad_token_id, "sdpa")
    seen = {}
    for gc in (1, 3):  # true and false: every layer recomputes, or none (the other tests' runs)
        loss_fn = SFTLoss(_model(four, gradient_checkpointing=gc), chunk_tokens=0)
        seen[gc] = _recomputes(loss_fn, batch)
    assert seen == {1: [2, 1, 1, 1], 3: [2, 2, 2, 1]}  # the first k: backward reaches them last
    # LoRA (PEFT wraps the model after the flags are set), with the memory plan's choice passed as a number,
    # which overrides the config's setting.
    cfg = from_dict({"model": str(four), "data": ["x"], "output_dir": "x", "method": "lora",
                     "gradient_checkpointing": "auto"})
    loss_fn = SFTLoss(load_model(cfg, CPU, FP32, "sdpa", checkpointed=2), chunk_tokens=0)
    assert _recomputes(loss_fn, batch) == [2, 2, 1, 1]
