"""``method: grpo`` on TRL's GRPOTrainer, with this trainer's device, precision, memory plan and outputs.

TRL does the algorithm: it samples ``num_generations`` completions per prompt
(transformers ``generate`` on the training device, or colocated vLLM /
vllm-ascend where installed), scores them with the reward functions,
normalises rewards within each group into advantages, and minimises the
clipped surrogate loss (ratio clipped to 1 +- epsilon, optionally
epsilon_high) with an optional k3 KL term to the reference policy (beta; the
adapter-free base under LoRA). Its generate path has no CUDA-only
assumption (accelerate picks the NPU and HCCL); its vLLM *server* mode and
its FSDP2-offload weight sync to vLLM hard-code CUDA (trl/generation/
vllm_client.py init_communicator, vllm_generation.py _sync_fsdp2_params_to_vllm),
so only colocated vLLM is offered here.

This module maps the config onto GRPOConfig, renders the prompts (Qwen2.5
ChatML with the R1 reasoning prompt, or the model's own template), checks the
memory plan, bridges TRL's logs into metrics.jsonl (reward mean/std per
function, completion length, KL, clip ratio, end-to-end tokens/s), and exports
``final/`` (and ``merged/``) as plain Hugging Face directories.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from provisioner.train import device as devmod
from provisioner.train import dist, memory_fit, trl_settings
from provisioner.train.config import ConfigError, TrainConfig, dump_config
from provisioner.train.grpo.data import PromptRecord, as_messages, check_records, load_prompts, render_chatml
from provisioner.train.grpo.rewards import load_rewards

log = logging.getLogger("provision-train")
CHECKPOINT_PREFIX = "checkpoint-"


def _world() -> tuple[int, int, int]:
    import os

    return int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def checkpoints(out: Path) -> list[Path]:
    """TRL's (transformers') complete checkpoints, oldest first: trainer_state.json is written last."""
    root = out / "checkpoints"
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.iterdir()
        if p.name.startswith(CHECKPOINT_PREFIX)
        and p.name[len(CHECKPOINT_PREFIX) :].isdigit()
        and (p / "trainer_state.json").is_file()
    ]
    return sorted(found, key=lambda p: int(p.name[len(CHECKPOINT_PREFIX) :]))


def resume_point(out: Path, resume: str | None) -> Path | None:
    existing = checkpoints(out)
    if resume in (None, "", "none", "no"):
        if existing:
            raise ConfigError(
                f"config: output_dir: {out} already holds checkpoints (newest {existing[-1].name}); "
                "pass --resume auto to continue that run, or choose another output_dir"
            )
        return None
    if resume == "auto":
        return existing[-1] if existing else None
    path = Path(resume)
    if not (path / "trainer_state.json").is_file():
        raise ConfigError(f"--resume: {resume} is not a GRPO checkpoint (no trainer_state.json)")
    return path


def render_prompts(
    records: list[PromptRecord], tokenizer: Any, template: str, system_prompt: str | None, max_len: int
) -> tuple[list[dict[str, Any]], int]:
    """Dataset rows (prompt text + ground truth); prompts longer than ``max_len`` tokens are dropped."""
    rows, dropped = [], 0
    for rec in records:
        if template == "chatml":
            text = render_chatml(rec, system_prompt)
        else:
            text = tokenizer.apply_chat_template(
                as_messages(rec, system_prompt), tokenize=False, add_generation_prompt=True
            )
        if len(tokenizer(text, add_special_tokens=False)["input_ids"]) > max_len:
            dropped += 1
            continue
        rows.append({"prompt": text, "ground_truth": rec.ground_truth})
    return rows, dropped


def use_vllm(cfg: TrainConfig, dev: devmod.DeviceInfo) -> bool:
    """Colocated vLLM or transformers generate (requirements.vllm_rollout decides; the memory plan counts
    the same answer)."""
    from provisioner.train.requirements import vllm_rollout

    on, why = vllm_rollout(cfg, dev.type)
    if not on and cfg.grpo.rollout == "auto" and dev.type != "cpu":
        log.info(f"rollout: transformers generate ({why})")
    return on


def grpo_args(cfg: TrainConfig, dev: devmod.DeviceInfo, prec: devmod.Precision, vllm: bool) -> Any:
    """GRPOConfig for this config; a setting the installed TRL does not know is refused by name."""
    from trl import GRPOConfig

    g = cfg.grpo
    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    sched = {"cosine": "cosine", "linear": "linear", "constant": "constant_with_warmup"}[cfg.lr_scheduler]
    progress = sys.stderr.isatty() if cfg.progress_bar == "auto" else bool(cfg.progress_bar)
    kwargs: dict[str, Any] = dict(
        output_dir=str(Path(cfg.output_dir) / "checkpoints"),
        per_device_train_batch_size=cfg.micro_batch_size,
        gradient_accumulation_steps=cfg.gradient_accumulation_steps,
        max_steps=cfg.max_steps or -1,
        num_train_epochs=cfg.num_epochs,
        learning_rate=cfg.resolved_learning_rate(),
        lr_scheduler_type=sched,
        weight_decay=cfg.weight_decay,
        adam_beta1=cfg.adam_beta1,
        adam_beta2=cfg.adam_beta2,
        adam_epsilon=cfg.adam_epsilon,
        max_grad_norm=cfg.max_grad_norm,
        bf16=prec.name == "bf16",
        fp16=prec.name == "fp16",
        gradient_checkpointing=checkpointing(cfg),
        gradient_checkpointing_kwargs={"use_reentrant": False},
        logging_steps=cfg.logging_steps,
        save_strategy="steps" if cfg.save_steps else "no",
        save_steps=cfg.save_steps or 500,
        save_total_limit=cfg.save_total_limit or None,
        seed=cfg.seed,
        data_seed=cfg.data_seed,
        report_to=[],
        disable_tqdm=not progress,
        ddp_timeout=dist.timeout_s(cfg.dist_timeout_s, dev),  # transformers makes a timedelta of it: never None
        use_cpu=dev.type == "cpu",
        dataloader_num_workers=0,
        remove_unused_columns=False,
        model_init_kwargs={
            # Full: fp32 master weights under autocast; LoRA: the frozen base in the compute dtype.
            "dtype": "float32" if cfg.tuning == "full" else {"bf16": "bfloat16", "fp16": "float16"}.get(prec.name, "float32"),
            "attn_implementation": None,  # set by run_grpo
            "trust_remote_code": cfg.trust_remote_code,
        },
        num_generations=g.num_generations,
        max_completion_length=g.max_completion_len,
        temperature=g.temperature,
        top_p=g.top_p,
        beta=g.beta,
        epsilon=g.epsilon,
        num_iterations=g.num_iterations,
        **trl_settings.settings(g),  # loss_type and scale_rewards as the installed TRL takes them
        use_vllm=vllm,
        log_completions=False,
    )
    if g.loss_type == "auto":
        log.info(f"grpo.loss_type auto: {kwargs['loss_type']} (TRL {trl_settings.installed_version()})")
    if g.epsilon_high is not None:
        kwargs["epsilon_high"] = g.epsilon_high
    if g.reward_weights:
        kwargs["reward_weights"] = list(g.reward_weights)
    if vllm:
        kwargs.update(vllm_mode="colocate", vllm_gpu_memory_utilization=g.vllm_memory_fraction)
    if cfg.warmup_steps is not None:
        kwargs["warmup_steps"] = cfg.warmup_steps
    elif "warmup_ratio" in known:
        kwargs["warmup_ratio"] = cfg.warmup_ratio
    else:  # transformers 5 reads a float below 1 as a ratio of the total steps
        kwargs["warmup_steps"] = min(cfg.warmup_ratio, 0.999)
    kwargs.update(_strategy_args(cfg))
    missing = sorted(k for k in kwargs if k not in known)
    if missing:
        import trl

        raise ConfigError(
            f"config: grpo: the installed TRL {trl.__version__} has no setting {missing[0]!r}; install a newer trl"
        )
    return GRPOConfig(**kwargs)


def checkpointing(cfg: TrainConfig) -> bool:
    """TRL checkpoints every layer or none: ``auto`` is all unless run_grpo resolved it from the memory plan
    (validate refuses a number of layers for GRPO)."""
    return cfg.checkpointed_layers(1) > 0


def _strategy_args(cfg: TrainConfig) -> dict[str, Any]:
    """DDP is accelerate's default; ZeRO-2/3 and FSDP2 go through its DeepSpeed and FSDP plugins."""
    if cfg.strategy in ("zero2", "zero3"):
        zero: dict[str, Any] = {"stage": 3 if cfg.strategy == "zero3" else 2, "overlap_comm": False}
        if cfg.resolved_offload_optimizer():
            zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        if cfg.strategy == "zero3":
            zero["stage3_gather_16bit_weights_on_model_save"] = True
            if cfg.offload_params:
                zero["offload_param"] = {"device": "cpu", "pin_memory": True}
        return {
            "deepspeed": {
                "zero_optimization": zero,
                "bf16": {"enabled": "auto"},
                "fp16": {"enabled": "auto"},
                "train_micro_batch_size_per_gpu": "auto",
                "gradient_accumulation_steps": "auto",
                "gradient_clipping": "auto",
            }
        }
    if cfg.strategy == "fsdp":
        options = "full_shard auto_wrap" + (" offload" if cfg.offload_params or cfg.resolved_offload_optimizer() else "")
        # FSDP's own activation checkpointing: the training argument would all-gather again in backward.
        fsdp_config = {"version": 2, "reshard_after_forward": True, "activation_checkpointing": checkpointing(cfg)}
        return {"fsdp": options, "fsdp_config": fsdp_config, "gradient_checkpointing": False}
    return {}


