"""The memory plan's estimate: per-device bytes of a run, from the model's config.json alone (no weights).

Weights, gradients, optimizer state, activations (with and without
checkpointing), the output head's logits and the strategy's buffers, for the
method, precision, strategy, world size, sequence length and micro-batch of a
config. memory_fit.py holds it against the card's HBM from the matrix, finds
the smallest change that fits, and measures the real peak. No torch here:
``provision-train --check`` prints the plan.

The numbers the formulas use (bytes per state, activation coefficients,
DeepSpeed buckets) are data: memory.yaml; what an optimizer step keeps alive on a device is
matrices/train_memory.yaml (optimizer_temporaries, with its sources).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from provisioner.train.config import ConfigError, TrainConfig

FACTS_FILE = Path(__file__).with_name("memory.yaml")
GIB = 1024**3
_LORA_IO = {  # (input width, output width) of each projection a LoRA adapter can target
    "q_proj": ("h", "q"),
    "k_proj": ("h", "kv"),
    "v_proj": ("h", "kv"),
    "o_proj": ("q", "h"),
    "gate_proj": ("h", "i"),
    "up_proj": ("h", "i"),
    "down_proj": ("i", "h"),
}


@lru_cache(maxsize=1)
def facts() -> dict[str, Any]:
    return yaml.safe_load(FACTS_FILE.read_text())


def optimizer_temporaries(optimizer: str) -> tuple[int, str]:
    """(fp32 copies of the trainable parameters, what they are): the most an optimizer step of this kind keeps
    alive at once on a device, from matrices/train_memory.yaml."""
    from provisioner.matrix import loader

    rows = [r for r in loader.load().rows("optimizer_temporaries") if r["optimizer"] == optimizer]
    if not rows:
        return 0, ""
    top = max(rows, key=lambda r: r["copies"])
    label = {"torch_foreach": "foreach AdamW", "npu_fused_adamw": "NpuFusedAdamW"}.get(optimizer, optimizer)
    others = [r for r in rows if r is not top]
    tail = "; the first step's copy is smaller" if any(r["step"] == "first" for r in others) else ""
    return top["copies"], f"{label}: {top['copies']} fp32 copies on {top['step']} step{tail}"


# ---- the model, from config.json ---------------------------------------------------------------


@dataclass(frozen=True)
class ModelShape:
    model_type: str
    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    tied: bool
    qkv_bias: bool
    qk_norm: bool
    known_type: bool

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        h, q, kv, i = self.hidden, self.q_width, self.kv_width, self.intermediate
        attn = h * q + 2 * h * kv + q * h + ((q + 2 * kv) if self.qkv_bias else 0)
        norms = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
        return attn + 3 * h * i + norms

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden

    @property
    def head_params(self) -> int:
        return 0 if self.tied else self.vocab * self.hidden

    @property
    def params(self) -> int:
        return self.embed_params + self.head_params + self.layers * self.layer_params + self.hidden

    def lora_params(self, r: int, targets: list[str]) -> int:
        width = {"h": self.hidden, "q": self.q_width, "kv": self.kv_width, "i": self.intermediate}
        per_layer = sum(r * (width[_LORA_IO[t][0]] + width[_LORA_IO[t][1]]) for t in targets if t in _LORA_IO)
        return self.layers * per_layer


def read_model_config(model_dir: str | os.PathLike) -> dict[str, Any]:
    path = Path(model_dir) / "config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"config: model: cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config: model: {path} is not a JSON object")
    return data


def model_shape(config: dict[str, Any]) -> ModelShape:
    """The decoder's dimensions; multimodal configs nest them under text_config."""
    text = config.get("text_config")
    c: dict[str, Any] = text if isinstance(text, dict) else config
    need = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    missing = [k for k in need if not isinstance(c.get(k), int)]
    if missing:
        raise ConfigError(f"config: model: config.json lacks {missing[0]} (not a decoder-only transformer?)")
    mtype = str(config.get("model_type") or c.get("model_type") or "")
    arch = facts()["architectures"].get(mtype)
    known = arch is not None
    arch = arch or {}
    if arch.get("moe") or c.get("num_experts") or c.get("num_local_experts"):
        raise ConfigError(f"config: model: the memory plan does not cover mixture-of-experts models ({mtype})")
    bias = arch.get("qkv_bias", c.get("attention_bias", False))
    if isinstance(bias, str):
        bias = bool(c.get(bias, False))
    heads = c["num_attention_heads"]
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    return ModelShape(
        model_type=mtype,
        vocab=c["vocab_size"],
        hidden=c["hidden_size"],
        layers=c["num_hidden_layers"],
        heads=heads,
        kv_heads=c.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        intermediate=c["intermediate_size"],
        tied=bool(config.get("tie_word_embeddings", c.get("tie_word_embeddings", False))),
        qkv_bias=bool(bias),
        qk_norm=bool(arch.get("qk_norm", False)),
        known_type=known,
    )


