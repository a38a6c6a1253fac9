"""The one-minute self-test of an image on a host: does training work on these chips, with this config?

    torchrun --nproc-per-node N -m provisioner.train.selftest [--config train.yaml] [key=value ...] [--json]

(`provision selftest` and `provision launch --selftest` run it in the image with one worker per mapped chip.)
Each worker checks, in order, and rank 0 prints one line per check with the fix when it fails:

  npu              torch_npu loads, the chips are visible, the SoC and what the trainer derives from it
  matmul           fp16 and (where the chip has it) bf16 matmuls against an fp32 reference on the host
  hbm              a pattern written over a large share of the chip's free memory in chunks, read back and
                   compared (words that differ, the first one's place) and timed (write and read GB/s); every
                   worker on its own chip at once (hbm.py, sizes in selftest.yaml; on the CPU a small buffer)
  attention        the attention the config chooses, forward and backward on a packed batch of 3 sequences,
                   which must match the same sequences run one by one
  fused-optimizer  two steps of torch_npu's fused AdamW with the trainer's zero_grad in between
  all-reduce       a sum over every worker on the process-group backend (HCCL on the NPU), then a sweep of
                   message sizes (selftest.yaml, up to 256 MiB on the NPU): algbw and busbw per size, busbw at
                   the largest (allreduce.py)
  train-steps      three optimizer steps of a tiny Qwen2 with the config's method, precision, strategy,
                   optimizer and attention, through the trainer's own engine for that strategy (DDP, DeepSpeed
                   ZeRO-2/ZeRO-3 or FSDP2, over every worker); a strategy the trainer refuses up front (a
                   missing library, FSDP2 on a torch_npu without it) fails here with the same reason

With several workers, every worker posts its npu result to torchrun's store before any collective: a worker
whose chip failed cannot join the process group, so then no worker runs all-reduce or train-steps (the others
still run their own chip's checks), and rank 0 reports which ranks failed instead of waiting for them.
The results reach rank 0 through the same store.

On a machine without an NPU the NPU checks say "n/a" and the others run on the CPU (gloo). The config is the
user's trainer config; only how it trains is used (model, data and output_dir are not needed). The last
line of rank 0 is a `provision.selftest/1` JSON document (selftest_report: results, fixes, the exchange
between workers, the document). Exit code: 0 when nothing failed, 1 otherwise,
2 for a bad config.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from provisioner.errors import ProvisionError
from provisioner.train.config import CHOICES, ConfigError, TrainConfig, from_dict
from provisioner.train.selftest_report import (
    CHECKS,
    Exchange,
    Result,
    document,
    fix_for,
    gather,
    lines,
)

# A one-minute test must not wait an hour for a broken link: HCCL's connect and execution timeouts are capped
# at this many seconds (launch sets 3600), and the process group waits twice as long.
HCCL_TIMEOUT_CAP_S = 300
# How long a worker waits for the others' npu results, and then for their last results (the checks between
# are on one chip each; the collectives have their own timeouts).
NPU_WAIT_S = HCCL_TIMEOUT_CAP_S
RESULTS_WAIT_S = 2 * HCCL_TIMEOUT_CAP_S
PROG = "provision selftest"


def load(path: str | None, overrides: list[str]) -> TrainConfig:
    """The user's trainer config, checked for how it trains (choices and ranges), not for its paths."""
    from provisioner.train import config as cfgmod

    raw: dict[str, Any] = cfgmod._read_yaml(Path(path)) if path else {}
    for item in overrides:
        key, value = cfgmod._parse_override(item)
        cfgmod._set_dotted(raw, key, value)
    cfg = from_dict(raw)
    for name, allowed in CHOICES.items():
        if getattr(cfg, name) not in allowed:
            raise ConfigError(f"config: {name}: must be one of {', '.join(allowed)} (got {getattr(cfg, name)!r})")
    if cfg.npu_jit_compile not in (True, False, "auto"):
        raise ConfigError(f"config: npu_jit_compile: must be true, false or auto (got {cfg.npu_jit_compile!r})")
    return cfg


