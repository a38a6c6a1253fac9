"""The memory plan against a device: the card's HBM from the matrix (the smallest its chips may have, said
so where the matrix does not confirm it), less what the chip already holds before the run (read from the
device or the host's npu-smi where there is one, else an idle chip's figure from the matrix), the refusal
with the smallest change that fits, and the measured peak the run records next to the estimate (memory.py
does the estimate).

No torch at import: ``provision-train --check`` uses this module too.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from provisioner.train.config import ConfigError, TrainConfig
from provisioner.train.memory import (
    GIB,
    ModelShape,
    Plan,
    estimate,
    model_shape,
    read_model_config,
    setup_from_config,
)

# ---- capacity: the card's HBM from the matrix -------------------------------------------------


MIB = 1024**2


def _chip_row(m: Any, name: str) -> dict | None:
    """A chip model as npu-smi or torch_npu names it (910B3, Ascend910B3, 910B4-1)."""
    key = name.strip().lower()
    for chip in m.rows("chips"):
        names = [chip["model"], *chip.get("npu_smi_names", []), *chip.get("soc_names", [])]
        if key in (str(n).lower() for n in names):
            return chip
    return None


def card_capacity(name: str) -> tuple[float, str, bool | None]:
    """(bytes per device, label, bf16 supported) for a card, chip family alias, or chip model name.

    A card row without its own memory_mb takes the smallest HBM of the chip models it may carry (a 300T-A2
    may hold a 32 GB 910B4): the label says so, and says "unconfirmed" where the matrix marks the card's
    memory or chips unconfirmed or its chips disagree."""
    from provisioner.errors import ProvisionError
    from provisioner.matrix import loader

    m = loader.load()
    try:
        card, fam, _ = m.lookup_card(name)
    except ProvisionError as exc:
        chip = _chip_row(m, name)
        if chip and chip.get("hbm_mb"):
            return chip["hbm_mb"] * MIB, f"{chip['model']} HBM", m.family(chip["family"]).get("bf16")
        raise ConfigError(f"config: card: {exc}") from None
    mb = card.get("memory_mb")
    label = f"{card['id']} per-chip HBM"
    doubtful = set(card.get("unconfirmed", [])) & {"memory_mb", "chip_models"}
    if mb:
        if "memory_mb" in doubtful:
            label += " (unconfirmed)"
    else:
        chips = {c["model"]: c for c in m.rows("chips")}
        known = {c: chips[c]["hbm_mb"] for c in card.get("chip_models", []) if chips.get(c, {}).get("hbm_mb")}
        if known:
            smallest = min(known, key=lambda c: known[c])
            mb = known[smallest]
            if doubtful or len(set(known.values())) > 1:
                label += (f" ({'unconfirmed: ' if doubtful else ''}the smallest of the chips it may carry,"
                          f" {smallest} {mb} MB)")
    if not mb:
        raise ConfigError(f"config: card: the matrix has no HBM size for {card['id']}; set memory_check: false")
    return mb * MIB, label, fam.get("bf16")


def held_memory(name: str | None, dev: Any = None) -> tuple[float, str]:
    """(bytes, what holds them): device memory the run cannot have because something holds it already.

    Read where the chips are: the run's own device (torch.<npu|cuda>.mem_get_info, total less free) or, for
    ``--check`` on a host with npu-smi, the most any chip of ``npu-smi info`` uses now; else the matrix's
    figure for an idle chip of the card's family (chips.yaml idle_hbm_mb, from npu-smi samples)."""
    if dev is not None and getattr(dev, "type", "cpu") in ("npu", "cuda"):
        import torch

        try:
            free, total = getattr(torch, dev.type).mem_get_info(dev.index)
            return float(max(0, total - free)), f"in use on {dev.type}:{dev.index} before the run (mem_get_info)"
        except Exception:  # a runtime without it: the matrix's figure below
            pass
    if not name:
        return 0.0, ""
    host = _npu_smi_held()
    if host is not None:
        return host
    from provisioner.errors import ProvisionError
    from provisioner.matrix import loader

    m = loader.load()
    try:
        _, fam, _ = m.lookup_card(name)
    except ProvisionError:
        chip = _chip_row(m, name)
        if chip is None:
            return 0.0, ""
        fam = m.family(chip["family"])
    mb = fam.get("idle_hbm_mb")
    if not mb:
        return 0.0, ""
    return mb * MIB, f"held by an idle {fam['id']} chip (npu-smi samples, matrices/chips.yaml)"