# ---- what the run does --------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """The plan's view of a config (plus the resolved precision, world size and attention)."""

    tuning: str  # full | lora
    objective: str  # sft | grpo
    precision: str  # fp32 | bf16 | fp16
    strategy: str
    world: int
    seq: int  # tokens per row
    micro_batch: int
    checkpointed: int  # decoder layers recomputed in backward, the first ones (0: none)
    layers: int  # decoder layers of the model
    offload_optimizer: bool
    offload_params: bool
    loss_chunk_tokens: int
    flash: bool  # flash attention (no mask, no scores kept)
    eager: bool
    lora_r: int = 8
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")
    lora_dropout: bool = True
    max_targets: int | None = None  # target tokens in the fullest micro-batch, from the data (None: all tokens)
    # the device optimizer whose step temporaries count (matrices/train_memory.yaml optimizer_temporaries):
    # torch_foreach, npu_fused_adamw, or "" (in place, DeepSpeed's, on the CPU, or TRL's)
    optimizer: str = ""
    # GRPO
    prompt_len: int = 0
    completion_len: int = 0
    gen_batch: int = 0  # completions generated at once per device
    reference: bool = False  # a frozen reference forward (beta > 0)
    vllm_fraction: float = 0.0

    def describe(self) -> str:
        what = f"GRPO ({self.tuning})" if self.objective == "grpo" else self.tuning
        off = [n for n, on in (("optimizer", self.offload_optimizer), ("params", self.offload_params)) if on]
        return (
            f"{what}, {self.precision}, {self.strategy} x{self.world}"
            + (f" (offload {' + '.join(off)})" if off else "")
            + f", seq {self.seq}, micro-batch {self.micro_batch}, checkpointing {self.checkpointing_words()}"
        )

    def checkpointing_words(self) -> str:
        if self.checkpointed >= self.layers:
            return "on"
        return "off" if self.checkpointed == 0 else f"{self.checkpointed} of {self.layers} layers"