class MetricsBridge:
    """A TrainerCallback (built lazily, so this module imports without transformers) that turns TRL's
    log lines into metrics.jsonl records and keeps end-to-end tokens/s."""

    @staticmethod
    def make(
        path: Path, resume_step: int | None, world: int, dev: devmod.DeviceInfo, rewards: list[tuple[str, str]]
    ) -> Any:
        from transformers import TrainerCallback

        from provisioner.train.metrics import MetricsLog

        class _Bridge(TrainerCallback):
            def __init__(self) -> None:
                self.log: MetricsLog | None = None
                self.t = time.perf_counter()
                self.step = resume_step or 0
                self.tokens: float | None = None
                self.last: dict[str, Any] = {}

            def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if state.is_world_process_zero:
                    self.log = MetricsLog(path, resume_step)
                self.t = time.perf_counter()
                self.step = state.global_step
                self.tokens = float(state.num_input_tokens_seen or 0) or None

            def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
                # Training-step logs carry the loss; generation steps add rewards and token counts (with
                # num_iterations > 1 the other passes reuse the samples: no new rewards, no new tokens).
                if self.log is None or not logs or "loss" not in logs:
                    return
                now = time.perf_counter()
                dt, steps = now - self.t, max(1, state.global_step - self.step)
                seen = float(logs["num_tokens"]) if "num_tokens" in logs else (self.tokens or 0.0)
                tokens = seen - (self.tokens or 0.0)
                rec: dict[str, Any] = {
                    "step": state.global_step,
                    "epoch": round(float(logs.get("epoch", state.epoch or 0.0)), 4),
                    "loss": logs.get("loss"),
                    "lr": logs.get("learning_rate"),
                    "grad_norm": logs.get("grad_norm"),
                    "reward_mean": logs.get("reward"),
                    "reward_std": logs.get("reward_std"),
                    "rewards": {name: logs.get(f"rewards/{func}/mean") for name, func in rewards},
                    "completion_length": logs.get("completions/mean_length"),
                    "clipped_completions": logs.get("completions/clipped_ratio"),
                    "kl": logs.get("kl"),
                    "clip_ratio": logs.get("clip_ratio/region_mean"),
                    "entropy": logs.get("entropy"),
                    "tokens": int(tokens),
                    "tokens_per_s": round(tokens / max(dt, 1e-9), 2),
                    "tokens_per_s_per_device": round(tokens / max(dt, 1e-9) / world, 2),
                    "step_time_s": round(dt / steps, 4),
                    "peak_mem_gib": round(devmod.peak_memory_gib(dev), 3),
                }
                self.log.write(rec)
                self.last = rec
                self.t, self.step, self.tokens = now, state.global_step, seen

            def on_train_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
                if self.log is not None:
                    self.log.close()
                    self.log = None

        return _Bridge()


