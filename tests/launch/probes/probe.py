"""Run by torchrun inside a launched container: report what this worker sees, then all_reduce over gloo.

Prints one JSON line per rank: the character devices under /dev, selected
environment variables, driver files, and the sum of (rank + 1) over all ranks.
"""

import json
import os
import stat

import torch
import torch.distributed as dist

KEYS = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NPROC_PER_NODE", "HCCL_CONNECT_TIMEOUT",
        "HCCL_EXEC_TIMEOUT", "OMP_NUM_THREADS", "ASCEND_RT_VISIBLE_DEVICES", "TORCH_DEVICE_BACKEND_AUTOLOAD",
        "MASTER_ADDR", "NNODES", "NODE_RANK"]
FILES = ["/usr/local/Ascend/driver/lib64/libascend_hal.so", "/usr/local/Ascend/driver/version.info",
         "/usr/local/bin/npu-smi", "/etc/ascend_install.info"]

dist.init_process_group("gloo")
rank = dist.get_rank()
total = torch.tensor([rank + 1.0])
dist.all_reduce(total)
devs = {}
for name in sorted(os.listdir("/dev")):
    st = os.lstat(os.path.join("/dev", name))
    if stat.S_ISCHR(st.st_mode):
        devs[name] = [os.major(st.st_rdev), os.minor(st.st_rdev)]
print(json.dumps({
    "probe": rank,
    "world": dist.get_world_size(),
    "sum": total.item(),
    "pid": os.getpid(),
    "devs": devs,
    "env": {k: os.environ.get(k) for k in KEYS},
    "files": {f: os.path.exists(f) for f in FILES},
}), flush=True)
dist.destroy_process_group()
