"""Load the model and tokenizer, apply LoRA, and compute the SFT loss efficiently.

The loss runs the decoder, keeps only the hidden states of positions that
have a target, and applies the output head to those in chunks, upcasting
one chunk of logits at a time. Prompt positions never reach the vocabulary
projection, and the full [tokens, vocab] logits are never materialised
(twice, as bf16 and fp32) the way a plain ``model(labels=...)`` does. The
cross-entropy turns the chunk's logits into their own gradient in place
(``_CrossEntropySum``) instead of running log_softmax and its backward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from provisioner.train.attention import FLASH
from provisioner.train.chatml import Example
from provisioner.train.config import ConfigError, TrainConfig
from provisioner.train.device import DeviceInfo, Precision
from provisioner.train.packing import Batch, collate_packed, collate_padded

CHECKPOINT_ALL = 1 << 30  # more layers than any model has: TrainConfig.checkpointed_layers's "all of them"


def load_tokenizer(path: str, trust_remote_code: bool = False) -> Any:
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    except Exception as exc:  # transformers raises many types for a bad directory
        raise ConfigError(f"config: tokenizer: cannot load a tokenizer from {path}: {_short(exc)}") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(cfg: TrainConfig, dev: DeviceInfo, prec: Precision, attn: str,
               checkpointed: int | None = None) -> nn.Module:
    """``checkpointed``: decoder layers to recompute in backward, as the memory plan decided
    (Plan.setup.checkpointed); None: what the config says without a plan (TrainConfig.checkpointed_layers)."""
    from transformers import AutoModelForCausalLM

    # Full fine-tuning keeps fp32 master weights (autocast does the bf16/fp16 math);
    # LoRA keeps the frozen base in the compute dtype and only the adapters in fp32.
    dtype = torch.float32 if cfg.method == "full" else prec.dtype
    try:
        model = AutoModelForCausalLM.from_pretrained(
            cfg.model, attn_implementation=attn, trust_remote_code=cfg.trust_remote_code
        )
    except (OSError, ValueError, ImportError) as exc:
        raise ConfigError(f"config: model: cannot load {cfg.model}: {_short(exc)}") from None
    # Cast after loading rather than through a dtype keyword whose name differs between releases.
    model.to(dtype)
    model.config.use_cache = False
    k = cfg.checkpointed_layers(CHECKPOINT_ALL) if checkpointed is None else checkpointed
    if k:
        enable_checkpointing(model, None if k == CHECKPOINT_ALL else k)
    if cfg.method == "lora":
        model = apply_lora(model, cfg)
    return model.to(dev.torch_device)


def enable_checkpointing(model: nn.Module, layers: int | None = None) -> None:
    """Recompute the first ``layers`` decoder layers in backward (None: all of them).

    transformers checkpoints each decoder layer whose own ``gradient_checkpointing`` flag is set
    (GradientCheckpointingLayer); enabling sets it on every layer, and the layers past the first ``layers``
    get it cleared. The first ones, because backward reaches them last: their recompute then runs after the
    other layers' activations are freed (memory.full_layers_live)."""
    # Non-reentrant checkpointing works with frozen inputs (LoRA) and with DDP.
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if layers is None:
        return
    blocks = decoder_layers(model)
    if layers >= len(blocks):
        return
    if not all(hasattr(b, "gradient_checkpointing") for b in blocks):
        raise ConfigError(f"config: gradient_checkpointing: {type(blocks[0]).__name__} layers cannot be"
                          f" checkpointed one by one; set true (all layers) or false")
    for block in blocks[layers:]:
        block.gradient_checkpointing = False


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a Hugging Face causal LM (under a PEFT wrapper too)."""
    base = inner_model(model)
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else base
    layers = getattr(decoder, "layers", None) or getattr(decoder, "h", None)
    if layers is None:
        raise ConfigError("config: model: cannot find this model's decoder layers")
    return list(layers)


def apply_lora(model: nn.Module, cfg: TrainConfig) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [m for m in cfg.lora.target_modules if m not in names]
    if missing:
        raise ConfigError(f"config: lora.target_modules: no module named {missing[0]!r} in {cfg.model}")
    lcfg = LoraConfig(
        r=cfg.lora.r,
        lora_alpha=cfg.lora.alpha,
        lora_dropout=cfg.lora.dropout,
        target_modules=list(cfg.lora.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(model, lcfg)
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()
    return model


def inner_model(model: nn.Module) -> nn.Module:
    """The transformers model under a PEFT wrapper (LoRA layers are injected in place)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


