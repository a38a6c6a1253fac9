"""Live progress of a classic-builder build: the current step, elapsed times, the failing step's log tail.

Fed the build's log stream (engine.types.BuildEvent). On a terminal one status
line is redrawn every half second (step, stage, total and step time); elsewhere
one line per finished step is printed. The output of each step is kept (the
last TAIL lines) so a failure can show what went wrong.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from dataclasses import dataclass, field

TYPE_CHECKING = False
if TYPE_CHECKING:
    from provisioner.engine.types import BuildEvent

_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_STAGE = re.compile(r"^FROM\s+\S+(?:\s+AS\s+(\S+))?", re.I)
TAIL = 40  # lines of a step's output kept for the failure report
SHOWN = 100  # characters of an instruction shown per step


@dataclass
class Step:
    number: int
    total: int
    instruction: str
    stage: str
    started: float
    seconds: float = 0.0
    cached: bool = False
    log: deque = field(default_factory=lambda: deque(maxlen=TAIL))


def _clock(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m:02d}:{s:02d}"


class Progress:
    def __init__(self, out, live: bool, verbose: bool = False):
        self.out = out
        self.live = live
        self.verbose = verbose
        self.steps: list[Step] = []
        self.stage = ""
        self.started = time.monotonic()
        self._partial = ""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._width = 0

    # -- lifecycle
    def __enter__(self) -> Progress:
        if self.live:
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
        with self._lock:
            self._finish_step()
            self._clear()

    # -- feeding
    def feed(self, event: BuildEvent) -> None:
        if event.kind != "stream":
            return
        text = event.text
        with self._lock:
            self._partial += text
            *lines, self._partial = self._partial.split("\n")
            for line in lines:
                self._line(line.rstrip("\r"))

    def _line(self, line: str) -> None:
        m = _STEP.match(line)
        if m:
            self._finish_step()
            number, total, instruction = int(m.group(1)), int(m.group(2)), m.group(3)
            sm = _STAGE.match(instruction)
            if sm:
                self.stage = sm.group(1) or "image"
            self.steps.append(Step(number, total, instruction, self.stage, time.monotonic()))
            self._status()
            return
        step = self.steps[-1] if self.steps else None
        if step is None:
            return
        if line.strip() == "---> Using cache":
            step.cached = True
        elif line.startswith((" ---> ", "Removing intermediate container")) or not line.strip():
            pass
        else:
            step.log.append(line)
            if self.verbose:
                self._clear()
                self.out.write(f"    {line}\n")
                self.out.flush()
                self._status()

    def _finish_step(self) -> None:
        if not self.steps or self.steps[-1].seconds:
            return
        step = self.steps[-1]
        step.seconds = max(time.monotonic() - step.started, 1e-6)
        self._clear()
        self.out.write(self._format(step, done=True) + "\n")
        self.out.flush()

    # -- drawing
    def _format(self, step: Step, done: bool) -> str:
        when = "cached" if step.cached else _clock(step.seconds if done else time.monotonic() - step.started)
        head = f"[{step.number:>2}/{step.total}] {_clock(time.monotonic() - self.started)} {when:>6}  {step.stage:<8} "
        text = " ".join(step.instruction.split())
        return head + (text if len(text) <= SHOWN else text[:SHOWN - 3] + "...")

    def _status(self) -> None:
        if not self.live or not self.steps:
            return
        text = self._format(self.steps[-1], done=False)
        width = _terminal_width() - 1
        text = text[:width]
        self.out.write("\r" + text + " " * max(0, self._width - len(text)))
        self._width = len(text)
        self.out.flush()

    def _clear(self) -> None:
        if self.live and self._width:
            self.out.write("\r" + " " * self._width + "\r")
            self._width = 0

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                self._status()

    # -- results
    def failure_report(self) -> str:
        """The failing step and the end of its output."""
        if not self.steps:
            return ""
        step = self.steps[-1]
        lines = [f"build failed at step {step.number}/{step.total} (stage {step.stage}): {' '.join(step.instruction.split())}"]
        if step.log:
            lines.append(f"last {len(step.log)} lines of its output:")
            lines += [f"  | {line}" for line in step.log]
        return "\n".join(lines)

    def summary(self) -> list[dict]:
        return [{"step": s.number, "stage": s.stage, "instruction": " ".join(s.instruction.split()),
                 "seconds": round(s.seconds, 2), "cached": s.cached} for s in self.steps]


def _terminal_width() -> int:
    import shutil

    return shutil.get_terminal_size((100, 20)).columns