def _npu_smi_held() -> tuple[float, str] | None:
    """The most HBM any chip of this host uses now, from `npu-smi info` (None without npu-smi or a table)."""
    import shutil
    import subprocess

    exe = shutil.which("npu-smi")
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "info"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    from provisioner.npusmi import parse_info

    chips = parse_info(proc.stdout if proc.returncode == 0 else "").get("chips", [])
    used = [c["hbm_used_mb"] for c in chips if isinstance(c.get("hbm_used_mb"), int)]
    if not used:
        return None
    return max(used) * MIB, f"in use on this host's chips now (npu-smi info, the most of {len(used)})"


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
    everything = cfg.gradient_checkpointing is True or cfg.gradient_checkpointing == "auto"
    base: dict[str, Any] = {} if everything else {"gradient_checkpointing": True}
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
    """The change as key=value settings that give exactly the estimated plan when applied to the config."""
    change = dict(change)
    if "offload_optimizer" not in change and change.get("strategy", cfg.strategy) != cfg.strategy:
        # _apply estimates a new strategy without offload; say so where `auto` would turn it on (zero2).
        applied = _apply(cfg, change)
        if replace(applied, offload_optimizer="auto").resolved_offload_optimizer() != applied.resolved_offload_optimizer():
            change["offload_optimizer"] = applied.offload_optimizer
    words = [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in change.items()]
    if "micro_batch_size" in change:
        ga = cfg.gradient_accumulation_steps * cfg.micro_batch_size // change["micro_batch_size"]
        words.append(f"gradient_accumulation_steps={ga}")
    return words


def available_strategies() -> list[str]:
    """The strategies a suggestion may name: those that can run here (never fsdp where torch_npu lacks FSDP2)."""
    from provisioner.train.requirements import fsdp2_available, fsdp_unsupported, installed

    out = ["ddp"]
    if installed("deepspeed"):
        out += ["zero2", "zero3"]
    if fsdp2_available() and fsdp_unsupported() is None:
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
    vllm: bool | None = None,
    held: tuple[float, str] | None = None,
) -> Plan:
    """The plan for ``cfg``; when it does not fit, the first candidate change that does is attached.
    ``targets``: a function of (micro-batch size, sequence length) giving the most target tokens a
    micro-batch of this data can hold (``max_targets``); without it every token counts as a target.
    ``vllm``: whether a GRPO run's rollout is colocated vLLM (requirements.vllm_rollout decides it for
    ``rollout: auto``; None: only ``rollout: vllm``). ``held``: what the device holds before the run
    (held_memory), taken off the capacity."""
    shape = model_shape(read_model_config(cfg.model))
    tf = targets
    available = None if capacity is None else capacity - (held[0] if held is not None else 0.0)
    p = _estimate_for(shape, cfg, world, precision, attn, device_type, capacity, tf, vllm, available)
    p.capacity, p.capacity_label = capacity, label
    if held is not None:
        p.held, p.held_label = held
    if p.fits is False and p.available is not None:
        for change in _candidates(cfg, strategies if strategies is not None else available_strategies()):
            # gradient_checkpointing: auto is decided for each candidate as the run would decide it.
            alt = _estimate_for(shape, _apply(cfg, change), world, precision, attn, device_type, capacity, tf, vllm,
                                available)
            if alt.total <= p.available:
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
    vllm: bool | None = None,
    available: float | None = None,
) -> Plan:
    bound = None if targets is None else targets(cfg.micro_batch_size, cfg.max_seq_len)

    def at(k: int | None) -> Plan:
        su = setup_from_config(cfg, world, precision, attn, device_type, bound, vllm, shape.layers, k)
        p = estimate(shape, su, device_type)
        for item in p.items:
            if item.name == "vLLM rollout" and capacity:
                item.bytes = p.setup.vllm_fraction * capacity
        return p

    gc = cfg.gradient_checkpointing
    if gc != "auto":
        if isinstance(gc, int) and not isinstance(gc, bool) and gc > shape.layers:
            raise ConfigError(f"config: gradient_checkpointing: {gc} layers, but {cfg.model} has {shape.layers}"
                              f" decoder layers (true checkpoints all of them)")
        return at(None)
    return resolve_checkpointing(at, shape.layers, available, all_or_nothing=cfg.method == "grpo")


