"""Run by torchrun inside a launched container: say so, then wait to be stopped (argv[1] is a marker)."""

import os
import sys
import time

print(f"{sys.argv[1]} ready rank {os.environ['RANK']} pid {os.getpid()}", flush=True)
time.sleep(600)
