"""torch_npu/npu/streams.py and the stream functions of torch_npu/npu/utils.py: Stream, Event, stream().

The double runs every kernel on the host as it is issued, so a stream is always idle and an event is
complete once recorded; elapsed_time still measures host time between two recorded events (milliseconds,
as on the chip). DeepSpeed's NPU accelerator names torch.npu.Event and torch.npu.Stream in class bodies,
so `import deepspeed` needs both once torch_npu is loaded.
"""

from __future__ import annotations

import time

from .._backend import CHIPS, check_device, device_index


class Stream:
    """torch_npu.npu.Stream(device=None, priority=0)."""

    def __init__(self, device=None, priority: int = 0) -> None:
        index = CHIPS.current if device is None else device_index(device)
        check_device(index)
        self.device_index = index
        self.priority = priority

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait_event(self, event: Event) -> None:
        if not event.recorded:
            raise RuntimeError("wait_event on an event that was never recorded")

    def wait_stream(self, stream: Stream) -> None:
        pass

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and (self.device_index, id(self)) == (other.device_index, id(other))

    def __hash__(self) -> int:
        return id(self)


class Event:
    """torch_npu.npu.Event(enable_timing=False, blocking=False, interprocess=False)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self.recorded = False
        self._at = 0.0

    def record(self, stream: Stream | None = None) -> None:
        self.recorded = True
        self._at = time.perf_counter()

    def wait(self, stream: Stream | None = None) -> None:
        pass

    def query(self) -> bool:
        return self.recorded

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: Event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if not (self.recorded and end_event.recorded):
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._at - self._at) * 1000.0


_DEFAULT: dict[int, Stream] = {}
_CURRENT: dict[int, Stream] = {}


def default_stream(device=None) -> Stream:
    index = CHIPS.current if device is None else device_index(device)
    if index not in _DEFAULT:
        _DEFAULT[index] = Stream(index)
    return _DEFAULT[index]


def current_stream(device=None) -> Stream:
    index = CHIPS.current if device is None else device_index(device)
    return _CURRENT.get(index) or default_stream(index)


def set_stream(stream: Stream | None) -> None:
    if stream is not None:
        _CURRENT[stream.device_index] = stream


class stream:  # noqa: N801  (torch_npu.npu.stream is a lower-case context manager)
    """torch_npu.npu.stream(stream): make `stream` current for a block."""

    def __init__(self, s: Stream | None) -> None:
        self.s = s
        self.prev: Stream | None = None

    def __enter__(self) -> Stream | None:
        if self.s is not None:
            self.prev = current_stream(self.s.device_index)
            set_stream(self.s)
        return self.s

    def __exit__(self, *exc) -> bool:
        if self.prev is not None:
            set_stream(self.prev)
        return False