class SelfTest:
    def __init__(self, cfg: TrainConfig, all_reduce_mib: tuple[float, ...] | None = None,
                 hbm_cap: int | None = None) -> None:
        from provisioner.train import dist

        self.cfg = cfg
        self.all_reduce_mib = all_reduce_mib  # None: the sweep in selftest.yaml
        self.hbm_cap = hbm_cap  # bytes; None: the share of free memory in selftest.yaml
        self.world = dist.from_env()
        self.results: list[Result] = []
        self.dev: Any = None
        self.prec: Any = None
        self.attn: str | None = None
        self._model_dir: str | None = None
        self.exchange: Exchange | None = None
        self.npu_failed_on: list[int] = []  # the other ranks whose npu check failed (or never finished)
        self.npu_reported: list[int] = list(range(self.world.size))  # ranks that finished the npu check

    def run(self) -> list[Result]:
        steps: list[tuple[str, Callable[[], Result]]] = [
            ("npu", self.check_npu), ("matmul", self.check_matmul), ("hbm", self.check_hbm),
            ("attention", self.check_attention),
            ("fused-optimizer", self.check_fused_optimizer), ("all-reduce", self.check_all_reduce),
            ("train-steps", self.check_train_steps),
        ]
        for name, fn in steps:
            if self.results and self.results[0].status == "fail":
                self.results.append(Result(name, "n/a", "skipped: the npu check failed", rank=self.world.rank))
                continue
            if name in ("all-reduce", "train-steps") and self.npu_failed_on:
                # Those workers have no chip to join the collectives with: running them would wait for them.
                ranks = ",".join(map(str, self.npu_failed_on))
                self.results.append(Result(name, "n/a", f"skipped: the npu check failed on rank {ranks}",
                                           rank=self.world.rank))
                continue
            if name == "all-reduce" and self.dev is not None:
                self._tiny_model_dir_only()
            start = time.perf_counter()
            try:
                res = fn()
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - every failure is a result, not a crash
                text = " ".join(f"{type(exc).__name__}: {exc}".split())[:600]
                res = Result(name, "fail", error=text, fix=fix_for(text, DEFAULT_FIX[name]))
                if os.environ.get("PROVISION_SELFTEST_TRACEBACK"):
                    traceback.print_exc()
            res.seconds = round(time.perf_counter() - start, 3)
            res.rank = self.world.rank
            self.results.append(res)
            if name == "npu" and self.world.size > 1:
                self._agree_on_npu()
        return self.results

    def _agree_on_npu(self) -> None:
        """Every worker's npu result, through torchrun's store (no process group: a worker whose chip failed
        cannot join one), so that all workers skip the collectives when any of them failed."""
        try:
            self.exchange = Exchange(self.world, NPU_WAIT_S)
        except Exception:  # noqa: BLE001 - no store: the all-reduce check reports the same problem
            if os.environ.get("PROVISION_SELFTEST_TRACEBACK"):
                traceback.print_exc()
            return
        mine = self.results[0]
        seen = self.exchange.share("npu", asdict(mine), range(self.world.size), NPU_WAIT_S)
        self.npu_reported = sorted(seen)
        self.npu_failed_on = [r for r in range(self.world.size) if r != self.world.rank
                              and (r not in seen or seen[r]["status"] == "fail")]

    def gather(self) -> list[list[Result]]:
        """Every rank's results on rank 0 (through the store), else this rank's. A rank that did not finish its
        npu check in time is reported as failing it."""
        if self.exchange is None:
            return gather(self.results)
        seen = self.exchange.share("results", [asdict(r) for r in self.results], self.npu_reported, RESULTS_WAIT_S)
        per_rank = []
        for r in range(self.world.size):
            if r in seen:
                per_rank.append([Result(**x) for x in seen[r]])
                continue
            if r in self.npu_reported:
                error = f"rank {r} sent no results within {RESULTS_WAIT_S} s"
                per_rank.append([Result(name, "fail", error=error, fix=DEFAULT_FIX[name], rank=r) if name == "train-steps"
                                 else Result(name, "n/a", "no results from this rank", rank=r) for name in CHECKS])
                continue
            error = f"rank {r} did not finish the npu check within {NPU_WAIT_S} s"
            per_rank.append([Result("npu", "fail", error=error, fix=NPU_HUNG_FIX, rank=r)]
                            + [Result(name, "n/a", "skipped: the npu check failed", rank=r) for name in CHECKS[1:]])
        return per_rank

    def printed(self) -> None:
        """Rank 0 has printed: the others may exit (torchrun stops every worker when one exits with an error,
        so a worker that failed must not exit before rank 0 has printed)."""
        if self.exchange is not None:
            self.exchange.done(self.world.rank)

    # ---- the checks ----------------------------------------------------------------------------------

    def check_npu(self) -> Result:
        from provisioner.train import device as devmod

        devmod.prepare_env()
        self.dev = devmod.detect(self.world.local_rank, self.cfg.npu_jit_compile)
        self.prec = devmod.choose_precision(self.cfg.precision, self.dev)
        if self.dev.type != "npu":
            if not devmod.cann_present():
                return Result("npu", "n/a", f"no CANN toolkit in this container: running on {self.dev.type}")
            # An image with CANN expects a chip: say why torch_npu has none.
            raise RuntimeError(_why_no_npu())
        import torch

        fam = self.dev.soc_family
        mode = "Inf/NaN mode" if self.dev.inf_nan else "saturation mode (overflow only in the status flag)"
        ops = {True: "online compilation", False: "binary operators", None: "CANN's default compile mode"}
        bf16 = "bf16" if devmod.bf16_supported(self.dev) else "no bf16"
        detail = (f"{torch.npu.device_count()} x {self.dev.name} ({fam.title if fam else 'unknown family'}); "
                  f"{bf16}, {mode}, {ops[self.dev.jit_compile]}; trains in {self.prec.name}")
        return Result("npu", "ok", detail)

    def check_matmul(self) -> Result:
        if self.dev is None or self.dev.type != "npu":
            return Result("matmul", "n/a", "no NPU")
        import torch

        from provisioner.train import device as devmod

        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)
        want = a @ b
        parts = []
        dtypes = [torch.float16] + ([torch.bfloat16] if devmod.bf16_supported(self.dev) else [])
        for dtype in dtypes:
            got = (a.to(self.dev.torch_device, dtype) @ b.to(self.dev.torch_device, dtype)).float().cpu()
            err = float((got - want).abs().max() / want.abs().max())
            limit = 1e-2 if dtype == torch.float16 else 4e-2
            if not math.isfinite(err) or err > limit:
                raise RuntimeError(f"{str(dtype)[6:]} matmul differs from the fp32 reference by {err:.3g} (limit {limit})")
            parts.append(f"{str(dtype)[6:]} ok (max rel err {err:.1e})")
        if len(dtypes) == 1:
            parts.append("bf16 not on this chip")
        return Result("matmul", "ok", ", ".join(parts))

    def check_hbm(self) -> Result:
        from provisioner.train import hbm

        self._require_device()
        dev = self.dev
        where = f"{dev.type}:{dev.index}" if dev.type != "cpu" else "cpu"
        got = hbm.stress(hbm.plan(dev.type, hbm.free_bytes(dev), self.hbm_cap), dev.torch_device, lambda: _sync(dev))
        got["device"] = where
        size = f"{got['bytes'] / (1 << 30):.2f} GiB in {got['chunks']} chunk(s), {got['passes']} passes"
        speed = f"write {got['write_gbps']:.1f} GB/s, read {got['read_gbps']:.1f} GB/s"
        if got["mismatches"]:
            bad = got["first_bad"]
            offset = bad["chunk"] * got["chunk_bytes"] + bad["word"] * hbm.WORD
            return Result("hbm", "fail", error=f"{where}: {got['mismatches']} word(s) read back differ from the pattern"
                          f" written (first at byte {offset} of the {size}, pass {bad['pass'] + 1})",
                          fix=DEFAULT_FIX["hbm"], figures=got)
        kind = "" if dev.type != "cpu" else " (host memory: no HBM on the CPU)"
        return Result("hbm", "ok", f"{where}: {size} read back intact; {speed}{kind}", figures=got)

    def check_attention(self) -> Result:
        import torch

        from provisioner.train import attention, model
        from provisioner.train.device import autocast

        self._require_device()
        self.attn = attention.pick_attention(self.cfg.attn_implementation, self.dev)
        attention.npu_flash_fixes(self.dev, self.prec, self.attn)
        loss_fn = model.SFTLoss(self._tiny_model("full", self.attn), 0)
        exs = _examples([11, 7, 5], seed=1)
        tol = 1e-4 if self.prec.name == "fp32" else 3e-2
        if not model.packing_works(loss_fn, self.dev, autocast(self.dev, self.prec), self.attn, VOCAB, tol):
            raise RuntimeError(f"{self.attn}: a packed batch differs from its sequences run one by one "
                               "(packed samples see each other)")
        batch = model.make_batch(exs, [[0, 1, 2]], True, 0, self.attn).to(self.dev.torch_device)
        with autocast(self.dev, self.prec):
            loss = loss_fn(*batch.inputs())
        loss.backward()
        grads = [p.grad for p in loss_fn.parameters() if p.grad is not None]
        if not grads or not all(bool(torch.isfinite(g.float()).all()) for g in grads):
            raise RuntimeError(f"{self.attn}: backward gave no or non-finite gradients")
        kernel = " (npu_fusion_attention)" if self.dev.type == "npu" and self.attn in attention.FLASH else ""
        return Result("attention", "ok", f"{self.attn}{kernel} in {self.prec.name}: packed forward matches, "
                                         f"backward finite")

    def check_fused_optimizer(self) -> Result:
        if self.dev is None or self.dev.type != "npu":
            return Result("fused-optimizer", "n/a", "no NPU")
        import torch

        from provisioner.train import optim

        if optim.optimizer_kind(self.cfg, self.dev) != "npu_fused_adamw":
            return Result("fused-optimizer", "n/a", f"the config's optimizer is {self.cfg.optimizer}")
        lin = torch.nn.Linear(32, 32).to(self.dev.torch_device)
        opt = optim.build_optimizer(lin, self.cfg, self.dev)
        x = torch.randn(8, 32).to(self.dev.torch_device)
        before = lin.weight.detach().cpu().clone()
        for step in range(2):
            lin(x).pow(2).mean().backward()
            opt.step()
            optim.zero_grad(opt)
            if any(float(p.grad.abs().sum()) != 0.0 for p in lin.parameters() if p.grad is not None):
                raise RuntimeError(f"gradients not zero after zero_grad (step {step + 1})")
        if torch.equal(before, lin.weight.detach().cpu()):
            raise RuntimeError("the parameters did not change in two steps")
        return Result("fused-optimizer", "ok", f"{type(opt).__name__}: 2 steps, zero_grad keeps the combined buffers")

    def check_all_reduce(self) -> Result:
        from provisioner.train import allreduce, dist

        self._require_device()
        world = self.world
        if world.size == 1:
            return Result("all-reduce", "n/a", "one worker")
        dist.init(world, self.dev, 2 * HCCL_TIMEOUT_CAP_S)
        sweep = allreduce.plan(self.dev.type, self.all_reduce_mib)
        allreduce.check_sum(sweep.sizes[0], self.dev.torch_device, world.rank, world.size)
        rows = allreduce.sweep(sweep, self.dev.torch_device, world.size, lambda: _sync(self.dev))
        note = "" if self.dev.type == "npu" else "; HCCL not applicable on CPU"
        largest = rows[-1]
        return Result("all-reduce", "ok", f"{world.size} workers on {self.dev.backend}: {allreduce.summary(rows)}"
                                          f"{note}",
                      figures={"sizes": rows, "busbw_gbps": largest["busbw_gbps"], "bytes": largest["bytes"],
                               "warmup": sweep.warmup, "iters": sweep.iters})

    def check_train_steps(self) -> Result:

        from provisioner.train import attention, model, requirements, zero
        from provisioner.train import strategy as strat
        from provisioner.train.device import autocast

        self._require_device()
        if self.world.size > 1 and not self._all_ranks_ok():
            # Some worker would not reach the steps' collectives and the others would wait for it.
            return Result("train-steps", "n/a", "skipped: a worker failed an earlier check")
        cfg = self.cfg
        zero.check_supported(self.dev, self.prec, cfg.strategy)
        problem = requirements.strategy_problem(cfg)  # what the trainer refuses up front, refused here too
        if problem:
            raise ConfigError(problem)
        attn = self.attn or attention.pick_attention(cfg.attn_implementation, self.dev)
        # The trainer's own path for the config's strategy: sharded ones load on the host, their engine places
        # the shards (every rank builds the same engine, so the strategy's collectives run on every worker).
        on_host = strat.loads_on_host(cfg)
        loss_fn = model.SFTLoss(self._tiny_model(cfg.method, attn, strat.host_view(self.dev) if on_host else None), 0)
        loss_fn.train()
        small = replace(cfg, learning_rate=1e-3, warmup_steps=0)
        engine = strat.make_engine(loss_fn, small, self.dev, self.prec, self.world, 3)
        exs = _examples([40, 24, 16, 30, 12, 20], seed=2 + self.world.rank)
        losses = []
        for step in range(3):
            rows = [[(2 * step) % 6, (2 * step + 1) % 6]]
            b = model.make_batch(exs, rows, True, 0, attn).to(self.dev.torch_device)
            with autocast(self.dev, self.prec):
                loss_sum = engine.forward(b)
            engine.backward(loss_sum / b.n_targets)
            engine.step()
            losses.append(float(loss_sum.detach()) / b.n_targets)
        if not all(math.isfinite(v) for v in losses):
            raise RuntimeError(f"non-finite loss in three steps: {losses}")
        scale = f", loss scale {engine.loss_scale:g}" if engine.loss_scale is not None else ""
        opt = type(getattr(engine, "optimizer", None)).__name__
        return Result("train-steps", "ok", f"{cfg.method}, {self.prec.name}, {engine.name}, {attn}, {opt}: loss "
                                           f"{losses[0]:.3f} -> {losses[-1]:.3f}{scale}")

    # ---- helpers -------------------------------------------------------------------------------------

    def _all_ranks_ok(self) -> bool:
        """Did every worker pass its checks so far? (All must, or the training steps' collectives hang.)"""
        from provisioner.train import dist

        mine = float(any(r.status == "fail" for r in self.results))
        return dist.all_reduce_sum([mine], self.dev)[0] == 0.0

    def _tiny_model_dir_only(self) -> None:
        """Write the tiny model now if no check did yet (before the process group exists)."""
        if self._model_dir is None:
            try:
                self._tiny_model("full", "eager")
            except Exception:  # noqa: BLE001 - the train-steps check reports it
                pass

    def _require_device(self) -> None:
        if self.dev is None:
            raise RuntimeError("no device: the npu check failed")

    def _tiny_model(self, method: str, attn: str, dev: Any = None) -> Any:
        """A random Qwen2 with a small vocabulary, saved once (before any process group: transformers writes
        checkpoints from the main process only) and loaded through the trainer's own load path."""
        import torch
        from transformers import Qwen2Config, Qwen2ForCausalLM

        from provisioner.train import model

        if self._model_dir is None:
            self._model_dir = tempfile.mkdtemp(prefix="provision-selftest-")
            torch.manual_seed(0)
            config = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                 tie_word_embeddings=True, pad_token_id=0)
            Qwen2ForCausalLM(config).save_pretrained(self._model_dir)
        return model.load_model(replace(self.cfg, model=self._model_dir, method=method), dev or self.dev, self.prec,
                                attn)