def setup_from_config(
    cfg: TrainConfig,
    world: int,
    precision: str,
    attn: str | None = None,
    device_type: str = "npu",
    max_targets: int | None = None,
    vllm: bool | None = None,
    layers: int = 0,
    checkpointed: int | None = None,
) -> Setup:
    """``vllm``: the rollout is colocated vLLM (decided by requirements.vllm_rollout for ``rollout: auto``);
    None counts it for ``rollout: vllm`` only. ``layers``: the model's decoder layers; ``checkpointed``: how
    many of them recompute (None: what the config says without a plan, TrainConfig.checkpointed_layers)."""
    if attn is None:
        attn = "sdpa" if device_type == "cpu" else "flash_attention_2"
    g = cfg.grpo
    grpo = cfg.method == "grpo"
    fsdp_offload = cfg.strategy == "fsdp" and (cfg.offload_params or cfg.resolved_offload_optimizer())
    seq = g.max_prompt_len + g.max_completion_len if grpo else cfg.max_seq_len
    if vllm is None:
        vllm = g.rollout == "vllm"
    offload = cfg.strategy != "ddp" and (cfg.resolved_offload_optimizer() or fsdp_offload)
    optimizer = ""
    if not grpo and device_type != "cpu" and not offload:
        if cfg.strategy == "fsdp":
            optimizer = "torch_foreach"  # fsdp.py: torch.optim.AdamW(foreach=True) on a device
        elif cfg.strategy == "ddp" and device_type == "npu":
            # optim.py: NpuFusedAdamW for auto/npu_fused_adamw on an NPU; torch AdamW (foreach) for adamw
            optimizer = "torch_foreach" if cfg.optimizer == "adamw" else "npu_fused_adamw"
    return Setup(
        tuning=cfg.tuning,
        objective="grpo" if grpo else "sft",
        precision=precision,
        strategy=cfg.strategy,
        world=max(1, world),
        seq=seq,
        micro_batch=cfg.micro_batch_size,
        checkpointed=cfg.checkpointed_layers(layers) if checkpointed is None else checkpointed,
        layers=layers,
        # FSDP2's CPUOffloadPolicy moves parameters, gradients and the step together.
        offload_optimizer=offload,
        offload_params=cfg.offload_params or fsdp_offload,
        loss_chunk_tokens=cfg.loss_chunk_tokens,
        flash=attn.startswith("flash") or attn == "provision_packed_sdpa",  # no mask, no scores kept
        eager=attn == "eager",
        lora_r=cfg.lora.r,
        lora_targets=tuple(cfg.lora.target_modules),
        lora_dropout=cfg.lora.dropout > 0,
        max_targets=max_targets,
        optimizer=optimizer,
        prompt_len=g.max_prompt_len if grpo else 0,
        completion_len=g.max_completion_len if grpo else 0,
        gen_batch=cfg.micro_batch_size * cfg.gradient_accumulation_steps if grpo else 0,
        reference=grpo and g.beta > 0 and g.tuning == "full",
        vllm_fraction=g.vllm_memory_fraction if grpo and vllm else 0.0,
    )


# ---- the plan -----------------------------------------------------------------------------------


ALL = ("backward", "optimizer step", "generation")
BWD = ("backward",)
FWD = ("backward", "generation")
GEN = ("generation",)


@dataclass
class Item:
    name: str
    bytes: float
    note: str = ""
    phases: tuple[str, ...] = ALL  # the phases of a step during which it is allocated