def run_grpo(cfg: TrainConfig, resume: str | None) -> dict[str, Any]:
    from provisioner.train.attention import npu_flash_fixes, pick_attention
    from provisioner.train.chatml import resolve_template
    from provisioner.train.model import load_tokenizer

    rank, local_rank, world = _world()
    is_main = rank == 0
    dev = devmod.detect(local_rank, cfg.npu_jit_compile)
    prec = devmod.choose_precision(cfg.precision, dev)
    from provisioner.train import zero

    zero.check_supported(dev, prec, cfg.strategy)  # as SFT's: DeepSpeed misses a saturating chip's overflow
    attn = pick_attention(cfg.attn_implementation, dev)
    for line in npu_flash_fixes(dev, prec, attn):
        if is_main:
            log.info(line)
    out = Path(cfg.output_dir)
    found = resume_point(out, resume)
    if is_main:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(dump_config(cfg))

    tokenizer = load_tokenizer(cfg.tokenizer or cfg.model, cfg.trust_remote_code)
    template = resolve_template(cfg.template, tokenizer)
    records = load_prompts(cfg.data, cfg.data_format)
    check_records(records, cfg.grpo.rewards)
    rows, dropped = render_prompts(records, tokenizer, template, cfg.system_prompt, cfg.grpo.max_prompt_len)
    if not rows:
        raise ConfigError(f"config: data: every prompt is longer than grpo.max_prompt_len={cfg.grpo.max_prompt_len}")

    # The memory plan, before any weight is loaded, with the rollout the run will use.
    vllm = use_vllm(cfg, dev)
    capacity: float | None
    if cfg.card:
        capacity, label, _ = memory_fit.card_capacity(cfg.card)
    else:
        capacity, label = memory_fit.device_capacity(dev)
    plan = memory_fit.plan(cfg, world, prec.name, capacity, label, attn, dev.type, vllm=vllm,
                           held=memory_fit.held_memory(cfg.card, dev))
    if is_main:
        for line in plan.lines():
            log.info(line)
    if plan.fits is False and cfg.memory_check:
        raise ConfigError(memory_fit.refusal(plan))
    # gradient_checkpointing: auto, decided by the plan (all layers or none: memory_fit.resolve_checkpointing).
    cfg = dataclasses.replace(cfg, gradient_checkpointing=plan.setup.checkpointed > 0)

    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback
    from trl import GRPOTrainer

    args = grpo_args(cfg, dev, prec, vllm)
    args.model_init_kwargs["attn_implementation"] = attn
    names = list(cfg.grpo.rewards)
    reward_funcs = load_rewards(names)
    peft_config = None
    if cfg.tuning == "lora":
        from peft import LoraConfig

        peft_config = LoraConfig(
            r=cfg.lora.r,
            lora_alpha=cfg.lora.alpha,
            lora_dropout=cfg.lora.dropout,
            target_modules=list(cfg.lora.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )
    resume_step = None
    if found is not None:
        resume_step = json.loads((found / "trainer_state.json").read_text()).get("global_step")
    # TRL logs each reward under its function's __name__; the metrics use the names the config gives.
    pairs = [(n, f.__name__) for n, f in zip(names, reward_funcs, strict=True)]
    bridge = MetricsBridge.make(out / cfg.metrics_file, resume_step, world, dev, pairs)
    meter = memory_fit.PeakMeter(dev.type)
    t0 = time.perf_counter()
    try:
        trainer = GRPOTrainer(
            model=cfg.model,
            reward_funcs=reward_funcs,
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=[bridge],
        )
    except ValueError as exc:  # TRL's own consistency checks (batch sizes vs num_generations, ...)
        raise ConfigError(f"config: grpo: {' '.join(str(exc).split())}") from None
    trainer.remove_callback(PrinterCallback)
    if args.disable_tqdm:
        trainer.remove_callback(ProgressCallback)
    if is_main:
        log.info(f"GRPO on TRL: {len(rows)} prompts ({dropped} dropped as too long), rollout "
                 f"{'vLLM (colocated)' if vllm else 'transformers generate'}, rewards {', '.join(names)}")
    trainer.train(resume_from_checkpoint=str(found) if found else None)
    train_time = time.perf_counter() - t0

    final_dir = out / "final"
    merged_dir = out / "merged" if cfg.export_merged else None
    if is_main:
        for d in (final_dir, merged_dir):
            if d is not None and d.exists():
                shutil.rmtree(d)
    trainer.save_model(str(final_dir))  # every rank: gathers ZeRO-3 / FSDP shards
    peak = meter.peak_bytes()
    if is_main:
        tokenizer.save_pretrained(str(final_dir))
        if merged_dir is not None:
            from provisioner.train.strategy import merge_lora_export

            merge_lora_export(cfg, final_dir, merged_dir, tokenizer)
    return _finish(cfg, out, trainer, bridge, found, train_time, dev, prec, attn, vllm, world, plan, peak,
                   len(rows), dropped, names, final_dir, merged_dir, is_main)


def _finish(cfg: TrainConfig, out: Path, trainer: Any, bridge: Any, found: Path | None, train_time: float,
            dev: devmod.DeviceInfo, prec: devmod.Precision, attn: str, vllm: bool, world: int,
            plan: memory_fit.Plan, peak: float | None, n_prompts: int, dropped: int, names: list[str],
            final_dir: Path, merged_dir: Path | None, is_main: bool) -> dict[str, Any]:
    from provisioner.train.metrics import read_metrics
    from provisioner.train.plot import loss_curve

    metrics_path = out / cfg.metrics_file
    rows = read_metrics(metrics_path) if metrics_path.exists() else []
    sampled = [r["reward_mean"] for r in rows if r.get("reward_mean") is not None]  # generation steps
    gen_rows = [r for r in rows if r.get("tokens")]
    ckpts = checkpoints(out)
    summary = {
        "status": "ok",
        "method": "grpo",
        "tuning": cfg.tuning,
        "steps": trainer.state.global_step,
        "resumed_from": None if found is None else str(found),
        "final_loss": rows[-1]["loss"] if rows else None,
        "reward_first": sampled[0] if sampled else None,
        "reward_last": sampled[-1] if sampled else None,
        "rewards": names,
        "tokens_per_s_per_device": _mean([r["tokens_per_s_per_device"] for r in gen_rows[1:] or gen_rows]),
        "train_time_s": round(train_time, 3),
        "device": dev.name,
        "device_type": dev.type,
        "world_size": world,
        "precision": prec.name,
        "attn_implementation": attn,
        "rollout": "vllm" if vllm else "generate",
        "trl": trl_settings.installed_version(),
        **{f"grpo_{k}": v for k, v in trl_settings.settings(cfg.grpo).items()},  # what TRL was given
        "strategy": cfg.strategy,
        "prompts": n_prompts,
        "dropped_prompts": dropped,
        "output_dir": str(out),
        "metrics": str(metrics_path),
        "checkpoint": str(ckpts[-1]) if ckpts else None,
        "final_dir": str(final_dir),
        "merged_dir": None if merged_dir is None else str(merged_dir),
        "loss_curve": None,  # the path once drawn (main rank, with matplotlib)
        "memory": memory_fit.record(plan, peak),
    }
    if is_main:
        if loss_curve(
            out / "loss_curve.png",
            [(r["step"], r["loss"]) for r in rows if r.get("loss") is not None],
            rewards=[(r["step"], r["reward_mean"]) for r in rows if r.get("reward_mean") is not None],
            title=f"GRPO ({cfg.tuning}) of {Path(cfg.model).name}",
        ):
            summary["loss_curve"] = str(out / "loss_curve.png")
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def _mean(values: list[Any]) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float))]
    return round(sum(vals) / len(vals), 4) if vals else None
