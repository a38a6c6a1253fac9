"""The training run: set up, train, evaluate, checkpoint, export.

Loss normalisation: every optimizer step first sums the target tokens of all
its micro-batches over all ranks; each micro-batch then backpropagates
``loss_sum * world_size / global_targets``. After DDP's gradient averaging
the update is exactly the per-token mean over the whole step, however the
tokens were split into micro-batches, packed rows or ranks. That is what
makes packed and unpacked training agree and a resumed run match an
uninterrupted one.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from provisioner.train import ascend, dist, memory, memory_fit
from provisioner.train import checkpoint as ckpt
from provisioner.train import device as devmod
from provisioner.train import strategy as strat
from provisioner.train.attention import FLASH, npu_flash_fixes, pick_attention
from provisioner.train.chatml import resolve_template, tokenize
from provisioner.train.config import ConfigError, TrainConfig, dump_config
from provisioner.train.data import Conversation, load_conversations
from provisioner.train.metrics import MetricsLog, Progress, micro_batch_flops, peak_tflops, read_metrics
from provisioner.train.model import (
    SFTLoss,
    flop_shape,
    inner_model,
    load_model,
    load_tokenizer,
    make_batch,
    packing_works,
)
from provisioner.train.plot import loss_curve
from provisioner.train.sampler import MicroBatchStream, steps_for_epochs

log = logging.getLogger("provision-train")


@dataclass
class Window:
    """Accumulates what the next metrics line reports."""

    steps: int = 0
    time_s: float = 0.0
    tokens: float = 0.0
    flops: float = 0.0
    loss_parts: list[torch.Tensor] = field(default_factory=list)
    targets: float = 0.0


def run(cfg: TrainConfig, resume: str | None = None) -> dict[str, Any]:
    if cfg.method == "grpo":
        from provisioner.train.grpo.trainer import run_grpo

        return run_grpo(cfg, resume)
    world = dist.from_env()
    dev = devmod.detect(world.local_rank, cfg.npu_jit_compile)
    dist.init(world, dev, dist.timeout_s(cfg.dist_timeout_s, dev))
    try:
        return Trainer(cfg, world, dev).train(resume)
    finally:
        dist.shutdown()


def split_eval(
    convs: list[Conversation], fraction: float, seed: int
) -> tuple[list[Conversation], list[Conversation]]:
    if fraction <= 0 or len(convs) < 2:
        return convs, []
    n_eval = min(len(convs) - 1, max(1, int(round(fraction * len(convs)))))
    order = np.random.default_rng([seed, 7]).permutation(len(convs))
    held = set(order[:n_eval].tolist())
    return [c for i, c in enumerate(convs) if i not in held], [c for i, c in enumerate(convs) if i in held]


class Trainer:
    def __init__(self, cfg: TrainConfig, world: dist.World, dev: devmod.DeviceInfo) -> None:
        self.cfg, self.world, self.dev = cfg, world, dev
        self.out = Path(cfg.output_dir)
        self.data_seed = cfg.data_seed if cfg.data_seed is not None else cfg.seed

    # ---- setup -------------------------------------------------------------------------

    def _prepare_data(self) -> None:
        cfg = self.cfg
        self.tokenizer = load_tokenizer(cfg.tokenizer or cfg.model, cfg.trust_remote_code)
        self.template = resolve_template(cfg.template, self.tokenizer)
        convs = load_conversations(cfg.data, cfg.data_format)
        eval_convs = load_conversations(cfg.eval_data, cfg.data_format) if cfg.eval_data else []
        if cfg.eval_split > 0:
            convs, eval_convs = split_eval(convs, cfg.eval_split, self.data_seed)
        kw: dict[str, Any] = dict(
            max_seq_len=cfg.max_seq_len,
            system_prompt=cfg.system_prompt,
            mask_history=cfg.mask_history,
            train_on_prompt=cfg.train_on_prompt,
            template=self.template,
        )
        self.train_ex, self.dropped = tokenize(convs, self.tokenizer, **kw)
        self.eval_ex, _ = tokenize(eval_convs, self.tokenizer, **kw) if eval_convs else ([], 0)
        if not self.train_ex:
            raise ConfigError(
                f"config: data: no usable samples ({len(convs)} read; every prompt fills max_seq_len={cfg.max_seq_len})"
            )
        self.pad_id = int(self.tokenizer.pad_token_id)
        self.train_targets = [e.n_targets for e in self.train_ex]

    def _plan_memory(self) -> None:
        """The memory plan against this device, before any weight is loaded; refuse what cannot fit."""
        cfg, dev = self.cfg, self.dev
        self.prec = devmod.choose_precision(cfg.precision, dev)
        from provisioner.train import zero

        zero.check_supported(dev, self.prec, cfg.strategy)
        self.attn = pick_attention(cfg.attn_implementation, dev)
        for line in npu_flash_fixes(dev, self.prec, self.attn):
            self._info(line)
        if self.attn == "sdpa" and cfg.packing is not False:
            # No varlen kernel here: attend per packed sequence instead of over a masked row.
            from provisioner.train import packed_attention

            if packed_attention.usable(memory.read_model_config(cfg.model)) and packed_attention.register():
                self.attn = packed_attention.NAME
        capacity: float | None
        if cfg.card:
            capacity, label, _ = memory_fit.card_capacity(cfg.card)
        else:
            capacity, label = memory_fit.device_capacity(dev)
            if dev.type == "cpu" and capacity:  # the ranks of this host share it
                capacity /= max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        targets = memory_fit.max_targets(
            [len(e) for e in self.train_ex], [e.n_targets for e in self.train_ex], cfg.packing is not False
        )
        self.plan = memory_fit.plan(
            cfg, self.world.size, self.prec.name, capacity, label, self.attn, dev.type, targets=targets,
            held=memory_fit.held_memory(cfg.card, dev),
        )
        for line in self.plan.lines():
            self._info(line)
        if self.plan.fits is False:
            if cfg.memory_check:
                raise ConfigError(memory_fit.refusal(self.plan))
            self._info("memory_check is off: running a plan that does not fit")

    def _prepare_model(self) -> None:
        cfg, dev = self.cfg, self.dev
        self.meter = memory_fit.PeakMeter(dev.type)
        on_host = strat.loads_on_host(cfg)
        self.model = load_model(cfg, strat.host_view(dev) if on_host else dev, self.prec, self.attn,
                                checkpointed=self.plan.setup.checkpointed)
        self.loss_fn = SFTLoss(self.model, cfg.loss_chunk_tokens)
        vocab = inner_model(self.model).get_input_embeddings().weight.shape[0]
        if cfg.packing is False:
            self.packing = False
        else:
            tol = 1e-4 if self.prec.name == "fp32" else 3e-2
            if on_host:
                dtype = self.prec.dtype if cfg.method == "lora" else torch.float32
                ok = strat.twin_packing_works(self.model, dev, self._autocast(), self.attn, dtype, tol)
            else:
                ok = packing_works(self.loss_fn, dev, self._autocast(), self.attn, vocab, tol)
            if cfg.packing is True and not ok:
                raise ConfigError(
                    f"config: packing: {self.attn} attention of this model lets packed samples see each other; "
                    "set packing: false"
                )
            if not ok:
                self._info("packing disabled: this model/attention does not keep packed samples apart")
            self.packing = ok
        # One varlen npu_fusion_attention call takes at most so many sequences: cap a flat packed batch.
        self.max_seqs = (
            ascend.max_varlen_sequences() if dev.type == "npu" and self.attn in FLASH and self.packing else None
        )
        self.shape = flop_shape(self.model, cfg.method == "full")
        self.peak = peak_tflops(dev.name, dev.type, self.prec.name, cfg.peak_tflops)

    def _make_engine(self, total_steps: int) -> Any:
        return strat.make_engine(self.loss_fn, self.cfg, self.dev, self.prec, self.world, total_steps)

    def _autocast(self) -> Any:
        return devmod.autocast(self.dev, self.prec)

    def _info(self, msg: str) -> None:
        if self.world.is_main:
            log.info(msg)

    # ---- the run -----------------------------------------------------------------------

    def train(self, resume: str | None) -> dict[str, Any]:
        cfg, world, dev = self.cfg, self.world, self.dev
        devmod.seed_all(cfg.seed)
        if world.is_main:
            self.out.mkdir(parents=True, exist_ok=True)
            ckpt.clean_stale(self.out)
        dist.barrier()
        self._prepare_data()
        self._plan_memory()
        self._prepare_model()

        G, W = cfg.gradient_accumulation_steps, world.size
        per_step = G * W
        self.stream = MicroBatchStream(
            [len(e) for e in self.train_ex],
            cfg.micro_batch_size,
            cfg.max_seq_len,
            self.packing,
            self.data_seed,
            max_seqs=self.max_seqs,
        )
        total_steps = cfg.max_steps or steps_for_epochs(self.stream, cfg.num_epochs, per_step)
        engine = self.engine = self._make_engine(total_steps)

        # Rank 0 decides (which checkpoint, or which error) so every rank does the same.
        verdict = self._resume_verdict(resume) if world.is_main else None
        kind, found = dist.broadcast_object(verdict)
        if kind == "error":
            raise ConfigError(found)
        start_step, consumed, tokens_base = 0, 0, 0
        self.local_tokens = 0  # this rank's tokens since start or resume
        if found is not None:
            start_step, consumed, tokens_base = self._load(Path(found), engine)
            self._info(f"resumed from {found} at step {start_step}")

        metrics = (
            MetricsLog(self.out / cfg.metrics_file, start_step if found else None) if world.is_main else None
        )
        if world.is_main:
            (self.out / "config.yaml").write_text(dump_config(cfg))
        bar = Progress(cfg.progress_bar, total_steps, start_step) if world.is_main else None

        self.loss_fn.train()
        win = Window()
        last: dict[str, Any] = {}
        last_ckpt: Path | None = Path(found) if found else None
        eval_loss: float | None = None
        t_run = time.perf_counter()
        devmod.reset_peak_memory(dev)
        step = start_step
        t_step = time.perf_counter()
        while step < total_steps:
            batches = [
                make_batch(
                    self.train_ex,
                    self.stream.get(consumed + g * W + world.rank),
                    self.packing,
                    self.pad_id,
                    self.attn,
                )
                for g in range(G)
            ]
            local_targets = sum(b.n_targets for b in batches)
            # Every rank knows the whole stream, so the step's global target count needs no collective.
            global_targets = self._targets_in(consumed, per_step)
            scale = W / global_targets
            for g, b in enumerate(batches):
                b = b.to(dev.torch_device)
                # Only the last micro-batch of a step all-reduces gradients.
                with engine.accumulating(g < G - 1):
                    with self._autocast():
                        loss_sum = engine.forward(b)
                    engine.backward(loss_sum * scale)
                win.loss_parts.append(loss_sum.detach())
                win.tokens += b.n_tokens
                win.flops += micro_batch_flops(self.shape, b.seq_lens, b.n_targets)
            win.targets += local_targets
            self.local_tokens += sum(b.n_tokens for b in batches)
            lr_used = engine.lr
            norm = engine.step()
            consumed += per_step
            step += 1
            win.steps += 1

            do_eval = bool(self.eval_ex) and (
                (cfg.eval_steps and step % cfg.eval_steps == 0) or step == total_steps
            )
            if step % cfg.logging_steps == 0 or step == total_steps or do_eval:
                devmod.synchronize(dev)
                win.time_s = time.perf_counter() - t_step
                record = self._summarise(win, step, norm, lr_used, consumed, engine)
                if do_eval:
                    eval_loss = self.evaluate()
                    record["eval_loss"] = eval_loss
                last = record
                if metrics is not None:
                    metrics.write(record)
                if bar is not None:
                    bar.update(step, record["loss"], record["tokens_per_s_per_device"])
                win = Window()
                t_step = time.perf_counter()
            if (cfg.save_steps and step % cfg.save_steps == 0) or step == total_steps:
                t_save = time.perf_counter()
                last_ckpt = self._save(step, consumed, tokens_base, engine)
                t_step += time.perf_counter() - t_save  # checkpoint time is not step time
        train_time = time.perf_counter() - t_run
        if bar is not None:
            bar.close()
        if metrics is not None:
            metrics.close()
        return self._finish(last, eval_loss, last_ckpt, found, train_time, total_steps, start_step, engine)

    def _resume_verdict(self, resume: str | None) -> tuple[str, str | None]:
        try:
            found = ckpt.find_resume(self.out, resume)
        except ConfigError as exc:
            return "error", str(exc)
        existing = ckpt.complete_checkpoints(self.out)
        if found is None and resume in (None, "", "none", "no") and existing:
            # A fresh run would mix its checkpoints (and their rotation) with the old ones.
            return "error", (
                f"config: output_dir: {self.out} already holds checkpoints (newest {existing[-1].name}); "
                "pass --resume auto to continue that run, or choose another output_dir"
            )
        return "ok", None if found is None else str(found)

    def _targets_in(self, start: int, count: int) -> int:
        return sum(
            self.train_targets[i]
            for idx in range(start, start + count)
            for row in self.stream.get(idx)
            for i in row
        )

    def _summarise(
        self,
        win: Window,
        step: int,
        norm: Any,
        lr: float,
        consumed: int,
        engine: Any,
    ) -> dict[str, Any]:
        dev, W = self.dev, self.world.size
        loss_local = float(torch.stack(win.loss_parts).sum()) if win.loss_parts else 0.0
        loss_sum, targets, tokens, flops = dist.all_reduce_sum(
            [loss_local, win.targets, win.tokens, win.flops], dev
        )
        per_step_time = win.time_s / max(1, win.steps)
        tps = tokens / max(win.time_s, 1e-9)
        mfu = None
        if self.peak:
            mfu = flops / max(win.time_s, 1e-9) / W / (self.peak * 1e12)
        epoch, offset = self.stream.locate(consumed)
        record: dict[str, Any] = {
            "step": step,
            "epoch": round(epoch + offset / max(1, self.stream.epoch_size(epoch)), 4),
            "loss": loss_sum / max(targets, 1.0),
            "lr": lr,
            "grad_norm": float(norm),
            "tokens_per_s": round(tps, 2),
            "tokens_per_s_per_device": round(tps / W, 2),
            "mfu": None if mfu is None else round(mfu, 4),
            "peak_mem_gib": round(devmod.peak_memory_gib(dev), 3),
            "step_time_s": round(per_step_time, 4),
            "tokens": int(tokens),
        }
        if engine.loss_scale is not None:
            record["loss_scale"] = engine.loss_scale
        return record

    def evaluate(self) -> float:
        """Mean token loss over the whole eval set, spread over the ranks."""
        W, r = self.world.size, self.world.rank
        stream = MicroBatchStream(
            [len(e) for e in self.eval_ex],
            self.cfg.micro_batch_size,
            self.cfg.max_seq_len,
            self.packing,
            0,
            shuffle=False,
            max_seqs=self.max_seqs,
        )
        total = torch.zeros((), dtype=torch.float64)
        targets = 0
        module: Any = getattr(self.engine, "eval_module", self.loss_fn)
        self.loss_fn.eval()
        with torch.no_grad(), self._autocast():
            for i in range(r, stream.epoch_size(0), W):
                b = make_batch(self.eval_ex, stream.get(i), self.packing, self.pad_id, self.attn).to(
                    self.dev.torch_device
                )
                total += module(*b.inputs()).double().cpu()
                targets += b.n_targets
        self.loss_fn.train()
        loss_sum, n = dist.all_reduce_sum([float(total), float(targets)], self.dev)
        return loss_sum / max(n, 1.0)

    # ---- checkpoints and export --------------------------------------------------------

    def _save(self, step: int, consumed: int, tokens_base: int, engine: Any) -> Path:
        world = self.world
        tokens_seen = tokens_base + int(dist.all_reduce_sum([float(self.local_tokens)], self.dev)[0])
        tmp = ckpt.begin(self.out, step, world.is_main)
        strat.save_hf_weights(self.model, engine, tmp, self.cfg.tuning, world)
        if world.is_main:
            ckpt.write_state(
                tmp,
                ckpt.Saved(step, consumed, world.size, tokens_seen, self.cfg.method),
                dump_config(self.cfg),
            )
        engine.save(tmp, world)
        ckpt.save_torch(devmod.rng_state(self.dev), tmp / "rng" / f"rank-{world.rank:05d}.pt")
        return ckpt.commit(tmp, step, self.cfg.save_total_limit, world.is_main)

    def _load(self, path: Path, engine: Any) -> tuple[int, int, int]:
        state = ckpt.read_state(path)
        if state.method != self.cfg.method:
            raise ConfigError(
                f"--resume: {path} was written by a method: {state.method} run, not {self.cfg.method}"
            )
        if engine.name in ("zero2", "zero3", "fsdp"):
            engine.load(path, self.dev)
        else:
            ckpt.load_weights(self.model, path, self.cfg.method)
            engine.load(path, self.dev)
        rng_file = path / "rng" / f"rank-{self.world.rank:05d}.pt"
        if rng_file.is_file() and state.world_size == self.world.size:
            devmod.set_rng_state(self.dev, ckpt.load_torch(rng_file, "cpu"))
        else:  # a different world size: fresh, but still deterministic, streams
            devmod.seed_all(self.cfg.seed + state.step * 1000 + self.world.rank)
        return state.step, state.consumed_micro_batches, state.tokens_seen

    def _finish(
        self,
        last: dict[str, Any],
        eval_loss: float | None,
        last_ckpt: Path | None,
        resumed_from: str | None,
        train_time: float,
        total_steps: int,
        start_step: int,
        engine: Any,
    ) -> dict[str, Any]:
        cfg = self.cfg
        final_dir = self.out / "final"
        merged_dir = self.out / "merged" if cfg.export_merged else None
        self._export(final_dir, merged_dir, engine)
        peak = self._measured_peak()
        curve: Path | None = None  # drawn by the main rank only, and only with matplotlib
        if self.world.is_main:
            rows = read_metrics(self.out / cfg.metrics_file)
            path = self.out / "loss_curve.png"
            drawn = loss_curve(
                path,
                [(r["step"], r["loss"]) for r in rows],
                [(r["step"], r["eval_loss"]) for r in rows if r.get("eval_loss") is not None],
                title=f"{cfg.method} fine-tuning of {Path(cfg.model).name} ({engine.name}, {self.world.size} device"
                + ("s)" if self.world.size > 1 else ")"),
            )
            curve = path if drawn else None
        dist.barrier()
        if not last and self._metric_rows():  # resumed from the final checkpoint: nothing left to run
            last = self._metric_rows()[-1]
        steady = [r for r in self._metric_rows() if r["step"] > start_step + 1] or self._metric_rows()
        summary = {
            "status": "ok",
            "steps": total_steps,
            "resumed_from": resumed_from,
            "final_loss": last.get("loss"),
            "eval_loss": eval_loss,
            "tokens_per_s_per_device": _mean([r["tokens_per_s_per_device"] for r in steady]),
            "mfu": _mean([r["mfu"] for r in steady if r.get("mfu") is not None]),
            "train_time_s": round(train_time, 3),
            "device": self.dev.name,
            "device_type": self.dev.type,
            "world_size": self.world.size,
            "precision": self.prec.name,
            "attn_implementation": self.attn,
            "packing": self.packing,
            "gradient_checkpointing": self.plan.checkpointing(self.cfg.gradient_checkpointing),
            "npu": devmod.npu_facts(self.dev, self.max_seqs),
            "template": self.template,
            "strategy": engine.name,
            "optimizer": type(getattr(engine, "optimizer", None)).__name__,
            "method": cfg.method,
            "train_samples": len(self.train_ex),
            "dropped_samples": self.dropped,
            "eval_samples": len(self.eval_ex),
            "output_dir": str(self.out),
            "metrics": str(self.out / cfg.metrics_file),
            "checkpoint": None if last_ckpt is None else str(last_ckpt),
            "final_dir": str(final_dir),
            "merged_dir": None if merged_dir is None else str(merged_dir),
            "loss_curve": None if curve is None else str(curve),
            "memory": memory_fit.record(self.plan, peak),
        }
        if self.world.is_main:
            (self.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        return summary

    def _metric_rows(self) -> list[dict[str, Any]]:
        path = self.out / self.cfg.metrics_file
        return read_metrics(path) if path.exists() else []

    def _export(self, final_dir: Path, merged_dir: Path | None, engine: Any) -> None:
        """Adapter or full weights plus tokenizer in ``final/``; merged full weights on request.
        Every rank calls this (the sharded strategies gather the weights first)."""
        import shutil

        if self.world.is_main:
            for d in (final_dir, merged_dir):
                if d is not None and d.exists():
                    shutil.rmtree(d)
        strat.save_hf_weights(self.model, engine, final_dir, self.cfg.tuning, self.world)
        if self.world.is_main:
            self.tokenizer.save_pretrained(str(final_dir))
            if merged_dir is not None and getattr(engine, "sharded", False):
                strat.merge_lora_export(self.cfg, final_dir, merged_dir, self.tokenizer)
            elif merged_dir is not None:
                merged = self.model.merge_and_unload()
                merged.save_pretrained(str(merged_dir), safe_serialization=True)
                self.tokenizer.save_pretrained(str(merged_dir))
        dist.barrier()

    def _measured_peak(self) -> float | None:
        """The largest peak over the ranks, in bytes, or None where it cannot be measured."""
        slots = [0.0] * self.world.size
        mine = self.meter.peak_bytes()
        slots[self.world.rank] = -1.0 if mine is None else mine
        every = dist.all_reduce_sum(slots, self.dev)
        peak = None if any(v < 0 for v in every) else max(every)
        self._info(
            f"memory: planned {self.plan.total / 2**30:.2f} GiB per device, measured peak "
            + ("n/a" if peak is None else f"{peak / 2**30:.2f} GiB")
        )
        return peak


def _mean(values: list[float]) -> float | None:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return round(sum(vals) / len(vals), 4) if vals else None