@dataclass
class Plan:
    setup: Setup
    shape: ModelShape
    items: list[Item]
    activations_without_checkpointing: float
    host_bytes: float  # offloaded to host memory, per device
    reserve: float
    capacity: float | None = None
    capacity_label: str = ""
    held: float = 0.0  # what the device holds before the run (an idle chip's runtime, other processes)
    held_label: str = ""
    suggestion: list[str] = field(default_factory=list)
    suggestion_total: float | None = None
    checkpointing_why: str = ""  # how gradient_checkpointing: auto chose the checkpointed layers ("": not auto)


    def checkpointing(self, setting: Any) -> dict[str, Any]:
        """What the run recomputes: k of the model's decoder layers (the first ones), and why (summary.json)."""
        return {"setting": setting, "checkpointed_layers": self.setup.checkpointed, "layers": self.setup.layers,
                "why": self.checkpointing_why or None}
    def phase_bytes(self, phase: str) -> float:
        return sum(i.bytes for i in self.items if phase in i.phases)

    @property
    def phases(self) -> list[str]:
        return [ph for ph in ALL if ph != "generation" or self.setup.objective == "grpo"]

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phase_bytes)

    @property
    def total(self) -> float:
        return self.phase_bytes(self.peak_phase) + self.reserve

    @property
    def available(self) -> float | None:
        """The capacity less what the device holds before the run."""
        return None if self.capacity is None else self.capacity - self.held

    @property
    def fits(self) -> bool | None:
        return None if self.available is None else self.total <= self.available

    def to_dict(self) -> dict[str, Any]:
        return {
            "setup": self.setup.describe(),
            "params": self.shape.params,
            "per_device_gib": {i.name: round(i.bytes / GIB, 3) for i in self.items},
            "phases_gib": {ph: round(self.phase_bytes(ph) / GIB, 3) for ph in self.phases},
            "reserve_gib": round(self.reserve / GIB, 3),
            "total_gib": round(self.total / GIB, 3),
            "peak_phase": self.peak_phase,
            "activations_without_checkpointing_gib": round(self.activations_without_checkpointing / GIB, 3),
            "checkpointed_layers": self.setup.checkpointed,
            "layers": self.setup.layers,
            "checkpointing_why": self.checkpointing_why or None,
            "host_offload_gib": round(self.host_bytes / GIB, 3),
            "capacity_gib": None if self.capacity is None else round(self.capacity / GIB, 3),
            "held_gib": round(self.held / GIB, 3),
            "held_by": self.held_label or None,
            "available_gib": None if self.available is None else round(self.available / GIB, 3),
            "device": self.capacity_label or None,
            "fits": self.fits,
            "suggestion": self.suggestion or None,
            "suggestion_total_gib": None if self.suggestion_total is None else round(self.suggestion_total / GIB, 3),
        }

    def lines(self) -> list[str]:
        s = self.shape
        out = [
            f"memory plan per device: {s.model_type or 'model'} {s.params / 1e9:.2f}B parameters; {self.setup.describe()}"
        ]
        for i in self.items:
            when = "" if set(self.phases) <= set(i.phases) else f" [{', '.join(p for p in i.phases if p in self.phases)}]"
            out.append(f"  {i.name:<18}{i.bytes / GIB:9.2f} GiB" + (f"  ({i.note}){when}" if i.note else when))
        if self.reserve:
            out.append(f"  {'runtime reserve':<18}{self.reserve / GIB:9.2f} GiB")
        where = f" of {self.capacity / GIB:.1f} GiB ({self.capacity_label})" if self.capacity else ""
        if self.capacity and self.held:
            where = (f" of {(self.available or 0) / GIB:.1f} GiB ({self.capacity_label} {self.capacity / GIB:.1f} GiB"
                     f" less {self.held / GIB:.2f} GiB {self.held_label})")
        verdict = {None: "", True: ": fits", False: ": does not fit"}[self.fits]
        out.append(f"  {'total':<18}{self.total / GIB:9.2f} GiB{where}{verdict}  [peak: {self.peak_phase}]")
        if self.setup.checkpointed:
            out.append(f"  (activations without checkpointing: {self.activations_without_checkpointing / GIB:.2f} GiB)")
        if self.checkpointing_why:
            out.append(f"  checkpointing: {self.checkpointing_why}")
        if self.host_bytes:
            out.append(f"  (host memory for offloaded state: {self.host_bytes / GIB:.2f} GiB per device)")
        if self.suggestion:
            out.append(
                f"  smallest change that fits: {' '.join(self.suggestion)} (total {(self.suggestion_total or 0) / GIB:.2f} GiB)"
            )
        return out


def _act_mode(su: Setup) -> str:
    if su.precision == "fp32":
        return "fp32"
    if su.strategy == "fsdp" or su.tuning == "lora" or su.strategy in ("zero2", "zero3"):
        return "bf16"  # compute weights are 16-bit (frozen base, FSDP's bf16 copies, DeepSpeed's bf16 model)
    return "mixed"


def _per_token_layer(shape: ModelShape, coef: dict[str, float]) -> float:
    return (
        coef.get("per_hidden", 0) * shape.hidden
        + coef.get("per_intermediate", 0) * shape.intermediate
        + coef.get("per_kv", 0) * shape.kv_width
        + coef.get("per_head", 0) * shape.heads
        + coef.get("per_rope_dim", 0) * shape.head_dim / max(1, shape.layers)
        + coef.get("fixed", 0)
    )


