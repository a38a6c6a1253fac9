"""One container of a launch: create, start, stream its rank-prefixed logs, wait, stop on a signal, remove.

launch.run (a run, its self-test and collective check) and launch.jobrun (a framework job) both run their
containers through run_container. SIGINT, SIGTERM and SIGHUP are recorded by a SignalGuard, never acted on in
the handler: the waiting loop stops the container (docker stop: SIGTERM to its init, SIGKILL after the stop
timeout; a second signal kills at once) and removes it unless kept. After an intended stop, what the stop makes
torchrun print is held back (logstream.StopQuieter) but kept in the tail. Any provisioner.engine Engine serves.
"""

from __future__ import annotations

import atexit
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from provisioner.engine.base import Container, Engine
from provisioner.engine.errors import EngineError, short
from provisioner.errors import ProvisionError
from provisioner.launch import logstream

STOP_TIMEOUT_S = 20
TAIL_LINES = 50
# A failed run keeps its last EXPLAIN_LINES lines (each cut at EXPLAIN_LINE_CHARS) for provisioner.explain.
EXPLAIN_LINES = 10000
EXPLAIN_LINE_CHARS = 2000
ANNOUNCE_STOP_S = 1.0  # a stop that takes longer says so (and how to kill it now)
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class RunResult:
    role: str  # selftest | check | run | job
    container: str
    command: list[str]
    exit_code: int | None = None
    signal: str | None = None
    duration_s: float = 0.0
    kept: bool = False
    error: str | None = None
    tail: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)  # a failed run's last lines, for the explanation
    ranks: list[int] = field(default_factory=list)
    collective: dict | None = None  # the check's provision.collective/1 document
    selftest: dict | None = None  # the self-test's provision.selftest/1 document


# -- signals --------------------------------------------------------------------------------


class SignalGuard:
    """Record SIGINT/SIGTERM/SIGHUP instead of dying, so the container can be stopped and removed.

    Handlers only record and wake the waiting loop; all engine calls happen in
    the main flow. Outside the main thread (where handlers cannot be set) it
    records nothing. The previous handlers come back on exit.
    """

    def __init__(self, signals: tuple[int, ...] = SIGNALS):
        self.signals = signals
        self.received: list[int] = []
        self.wake = threading.Event()
        self._old: dict[int, Any] = {}

    def __enter__(self) -> SignalGuard:
        if threading.current_thread() is threading.main_thread():
            for s in self.signals:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for s, old in self._old.items():
            signal.signal(s, old)
        self._old.clear()

    def _handle(self, signum, frame) -> None:
        self.received.append(signum)
        self.wake.set()

    @property
    def exit_code(self) -> int | None:
        return 128 + self.received[0] if self.received else None

    @property
    def name(self) -> str | None:
        return signal.Signals(self.received[0]).name if self.received else None


class _Cleanup:
    """Stop and remove one container, once, whichever path gets there first (finally or atexit)."""

    def __init__(self, keep: bool):
        self.keep = keep
        self.container: Container | None = None
        self.done = False

    def __call__(self) -> None:
        if self.done or self.container is None:
            return
        self.done = True
        try:
            if not self.keep:
                self.container.remove(force=True)
            elif self.container.inspect().running:
                self.container.kill()
        except EngineError:  # already gone
            pass


# -- one container --------------------------------------------------------------------------


