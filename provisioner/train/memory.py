"""The memory plan: per-device bytes of a run, from the model's config.json alone (no weights).

Weights, gradients, optimizer state, activations (with and without
checkpointing), the output head's logits and the strategy's buffers, for the
method, precision, strategy, world size, sequence length and micro-batch of a
config, against the card's HBM from the matrix. A plan that cannot fit is
refused with the smallest change that fits. No torch here: ``provision-train
--check`` prints the plan; the run checks it again with the real device and
records the measured peak next to it (``PeakMeter``).

The numbers the formulas use (bytes per state, activation coefficients,
DeepSpeed buckets) are data: memory.yaml.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
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
    c = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
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
    checkpointing: bool
    offload_optimizer: bool
    offload_params: bool
    loss_chunk_tokens: int
    flash: bool  # flash attention (no mask, no scores kept)
    eager: bool
    lora_r: int = 8
    lora_targets: tuple[str, ...] = ("q_proj", "v_proj")
    lora_dropout: bool = True
    max_targets: int | None = None  # target tokens in the fullest micro-batch, from the data (None: all tokens)
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
            + f", seq {self.seq}, micro-batch {self.micro_batch}, checkpointing {'on' if self.checkpointing else 'off'}"
        )


def setup_from_config(
    cfg: TrainConfig,
    world: int,
    precision: str,
    attn: str | None = None,
    device_type: str = "npu",
    max_targets: int | None = None,
) -> Setup:
    if attn is None:
        attn = "sdpa" if device_type == "cpu" else "flash_attention_2"
    g = cfg.grpo
    grpo = cfg.method == "grpo"
    fsdp_offload = cfg.strategy == "fsdp" and (cfg.offload_params or cfg.resolved_offload_optimizer())
    seq = g.max_prompt_len + g.max_completion_len if grpo else cfg.max_seq_len
    return Setup(
        tuning=cfg.tuning,
        objective="grpo" if grpo else "sft",
        precision=precision,
        strategy=cfg.strategy,
        world=max(1, world),
        seq=seq,
        micro_batch=cfg.micro_batch_size,
        checkpointing=cfg.gradient_checkpointing,
        # FSDP2's CPUOffloadPolicy moves parameters, gradients and the step together.
        offload_optimizer=cfg.strategy != "ddp" and (cfg.resolved_offload_optimizer() or fsdp_offload),
        offload_params=cfg.offload_params or fsdp_offload,
        loss_chunk_tokens=cfg.loss_chunk_tokens,
        flash=attn.startswith("flash"),
        eager=attn == "eager",
        lora_r=cfg.lora.r,
        lora_targets=tuple(cfg.lora.target_modules),
        lora_dropout=cfg.lora.dropout > 0,
        max_targets=max_targets,
        prompt_len=g.max_prompt_len if grpo else 0,
        completion_len=g.max_completion_len if grpo else 0,
        gen_batch=cfg.micro_batch_size * cfg.gradient_accumulation_steps if grpo else 0,
        reference=grpo and g.beta > 0 and g.tuning == "full",
        vllm_fraction=g.vllm_memory_fraction if grpo and g.rollout == "vllm" else 0.0,
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
    suggestion: list[str] = field(default_factory=list)
    suggestion_total: float | None = None

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
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.total <= self.capacity

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
            "host_offload_gib": round(self.host_bytes / GIB, 3),
            "capacity_gib": None if self.capacity is None else round(self.capacity / GIB, 3),
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
        verdict = {None: "", True: ": fits", False: ": does not fit"}[self.fits]
        out.append(f"  {'total':<18}{self.total / GIB:9.2f} GiB{where}{verdict}  [peak: {self.peak_phase}]")
        if self.setup.checkpointing:
            out.append(f"  (activations without checkpointing: {self.activations_without_checkpointing / GIB:.2f} GiB)")
        if self.host_bytes:
            out.append(f"  (host memory for offloaded state: {self.host_bytes / GIB:.2f} GiB per device)")
        if self.suggestion:
            out.append(
                f"  smallest change that fits: {' '.join(self.suggestion)} (total {self.suggestion_total / GIB:.2f} GiB)"
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
    if su.checkpointing:
        kept = _per_token_layer(shape, acts["checkpointed"][mode])
        act = shape.layers * tokens * kept + tokens * full_layer  # plus one layer recomputed in backward
    else:
        act = no_ckpt
    act += tokens * shape.hidden * 4 * 2  # embedding output and final norm
    if mode == "mixed":  # autocast keeps 16-bit copies of the weights it casts until backward
        cached = shape.vocab * shape.hidden  # the output head (the embedding lookup is not cast)
        cached += shape.layer_params if su.checkpointing else shape.layers * shape.layer_params
        items.append(Item("autocast copies", cached * b, f"{su.precision} copies of the fp32 weights", BWD))
    items.append(Item("activations", act, "checkpointed" if su.checkpointing else "no checkpointing", BWD))

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
        largest = max(shape.embed_params, shape.hidden * shape.intermediate) if not lora else 0
        largest = largest / (1 if su.strategy == "ddp" else W)
        items.append(Item("step temporaries", copies * largest * 4, "AdamW, largest tensor", ("optimizer step",)))

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


# ---- capacity: the card's HBM from the matrix -------------------------------------------------


def card_capacity(name: str) -> tuple[float, str, bool | None]:
    """(bytes per device, label, bf16 supported) for a card, chip family alias, or chip model name."""
    from provisioner.errors import ProvisionError
    from provisioner.matrix import loader

    m = loader.load()
    key = name.strip().lower()
    try:
        card, fam, _ = m.lookup_card(name)
    except ProvisionError as exc:
        # Not a card or family: a chip model as npu-smi or torch_npu names it (910B3, Ascend910B3).
        for chip in m.rows("chips"):
            names = [chip["model"], *chip.get("npu_smi_names", []), *chip.get("soc_names", [])]
            if key in (str(n).lower() for n in names) and chip.get("hbm_mb"):
                return chip["hbm_mb"] * 1024**2, f"{chip['model']} HBM", m.family(chip["family"]).get("bf16")
        raise ConfigError(f"config: card: {exc}") from None
    mb = card.get("memory_mb")
    if not mb:
        for model in card.get("chip_models", []):
            chip = next((c for c in m.rows("chips") if c["model"] == model), None)
            if chip and chip.get("hbm_mb"):
                mb = chip["hbm_mb"]
                break
    if not mb:
        raise ConfigError(f"config: card: the matrix has no HBM size for {card['id']}; set memory_check: false")
    return mb * 1024**2, f"{card['id']} per-chip HBM", fam.get("bf16")


def device_capacity(dev: Any) -> tuple[float | None, str]:
    """HBM of the detected device: the matrix's figure for an Ascend chip, the driver's for CUDA, host RAM for CPU."""
    if dev.type == "npu":
        try:
            cap, label, _ = card_capacity(dev.name)
            return cap, label
        except ConfigError:
            import torch

            return float(torch.npu.get_device_properties(dev.index).total_memory), f"{dev.name} (reported)"
    if dev.type == "cuda":
        import torch

        return float(torch.cuda.get_device_properties(dev.index).total_memory), dev.name
    return _mem_available(), "host memory available"


def _mem_available() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# ---- the smallest change that fits -------------------------------------------------------------


def _candidates(cfg: TrainConfig, strategies: list[str]) -> list[dict[str, Any]]:
    """Changes in order of how much they alter the run: checkpointing, smaller micro-batches (same
    global batch), a sharding strategy, offload, and last LoRA."""
    base: dict[str, Any] = {} if cfg.gradient_checkpointing else {"gradient_checkpointing": True}
    mbs = []
    m = cfg.micro_batch_size
    while m > 1:
        m //= 2
        mbs.append(m)
    out: list[dict[str, Any]] = [base] if base else []
    out += [{**base, "micro_batch_size": k} for k in mbs]
    ordered = [s for s in ("zero2", "fsdp", "zero3") if s in strategies and s != cfg.strategy]
    for s in ordered:
        out.append({**base, "strategy": s})
        out += [{**base, "strategy": s, "micro_batch_size": k} for k in mbs]
    for s in [x for x in ("zero2", "fsdp", "zero3") if x in strategies]:
        out.append({**base, "strategy": s, "offload_optimizer": True})
        if s in ("zero3", "fsdp"):
            out.append({**base, "strategy": s, "offload_optimizer": True, "offload_params": True})
    if cfg.tuning == "full":
        key = "grpo.tuning" if cfg.method == "grpo" else "method"
        out.append({**base, key: "lora"})
        out += [{**base, key: "lora", "micro_batch_size": k} for k in mbs]
    return out


def _apply(cfg: TrainConfig, change: dict[str, Any]) -> TrainConfig:
    new = replace(cfg, grpo=replace(cfg.grpo), lora=replace(cfg.lora))
    for k, v in change.items():
        if k == "grpo.tuning":
            new.grpo.tuning = v
        else:
            setattr(new, k, v)
    if "micro_batch_size" in change:  # keep the global batch
        new.gradient_accumulation_steps = cfg.gradient_accumulation_steps * cfg.micro_batch_size // change[
            "micro_batch_size"
        ]
    if "offload_optimizer" not in change and new.strategy != cfg.strategy:
        new.offload_optimizer = False if cfg.offload_optimizer == "auto" else cfg.offload_optimizer
    return new


def _render(change: dict[str, Any], cfg: TrainConfig) -> list[str]:
    words = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in change.items()]
    if "micro_batch_size" in change:
        ga = cfg.gradient_accumulation_steps * cfg.micro_batch_size // change["micro_batch_size"]
        words.append(f"gradient_accumulation_steps={ga}")
    return words


def available_strategies() -> list[str]:
    from provisioner.train.requirements import fsdp2_available, installed

    out = ["ddp"]
    if installed("deepspeed"):
        out += ["zero2", "zero3"]
    if fsdp2_available():
        out.append("fsdp")
    return out


def plan(
    cfg: TrainConfig,
    world: int,
    precision: str,
    capacity: float | None,
    label: str,
    attn: str | None = None,
    device_type: str = "npu",
    strategies: list[str] | None = None,
    targets: Any = None,
) -> Plan:
    """The plan for ``cfg``; when it does not fit, the first candidate change that does is attached.
    ``targets``: a function of (micro-batch size, sequence length) giving the most target tokens a
    micro-batch of this data can hold (``max_targets``); without it every token counts as a target."""
    shape = model_shape(read_model_config(cfg.model))
    tf = targets
    p = _estimate_for(shape, cfg, world, precision, attn, device_type, capacity, tf)
    p.capacity, p.capacity_label = capacity, label
    if p.fits is False:
        for change in _candidates(cfg, strategies if strategies is not None else available_strategies()):
            alt = _estimate_for(shape, _apply(cfg, change), world, precision, attn, device_type, capacity, tf)
            if alt.total <= capacity:
                p.suggestion, p.suggestion_total = _render(change, cfg), alt.total
                break
    return p


def _estimate_for(
    shape: ModelShape,
    cfg: TrainConfig,
    world: int,
    precision: str,
    attn: str | None,
    device_type: str,
    capacity: float | None,
    targets: Any = None,
) -> Plan:
    bound = None if targets is None else targets(cfg.micro_batch_size, cfg.max_seq_len)
    su = setup_from_config(cfg, world, precision, attn, device_type, bound)
    p = estimate(shape, su, device_type)
    for item in p.items:
        if item.name == "vLLM rollout" and capacity:
            item.bytes = p.setup.vllm_fraction * capacity
    return p


def refusal(p: Plan) -> str:
    fix = (
        f"; smallest change that fits: {' '.join(p.suggestion)} ({p.suggestion_total / GIB:.1f} GiB)"
        if p.suggestion
        else "; no strategy, offload, micro-batch or LoRA change fits: use more devices or a bigger card"
    )
    return (
        f"memory: the plan needs {p.total / GIB:.1f} GiB per device but {p.capacity_label} has "
        f"{p.capacity / GIB:.1f} GiB ({p.setup.describe()}){fix} (memory_check: false runs it anyway)"
    )


def max_targets(lengths: list[int], targets: list[int], packed: bool) -> Any:
    """A bound on the target tokens of one micro-batch, from the tokenised data: packed rows hold at most
    micro-batch x sequence tokens, and no choice of samples puts more targets into them than taking the
    densest samples first (fractional knapsack); unpacked micro-batches hold micro-batch samples."""
    dense = sorted(zip(lengths, targets, strict=True), key=lambda lt: -lt[1] / max(1, lt[0]))
    most = sorted(targets, reverse=True)

    def bound(micro_batch: int, seq: int) -> int:
        if not packed:
            return sum(most[:micro_batch])
        room, total = micro_batch * seq, 0.0
        for n, t in dense:
            take = min(n, room)
            total += t * take / max(1, n)
            room -= take
            if room <= 0:
                break
        return int(total + 0.999)

    return bound


# ---- the measured peak -------------------------------------------------------------------------


class PeakMeter:
    """Peak memory from now on: the device allocator's peak, or on CPU the peak resident set above
    the resident set at the start (Linux resets the high-water mark through /proc/self/clear_refs)."""

    def __init__(self, device_type: str) -> None:
        self.device_type = device_type
        if device_type == "cpu":
            self.base = _status_kib("VmRSS")
            try:
                Path("/proc/self/clear_refs").write_text("5")
                self.reset = True
            except OSError:
                self.reset = False
        else:
            import torch

            mod = getattr(torch, device_type)
            mod.reset_peak_memory_stats()
            self.base = mod.memory_allocated() / 1024

    def peak_bytes(self) -> float | None:
        if self.device_type == "cpu":
            hwm = _status_kib("VmHWM")
            if hwm is None or self.base is None or not self.reset:
                return None
            return max(0.0, (hwm - self.base) * 1024)
        import torch

        return float(getattr(torch, self.device_type).max_memory_allocated()) - self.base * 1024


def _status_kib(key: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return float(line.split()[1])
    except OSError:
        return None
    return None
