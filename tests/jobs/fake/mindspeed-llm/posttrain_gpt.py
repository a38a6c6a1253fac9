"""Fake MindSpeed-LLM posttrain_gpt.py under torchrun: every rank joins a gloo process group and checks the
world size; rank 0 "trains" --train-iters iterations (FAKE_STEP_SECONDS each), saving a Megatron
checkpoint every --save-interval iterations and at the end, and resumes from --load as Megatron does
(without --finetune, from the tracker's iteration). As Megatron's checkpointing.py (@ baf94af3 / a845aa7e) with the
distributed optimizer: model_optim_rng.pt, and distrib_optim.pt (the optimizer state) unless --no-save-optim."""

import os
import sys
import time

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.dirname(_here)]  # fakelib.py: next to the script or one level up
import torch.distributed as dist  # noqa: E402
from fakelib import flag, need, record, write  # noqa: E402

argv = sys.argv[1:]
dist.init_process_group("gloo")
world, rank = dist.get_world_size(), dist.get_rank()
tp, pp = int(flag(argv, "--tensor-model-parallel-size")), int(flag(argv, "--pipeline-model-parallel-size"))
assert world % (tp * pp) == 0, f"world {world} does not split into TP{tp} x PP{pp}"
load, save = flag(argv, "--load"), flag(argv, "--save")
iters, every = int(flag(argv, "--train-iters")), int(flag(argv, "--save-interval"))
need(flag(argv, "--data-path") + "_packed_input_ids_document.idx", "dataset")
start = 0
if "--finetune" in argv:
    need(os.path.join(load, "latest_checkpointed_iteration.txt"), "converted weights")
else:
    with open(os.path.join(load, "latest_checkpointed_iteration.txt"), encoding="utf-8") as fh:
        start = int(fh.read())
record("posttrain_gpt.py", rank=rank, world=world, start=start)
step_s = float(os.environ.get("FAKE_STEP_SECONDS", "0"))
for it in range(start + 1, iters + 1):
    time.sleep(step_s)
    dist.barrier()
    if rank == 0:
        print(f" iteration {it}/{iters} | lm loss: {2.0 / it:.4f}", flush=True)
        if it % every == 0 or it == iters:
            ckpt = os.path.join(save, f"iter_{it:07d}", "mp_rank_00")
            write(os.path.join(ckpt, "model_optim_rng.pt"), f"{it}\n")
            if "--no-save-optim" not in argv:
                write(os.path.join(ckpt, "distrib_optim.pt"), f"optimizer state {it}\n")
            write(os.path.join(save, "latest_checkpointed_iteration.txt"), str(it))
    dist.barrier()
dist.destroy_process_group()