def full_layers_live(layers: int, checkpointed: int) -> int:
    """Decoder layers whose full activations (and, under autocast, 16-bit weight copies) are alive at once.

    The first ``checkpointed`` layers recompute (model.enable_checkpointing), so backward reaches them last:
    by then the other layers' activations are freed, and one recomputed layer is alive at a time. The peak
    is the end of forward (the uncheckpointed layers) or one recompute, whichever holds more."""
    if checkpointed <= 0:
        return layers
    return max(layers - checkpointed, 1)


def estimate(shape: ModelShape, su: Setup, device_type: str = "npu") -> Plan:
    f = facts()
    B = f["bytes_per_element"]
    b = B["fp32"] if su.precision == "fp32" else B[su.precision]
    W = su.world
    psi = shape.params
    lora = su.tuning == "lora"
    trainable = shape.lora_params(su.lora_r, list(su.lora_targets)) if lora else psi
    frozen = psi if lora else 0
    sharded = su.strategy in ("fsdp", "zero3")
    ds = su.strategy in ("zero2", "zero3")
    dsf = f["deepspeed"]
    items: list[Item] = []
    host = 0.0

    # Weights.
    if lora:
        w = frozen * b / (W if sharded else 1) + trainable * 4
        note = f"frozen base in {su.precision}, adapters fp32"
    elif ds:
        w = psi * b / (W if su.strategy == "zero3" else 1)
        note = f"{su.precision} model; fp32 master copy with the optimizer"
    else:
        w = psi * 4 / (W if sharded else 1)
        note = "fp32 master weights" + ("" if su.precision == "fp32" else f", {su.precision} compute")
    if sharded:
        note += f", sharded /{W}"
    if su.offload_params and sharded:
        host += w
        w = 0.0
        note = "offloaded to host"
    items.append(Item("weights", w, note))

    # Gradients (of the trainable parameters).
    grad_b = b if ds and not lora else 4
    g = trainable * grad_b / (W if su.strategy in ("zero2", "zero3", "fsdp") else 1)
    gnote = "sharded" if su.strategy != "ddp" else ""
    if su.strategy == "fsdp" and su.offload_params:
        host += g
        g = 0.0
        gnote = "offloaded to host"
    if ds:
        g += 2 * min(dsf["reduce_bucket"], trainable) * b  # the gradient reduction bucket and its copy
        gnote = (gnote + ", " if gnote else "") + "plus the reduce bucket"
    items.append(Item("gradients", g, gnote, ALL if ds else ("backward", "optimizer step")))

    # Optimizer state: AdamW moments (+ DeepSpeed's fp32 master copy).
    per = f["adam_moments"] * 4 + (4 if ds else 0)
    opt = trainable * per / (1 if su.strategy == "ddp" else W)
    onote = "AdamW moments" + (" + fp32 master" if ds else "") + ("" if su.strategy == "ddp" else ", sharded")
    if su.offload_optimizer:
        host += opt
        opt = 0.0
        onote = "offloaded to host (the step runs on the CPU)"
    items.append(Item("optimizer state", opt, onote))

    # Parameters gathered for compute by a sharding strategy.
    if su.strategy == "fsdp":
        gathered = (f["fsdp_unsharded_layers"] * shape.layer_params + shape.embed_params + shape.head_params) * b
        items.append(Item("gathered params", gathered, "FSDP2: two layers ahead + the root, unsharded", FWD))
    elif su.strategy == "zero3":
        live = min(psi, dsf["stage3_max_live_parameters"] + dsf["stage3_prefetch_bucket"]) * b
        items.append(Item("gathered params", live, "ZeRO-3 live parameters + prefetch", FWD))

    # Activations.
    mode = _act_mode(su)
    acts = f["activations"]
    tokens = su.micro_batch * su.seq
    full_layer = _per_token_layer(shape, acts[mode])
    if not su.flash:
        if su.eager:
            full_layer += acts["eager_scores_per_head_row_token"] * b * shape.heads * su.seq
        else:
            full_layer += acts["sdpa_mask_per_row_token"] * su.seq
    if lora and su.lora_dropout:
        width = {"h": shape.hidden, "q": shape.q_width, "kv": shape.kv_width, "i": shape.intermediate}
        full_layer += sum(width[_LORA_IO[t][0]] for t in su.lora_targets if t in _LORA_IO) * b
    no_ckpt = shape.layers * tokens * full_layer
    k = min(su.checkpointed, shape.layers)
    live = full_layers_live(shape.layers, k)
    kept = _per_token_layer(shape, acts["checkpointed"][mode]) if k else 0.0
    act = k * tokens * kept + live * tokens * full_layer
    act += tokens * shape.hidden * 4 * 2  # embedding output and final norm
    if mode == "mixed":  # autocast keeps 16-bit copies of the weights it casts until backward
        cached = shape.vocab * shape.hidden  # the output head (the embedding lookup is not cast)
        cached += live * shape.layer_params
        items.append(Item("autocast copies", cached * b, f"{su.precision} copies of the fp32 weights", BWD))
    anote = {0: "no checkpointing", shape.layers: "checkpointed"}.get(k, f"{k} of {shape.layers} layers checkpointed")
    items.append(Item("activations", act, anote, BWD))

    # The output head's logits.
    if su.objective == "grpo":
        n = su.micro_batch * su.completion_len
        head = n * shape.vocab * f["grpo_head_bytes_per_logit"][mode]
        hnote = f"{n} completion tokens x {shape.vocab} vocab"
    else:
        targets = tokens if su.max_targets is None else min(tokens, su.max_targets)
        n = min(targets, su.loss_chunk_tokens or targets)
        head = n * shape.vocab * f["head_bytes_per_logit"][mode]
        hnote = f"{n} target tokens x {shape.vocab} vocab" + (" per chunk" if n < targets else "")
        if n < targets and not lora:  # each chunk's head-weight gradient is added into the accumulated one
            head += shape.vocab * shape.hidden * 4
    items.append(Item("output head", head, hnote, BWD))

    # The optimizer step's temporaries (per-tensor AdamW on CPU; the fused ones work in place).
    copies = f["step_temporaries_largest_tensor"].get(device_type, 0)
    if copies and not su.offload_optimizer and not ds:
        largest = float(max(shape.embed_params, shape.hidden * shape.intermediate) if not lora else 0)
        largest = largest / (1 if su.strategy == "ddp" else W)
        items.append(Item("step temporaries", copies * largest * 4, "AdamW, largest tensor", ("optimizer step",)))
    elif su.optimizer and device_type != "cpu":
        n, onote = optimizer_temporaries(su.optimizer)
        per_device = trainable / (1 if su.strategy == "ddp" else W)
        if n:
            items.append(Item("step temporaries", n * per_device * 4, onote, ("optimizer step",)))

    if su.objective == "grpo":
        if su.reference:
            ref = psi * b / (W if sharded else 1)
            items.append(Item("reference model", ref, f"frozen {su.precision} copy for the KL term"))
        if su.vllm_fraction:
            items.append(Item("vLLM rollout", 0.0, f"{su.vllm_fraction:.0%} of the device, outside the allocator"))
        else:
            gen_tokens = su.gen_batch * su.seq
            kv_cache = gen_tokens * shape.layers * 2 * shape.kv_width * b
            items.append(Item("KV cache", kv_cache, f"{su.gen_batch} sequences x {su.seq} tokens", GEN))
            items.append(Item("sampling logits", su.gen_batch * shape.vocab * 4 * 2, "", GEN))
    reserve = f["reserve_gib"].get(device_type, 0.0) * GIB
    return Plan(su, shape, items, no_ckpt, host, reserve)