def run_container(engine: Engine, kw: dict, role: str, guard: SignalGuard, out: TextIO | None, err: TextIO | None,
                  keep: bool = False, stop_timeout: int = STOP_TIMEOUT_S,
                  on_line: Callable[[str], None] | None = None) -> RunResult:
    """Create, start, stream, wait; stop on a signal; remove unless `keep`."""
    result = RunResult(role, kw["name"], list(kw["command"] or []))
    splitter = logstream.LineSplitter(TAIL_LINES)
    kept: deque[str] = deque(maxlen=EXPLAIN_LINES)
    ranks: set[int] = set()
    cleanup = _Cleanup(keep)
    atexit.register(cleanup)
    start = time.monotonic()
    waited: dict = {}

    worker_error: list[tuple[int | None, str]] = []  # the first error a worker printed, over the whole run

    quiet = logstream.StopQuieter()  # after an intended stop, torchrun's signal traceback is not shown

    def show(lines: list[str]) -> None:
        if out is not None and lines:
            try:
                out.write("".join(line + "\n" for line in lines))
                out.flush()
            except (BrokenPipeError, ValueError):
                pass  # the reader went away; keep consuming so the tail stays right

    def emit(lines: list[str]) -> None:
        kept.extend(line[:EXPLAIN_LINE_CHARS] for line in lines)
        for line in lines:
            if not worker_error and (found := logstream.error_in(line)) and found[0] is not None:
                worker_error.append(found)
            if on_line:
                on_line(line)
        show(quiet.feed(lines))
        ranks.update(logstream.ranks_seen(lines))

    def stream(container: Container) -> None:
        try:
            for chunk in container.logs():
                emit(splitter.feed(chunk))
        except EngineError:  # the container was removed under us (signal path)
            pass
        emit(splitter.close())
        show(quiet.close())

    def wait(container: Container) -> None:
        try:
            waited["status"] = container.wait()
        except EngineError as exc:
            waited["error"] = exc
        guard.wake.set()

    try:
        container = engine.create(kw)
        cleanup.container = container
        streamer = threading.Thread(target=stream, args=(container,), daemon=True)
        if not guard.received:
            container.start()
            streamer.start()
            threading.Thread(target=wait, args=(container,), daemon=True).start()
            while not waited and not guard.received:
                guard.wake.wait(0.2)
                guard.wake.clear()
        if guard.received and not waited:
            quiet.active = True
            _stop(container, guard, err, stop_timeout, kw["name"])
        if streamer.ident is not None:
            streamer.join(timeout=10)
        if "error" in waited and not guard.received:
            raise ProvisionError(f"lost the Docker engine while waiting for {kw['name']}: {short(waited['error'], 200)}")
        if guard.received:
            result.exit_code, result.signal = guard.exit_code, guard.name
        elif "status" in waited:
            result.exit_code = waited["status"]
    except EngineError as exc:  # the engine refused the container (bad image, device, mount)
        raise ProvisionError(f"the engine could not run {kw['name']}: {short(exc, 200)}") from None
    finally:
        cleanup()
        atexit.unregister(cleanup)
    result.kept = keep and cleanup.container is not None
    result.duration_s = round(time.monotonic() - start, 3)
    result.tail = list(splitter.tail)
    result.ranks = sorted(ranks)
    if result.exit_code not in (0, None) and not result.signal:
        result.error = logstream.describe_error(worker_error[0]) if worker_error else logstream.first_error(result.tail)
        result.log = list(kept)
    return result


def _stop(container: Container, guard: SignalGuard, err: TextIO | None, timeout: int, name: str) -> None:
    """docker stop (SIGTERM to init -> torchrun -> workers, SIGKILL after `timeout`); a 2nd signal kills now.

    A stop that is over within ANNOUNCE_STOP_S says nothing here: the closing line tells it.
    """
    seen = len(guard.received)
    stopper = threading.Thread(target=lambda: _quiet(container.stop, timeout=timeout), daemon=True)
    stopper.start()
    announce_at = time.monotonic() + ANNOUNCE_STOP_S
    while stopper.is_alive():
        stopper.join(0.2)
        if announce_at and time.monotonic() >= announce_at and stopper.is_alive():
            say(err, f"{guard.name}: stopping {name} (up to {timeout} s; signal again to kill it now)")
            announce_at = 0.0
        if len(guard.received) > seen:
            say(err, f"{signal.Signals(guard.received[-1]).name} again: killing {name}")
            _quiet(container.kill)
            break
    stopper.join(timeout=timeout + 5)


# -- helpers --------------------------------------------------------------------------------


def say(err: TextIO | None, text: str) -> None:
    """One progress line of launch's own on `err` (launch and launch --job); a closed pipe is not an error."""
    if err is not None:
        try:
            err.write(f"provision launch: {text}\n")
            err.flush()
        except (BrokenPipeError, ValueError):
            pass


def _quiet(fn, *args, **kw) -> None:
    try:
        fn(*args, **kw)
    except EngineError:  # already stopped or removed
        pass