VOCAB = 512
NPU_HUNG_FIX = ("the chip did not answer (busy or hung): stop other processes on it (npu-smi info shows them) or"
                " reset it, then run the self-test again")
DEFAULT_FIX = {
    "npu": "check that the image's torch_npu matches its CANN and the host driver (provision doctor inside the image)",
    "matmul": "the chip computes wrong results: run npu-smi info and the vendor's hardware check on it",
    "hbm": "the chip's memory returns wrong data: take it out of jobs (--devices / ASCEND_RT_VISIBLE_DEVICES) and send"
           " `npu-smi info -t ecc -i N` and the device log (msnpureport) to the hardware vendor",
    "attention": "set attn_implementation: sdpa (or auto) in the config",
    "fused-optimizer": "set optimizer: adamw in the config, and report the torch_npu version",
    "all-reduce": "check the chips' links (hccn_tool -i N -link -g) and the HCCL variables provision launch sets",
    "train-steps": "run provision-train with this config on one chip and read the first error",
}


def _examples(lengths: list[int], seed: int) -> list[Any]:
    import numpy as np

    from provisioner.train.chatml import Example

    g = np.random.default_rng(seed)
    out = []
    for n in lengths:
        trained = np.zeros(n, dtype=bool)
        trained[n // 2:] = True
        out.append(Example(g.integers(1, VOCAB, n).astype(np.int32), trained))
    return out


def _why_no_npu() -> str:
    try:
        import torch
        import torch_npu  # noqa: F401

        count = torch.npu.device_count()
    except Exception as exc:  # noqa: BLE001 - the reason is the answer
        return f"CANN is set up but torch_npu does not load: {type(exc).__name__}: {exc}"
    shown = os.environ.get("ASCEND_RT_VISIBLE_DEVICES", "<unset>")
    return f"CANN is set up but torch_npu sees no NPU ({count} visible, ASCEND_RT_VISIBLE_DEVICES={shown})"


def _sync(dev: Any) -> None:
    from provisioner.train import device as devmod

    devmod.synchronize(dev)


def _quiet_libraries() -> None:
    """One line per check: no progress bars or deprecation chatter from the libraries."""
    import warnings

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except Exception:  # noqa: BLE001 - an older transformers: the bars stay
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m provisioner.train.selftest", description=__doc__.splitlines()[0])
    ap.add_argument("--config", help="the trainer config (YAML) whose method, precision, strategy and attention to test")
    ap.add_argument("overrides", nargs="*", metavar="key=value")
    ap.add_argument("--json", action="store_true", help="only the JSON document on stdout")
    ap.add_argument("--all-reduce-mib", metavar="SIZES",
                    help="all-reduce message sizes in MiB, e.g. 1,16,256 (default: provisioner/train/selftest.yaml)")
    ap.add_argument("--hbm-mib", metavar="MIB",
                    help="cover at most this much memory per chip in the HBM stress (default: a share of the free"
                         " memory, provisioner/train/selftest.yaml)")
    args = ap.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        cfg = load(args.config, args.overrides)
        from provisioner.train import allreduce, hbm

        sizes = allreduce.parse_mib(args.all_reduce_mib) if args.all_reduce_mib else None
        hbm_cap = hbm.parse_mib(args.hbm_mib) if args.hbm_mib else None
    except (ProvisionError, ValueError) as exc:
        if rank == 0:
            print(f"{PROG}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    from provisioner.train import device as devmod

    devmod.prepare_env()  # before torch is imported
    for var in ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT"):
        value = os.environ.get(var, "")
        if not value.isdigit() or int(value) == 0 or int(value) > HCCL_TIMEOUT_CAP_S:
            os.environ[var] = str(HCCL_TIMEOUT_CAP_S)
    _quiet_libraries()
    test = SelfTest(cfg, sizes, hbm_cap)
    results = test.run()
    try:
        per_rank = test.gather()
    except Exception:  # noqa: BLE001 - a broken process group or store: report what this rank saw
        per_rank = [results]
    doc = document(per_rank, test.world.size)
    if rank == 0:
        if not args.json:
            for line in lines(doc):
                print(f"selftest: {line}", flush=True)
        print(json.dumps(doc, separators=(",", ":")), flush=True)
    test.printed()
    from provisioner.train import dist

    dist.shutdown()
    return 0 if doc["status"] == "ok" else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
