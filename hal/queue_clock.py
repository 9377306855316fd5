"""Clocks in a device's queue, what hal.tracing times commands with: `dev.queue_clock()` gives one.

Each backend reads its marks where its work runs (CUDA events, Vulkan timestamps); HostCallClock, a host call per
mark, is the host backend's, and any backend's without a timer of its own.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class QueueClock(Protocol):
    """Marks queued in a device's queue order; their times, in seconds from the first, once the queue passed
    them. `what` says what the times are; `capacity` is the most marks it holds (None: no limit)."""

    what: str
    capacity: int | None

    def mark(self) -> None: ...

    def seconds(self) -> list[float]: ...

    def close(self) -> None: ...


class HostCaller(Protocol):
    """What HostCallClock needs of its device (a hal.Device)."""

    def queue_host_call(self, fn: Callable[[], object]) -> None: ...


class HostCallClock:
    """A host call per mark, which the queue runs between the commands."""

    what = "host calls between the commands, on the host backend's queue thread"
    capacity = None

    def __init__(self, device: HostCaller) -> None:
        self.device = device
        self.times: list[float] = []

    def mark(self) -> None:
        self.device.queue_host_call(lambda: self.times.append(time.perf_counter()))

    def seconds(self) -> list[float]:
        return [t - self.times[0] for t in self.times]

    def close(self) -> None:
        pass
