"""Run by torchrun inside a launched container: rank 1 logs an exception, then a burst of lines, and fails;
the other ranks finish."""

import os
import sys
import traceback

rank = int(os.environ["RANK"])
if rank == 1:
    try:
        raise ValueError(f"bad batch on rank {rank}")
    except ValueError:
        traceback.print_exc(file=sys.stdout)  # one stream, so the order holds
    for i in range(80):  # more than launch keeps in its tail: the error line scrolls out of it
        print(f"rank 1 shutting down {i}", flush=True)
    sys.exit(1)
print(f"rank {rank} done", flush=True)