class SFTLoss(nn.Module):
    """Wraps the model so DDP/DeepSpeed see one forward that returns the summed token loss."""

    def __init__(self, model: nn.Module, chunk_tokens: int) -> None:
        super().__init__()
        self.model = model
        base = inner_model(model)
        # A tuple keeps these out of the module tree: they are already inside self.model.
        self._parts = (base.get_decoder(), base.get_output_embeddings())
        self.chunk_tokens = chunk_tokens

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        target_pos: torch.Tensor,
        target_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Summed cross-entropy over ``target_ids`` at the flat positions ``target_pos``."""
        decoder, head = self._parts
        out = decoder(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        )
        hidden = out.last_hidden_state
        h = hidden.reshape(-1, hidden.shape[-1]).index_select(0, target_pos)
        chunk = self.chunk_tokens or h.shape[0]
        if h.shape[0] <= chunk:
            return _ce_sum(head, h, target_ids)
        total = h.new_zeros((), dtype=torch.float32)
        for s in range(0, h.shape[0], chunk):
            # Recompute each chunk's logits in backward instead of keeping them all.
            part = checkpoint(_ce_sum, head, h[s : s + chunk], target_ids[s : s + chunk], use_reentrant=False)
            total = total + part
        return total


def _ce_sum(head: nn.Module, h: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    out: torch.Tensor = _CrossEntropySum.apply(head(h), t)
    return out


class _CrossEntropySum(torch.autograd.Function):
    """Summed cross-entropy of logits against targets ``t`` (every one a real target), in fp32.

    F.cross_entropy(logits.float(), reduction="sum") makes four passes over [tokens, vocab] fp32 beyond the
    logits themselves: log_softmax, and in backward a zero-filled one-hot gradient and log_softmax's
    backward. Here forward is one logsumexp and one softmax into a buffer that then becomes
    d(loss)/d(logits) = softmax - onehot in place, kept for backward (instead of log_softmax's output, the
    same size), and backward scales it in place. The head itself stays a module call (hooks of sharding
    strategies run), so this only replaces what follows it. One backward per forward, as the trainer does.
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        x = logits.float()
        lse = torch.logsumexp(x, dim=1)
        rows = torch.arange(t.shape[0], device=t.device)
        loss = (lse - x[rows, t]).sum()
        grad = (x - lse.unsqueeze(1)).exp_()  # softmax, in a new buffer
        grad[rows, t] -= 1.0
        ctx.save_for_backward(grad)
        ctx.logits_dtype = logits.dtype
        return loss

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, None]:
        (grad,) = ctx.saved_tensors
        return grad.mul_(grad_out).to(ctx.logits_dtype), None


def make_batch(
    examples: list[Example], rows: list[list[int]], packing: bool, pad_id: int, attn: str
) -> Batch:
    if packing:
        return collate_packed(examples, rows, pad_id, flat=attn in FLASH)
    return collate_padded(examples, [i for row in rows for i in row], pad_id)


def packing_works(loss_fn: SFTLoss, dev: DeviceInfo, ctx: Any, attn: str, vocab: int, tol: float) -> bool:
    """Does this model + attention keep packed samples apart? Compare a packed and an unpacked forward."""
    import numpy as np

    g = np.random.default_rng(0)
    exs = [Example(g.integers(0, vocab, n).astype(np.int32), np.ones(n, dtype=bool)) for n in (11, 7, 5)]
    was_training = loss_fn.training
    loss_fn.eval()
    try:
        with torch.no_grad(), ctx:
            packed = _run(loss_fn, make_batch(exs, [[0, 1, 2]], True, 0, attn), dev)
            apart = _run(loss_fn, make_batch(exs, [[0], [1], [2]], False, 0, attn), dev)
    finally:
        loss_fn.train(was_training)
    return abs(packed - apart) <= tol * max(1.0, abs(apart))


def _run(loss_fn: nn.Module, b: Batch, dev: DeviceInfo) -> float:
    b = b.to(dev.torch_device)
    return float(loss_fn(*b.inputs()))


@dataclass(frozen=True)
class FlopShape:
    """What the FLOP estimate needs to know about the model (see metrics.flops_per_step)."""

    body_params: int  # parameters in matmuls below the output head (LoRA adapters excluded)
    head_params: int
    adapter_params: int  # trainable LoRA parameters; 0 for full fine-tuning
    layers: int
    attn_width: int  # heads * head_dim
    full: bool


def flop_shape(model: nn.Module, full: bool) -> FlopShape:
    base = inner_model(model)
    cfg = base.config
    embed = base.get_input_embeddings().weight
    head = base.get_output_embeddings().weight
    seen: set[int] = set()
    body = adapters = 0
    for name, p in base.named_parameters():
        if id(p) in seen or p is embed or p is head:
            continue
        seen.add(id(p))
        if "lora_" in name:
            adapters += p.numel()
        elif p.dim() >= 2:
            body += p.numel()
    heads = getattr(cfg, "num_attention_heads", 1)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return FlopShape(body, head.numel(), adapters, cfg.num_hidden_layers, heads * head_dim, full)


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__