def resolve_checkpointing(at: Any, layers: int, available: float | None, all_or_nothing: bool = False) -> Plan:
    """``gradient_checkpointing: auto``: the plan with the fewest checkpointed layers whose total fits
    ``available`` (``at(k)`` is the plan with the first k of ``layers`` checkpointed). Its total falls as k
    grows up to ``layers - 1`` (a checkpointed layer keeps only its input); all of them hold one layer input
    more than all but the last (whose full activations are the one full layer alive either way:
    memory.full_layers_live), so auto checkpoints all layers only where nothing fits (the refusal and its
    suggestion take it from there) or where no capacity is known. ``all_or_nothing`` (GRPO: TRL checkpoints
    every layer or none) chooses between none and all."""
    if available is None:
        p = at(layers)
        p.checkpointing_why = f"auto: all {layers} layers (no device capacity to plan against)"
        return p
    gib = lambda v: f"{v / GIB:.2f} GiB"  # noqa: E731
    none = at(0)
    if none.total <= available:
        none.checkpointing_why = (f"auto: 0 of {layers} layers; the plan fits without checkpointing"
                                  f" ({gib(none.total)} of {gib(available)} available)")
        return none
    top = layers if all_or_nothing or layers == 1 else layers - 1
    least = at(top)
    if least.total > available:
        full = least if top == layers else at(layers)
        full.checkpointing_why = (f"auto: all {layers} layers, and even that does not fit ({gib(least.total)} of"
                                  f" {gib(available)} available)")
        return full
    if all_or_nothing:
        least.checkpointing_why = (f"auto: all {layers} layers (TRL checkpoints all or none); without:"
                                   f" {gib(none.total)}, with: {gib(least.total)} of {gib(available)} available")
        return least
    lo, hi, best = 0, top, least  # at(lo) does not fit, at(hi) does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = at(mid)
        if p.total <= available:
            hi, best = mid, p
        else:
            lo = mid
    fewer = none if lo == 0 else at(lo)
    best.checkpointing_why = (f"auto: {hi} of {layers} layers, the fewest that fit: {gib(best.total)} of"
                              f" {gib(available)} available ({lo} layers: {gib(fewer.total)})")
    return best


def refusal(p: Plan) -> str:
    fix = (
        f"; smallest change that fits: {' '.join(p.suggestion)} ({(p.suggestion_total or 0) / GIB:.1f} GiB)"
        if p.suggestion
        else "; no strategy, offload, micro-batch or LoRA change fits: use more devices or a bigger card"
    )
    held = f" of which {p.held / GIB:.1f} GiB {p.held_label}" if p.held else ""
    return (
        f"memory: the plan needs {p.total / GIB:.1f} GiB per device but {p.capacity_label} has "
        f"{(p.capacity or 0) / GIB:.1f} GiB{held} ({p.setup.describe()}){fix} (memory_check: false runs it anyway)"
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


def record(p: Plan, peak: float | None) -> dict[str, Any]:
    """What summary.json keeps: the estimate next to the measured peak."""
    return {
        "estimate_gib": round(p.total / GIB, 3),
        "estimate_without_reserve_gib": round((p.total - p.reserve) / GIB, 3),
        "measured_peak_gib": None if peak is None else round(peak / GIB, 3),
        "capacity_gib": None if p.capacity is None else round(p.capacity / GIB, 3),
        "device": p.capacity_label,
        "plan": p.to_dict(),
    }


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

        return float(getattr(torch, self.device_type).max_memory_allocated()) - (self.base or 0) * 1024


def _status_kib(key: str) -> float | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return float(line.split()[1])
    except OSError:
        return None
    return None
