"""torchrun whose `--tee` passes each worker's lines on within ~10 ms: what a launched container runs.

    python -m provisioner.launch.teerun ARGS        (the same ARGS as `torchrun ARGS`)

With `--tee`, torchrun's workers write to log files and a tail thread per file
copies new lines to the console, with the rank prefix. That thread sleeps
0.1 s whenever it finds nothing new (torch.distributed.elastic's TailLog
default, which torchrun offers no option for), so every worker line, the first
step's included, reached the user up to 0.1 s late, about 0.05 s on average.
Here the tail sleeps TAIL_INTERVAL_S instead; everything else is torchrun's own
main(). A torch whose elastic agent is shaped otherwise gets torchrun unchanged.

Images built by this project say they carry this module (the label
org.provision.launcher, provisioner/image/labels.py); `provision launch` uses
it only then (provisioner/launch/torchrun.py) and runs plain `torchrun` in any
other image. torch is imported only when the module runs.
"""

from __future__ import annotations

import sys

# 20 ms: a line waits 10 ms on average; a tail wakes 50 times a second per worker stream while idle
# (a read that finds nothing), well under 1% of a core for 16 workers.
TAIL_INTERVAL_S = 0.02


def patch_tail_interval(interval: float = TAIL_INTERVAL_S) -> bool:
    """Make torchrun's log tails poll every `interval` seconds; False (nothing changed) if torch differs."""
    try:
        from torch.distributed.elastic.multiprocessing import api, tail_log
    except ImportError:
        return False
    base = getattr(tail_log, "TailLog", None)
    code = getattr(getattr(base, "__init__", None), "__code__", None)
    if base is None or getattr(api, "TailLog", None) is not base or code is None or \
            "interval_sec" not in code.co_varnames:
        return False

    class FastTailLog(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("interval_sec", interval)
            super().__init__(*args, **kwargs)

    api.TailLog = FastTailLog
    return True


def main() -> int | None:
    patch_tail_interval()
    from torch.distributed.run import main as torchrun_main

    return torchrun_main()


if __name__ == "__main__":
    sys.exit(main())
