"""``provision-train --config cfg.yaml [key=value ...] [--resume auto|PATH] [--json] [--check]``.

The config and the data files are validated before torch is imported, so a
bad input costs a fraction of a second and gives one line on stderr with
exit code 2. Under torchrun only rank 0 reports config errors (every rank
finds the same one).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import NoReturn

from provisioner.errors import ProvisionError
from provisioner.train.config import ConfigError, load_config
from provisioner.version import stamped

PROG = "provision-train"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"usage: {message} (see {PROG} --help)")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog=PROG,
        description="Supervised fine-tuning (full or LoRA) of a Hugging Face causal LM on NPU, CUDA or CPU.",
        epilog="Launch on several devices with: torchrun --nproc-per-node N -m provisioner.train --config cfg.yaml",
    )
    p.add_argument("--config", help="YAML config file")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="override config keys, e.g. lora.r=16")
    p.add_argument(
        "--resume", default=None, help="'auto' (newest complete checkpoint, if any) or a checkpoint dir"
    )
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout at the end")
    p.add_argument(
        "--check", action="store_true", help="validate config and data, print the memory plan, then exit"
    )
    p.add_argument(
        "--world-size",
        type=int,
        default=None,
        help="devices the memory plan of --check assumes (default: WORLD_SIZE, else 1)",
    )
    return p


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except ProvisionError as exc:
        if _rank() == 0 or not isinstance(exc, ConfigError):
            prefix = f"{PROG}: error: " if _rank() == 0 else f"{PROG}: [rank {_rank()}] error: "
            print(prefix + " ".join(str(exc).split()), file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    args = _parser().parse_intermixed_args(argv)  # key=value overrides before or after options
    if args.config is None and not args.overrides:
        raise ConfigError("usage: give --config FILE and/or key=value overrides (see provision-train --help)")
    cfg = load_config(args.config, args.overrides)

    # Parse every record now: a broken line fails here, before any model is loaded.
    if cfg.method == "grpo":
        from provisioner.train.grpo.data import check_records, load_prompts

        train = load_prompts(cfg.data, cfg.data_format)
        check_records(train, cfg.grpo.rewards)
        n_train = len(train)
        n_eval = len(load_prompts(cfg.eval_data, cfg.data_format)) if cfg.eval_data else 0
    else:
        from provisioner.train.data import load_conversations

        n_train = len(load_conversations(cfg.data, cfg.data_format))
        n_eval = len(load_conversations(cfg.eval_data, cfg.data_format)) if cfg.eval_data else 0
    if args.check:
        return _check(cfg, args, n_train, n_eval)

    from provisioner.train.device import prepare_env

    prepare_env()  # before torch is imported
    logging.basicConfig(
        level=logging.INFO if _rank() == 0 else logging.WARNING,
        format=f"{PROG}: %(message)s",
        stream=sys.stderr,
    )
    from provisioner.train.loop import run

    summary = run(cfg, args.resume)
    if args.json and _rank() == 0:
        print(json.dumps(stamped(summary)))
    return 0


def _check(cfg, args: argparse.Namespace, n_train: int, n_eval: int) -> int:
    """--check: the memory plan for the card the config names (or, without one, no verdict)."""
    from provisioner.train import memory_fit as memory

    world = args.world_size or int(os.environ.get("WORLD_SIZE", "1"))
    if world < 1:
        raise ConfigError(f"--world-size: must be >= 1 (got {world})")
    capacity, label, bf16 = (None, "", None)
    if cfg.card:
        capacity, label, bf16 = memory.card_capacity(cfg.card)
    precision = cfg.precision
    if precision == "auto":
        precision = "bf16" if bf16 is not False else "fp16"
    # The rollout and what the chip already holds, as the run on the card's device will find them.
    from provisioner.train.requirements import vllm_rollout

    vllm, _ = vllm_rollout(cfg, "npu")
    plan = memory.plan(cfg, world, precision, capacity, label, vllm=vllm,
                       held=memory.held_memory(cfg.card) if cfg.card else None)
    refused = plan.fits is False and cfg.memory_check
    result = {
        "status": "refused" if refused else "ok",
        "train_records": n_train,
        "eval_records": n_eval,
        "memory": plan.to_dict(),
    }
    if args.json:
        print(json.dumps(stamped(result)))
    else:
        print(f"{PROG}: config and data ok ({n_train} records)")
        print("\n".join(plan.lines()))
    if refused:
        raise ConfigError(memory.refusal(plan))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
