"""Shared by the fake framework scripts: record how a script was called, write files as the real one would.

The fake checkouts stand in for MindSpeed-LLM and MindSpeed-RL (which need NPUs) in the job tests. Each
script records its argv, cwd, rank and a few environment variables as one JSON line in $FAKE_RECORD,
checks the inputs the real script would read, and writes the outputs the real script writes, so the
job's driver, resume logic and launch path run for real around them.
"""

import json
import os
import sys
import time

WATCHED = ("NODE_RANK", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "NNODES", "NPROC_PER_NODE",
           "HCCL_CONNECT_TIMEOUT", "TASK_QUEUE_ENABLE", "CUDA_DEVICE_MAX_CONNECTIONS", "RAY_ADDRESS")


def record(script: str, **extra) -> None:
    path = os.environ.get("FAKE_RECORD")
    if not path:
        return
    doc = {"script": script, "argv": sys.argv[1:], "cwd": os.getcwd(), "time": time.time(), "pid": os.getpid(),
           "env": {k: os.environ[k] for k in WATCHED if k in os.environ}, **extra}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(doc) + "\n")


def flag(argv: list[str], name: str, default=None):
    if name in argv:
        i = argv.index(name)
        return argv[i + 1] if i + 1 < len(argv) else default
    return default


def need(path: str, what: str) -> None:
    if not os.path.exists(path):
        sys.exit(f"fake: {what} {path} does not exist")


def write(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def convert(argv: list[str]) -> None:
    """MindSpeed-LLM's convert_ckpt.py (also MindSpeed-RL's cli/convert_ckpt.py): HF -> mcore writes a
    Megatron release checkpoint, mcore -> HF writes <save-dir>/mg2hf (mindspeed_llm/tasks/checkpoint/saver.py)."""
    load, save = flag(argv, "--load-dir"), flag(argv, "--save-dir")
    record("convert_ckpt.py")
    if flag(argv, "--save-model-type") == "mg":
        need(os.path.join(load, "config.json"), "HF config")
        need(flag(argv, "--tokenizer-model"), "tokenizer model")
        tp, pp = int(flag(argv, "--target-tensor-parallel-size")), int(flag(argv, "--target-pipeline-parallel-size"))
        for t in range(tp):
            for p in range(pp):
                name = f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "")
                write(os.path.join(save, "release", name, "model_optim_rng.pt"), "fake weights\n")
        write(os.path.join(save, "latest_checkpointed_iteration.txt"), "release")
        return
    need(os.path.join(load, "latest_checkpointed_iteration.txt"), "Megatron tracker")
    if "--load-hf-from-config" not in argv:
        sys.exit("fake: the export builds the HF model from its config (--load-hf-from-config)")
    need(os.path.join(save, "config.json"), "HF config next to the export")
    with open(os.path.join(save, "config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    write(os.path.join(save, "mg2hf", "config.json"), json.dumps(config))
    write(os.path.join(save, "mg2hf", "model.safetensors"), "fake weights\n")
