"""Host timeline semaphores, on the device's condition variable (the queue worker waits on it too)."""

from __future__ import annotations

import threading
import time
from typing import Protocol

from hal.errors import DeviceLostError
from hal.semaphore import Semaphore, check_host_signal, wait_timed_out


class TimelineDevice(Protocol):
    """What semaphores need of their host device."""

    driver: str
    condition: threading.Condition  # the queue's state, notified as it changes

    @property
    def closed(self) -> bool: ...

    def check_open(self) -> None: ...


class HostSemaphore(Semaphore):
    __slots__ = ("value",)

    def __init__(self, device: TimelineDevice, initial: int) -> None:
        super().__init__(device)
        self.value = initial

    def _query(self) -> int:
        with self.device.condition:
            return self.value

    def _wait(self, value: int, timeout: float | None) -> None:
        cv = self.device.condition
        deadline = None if timeout is None else time.monotonic() + timeout
        with cv:
            while self.value < value and self.failure is None:
                if self.device.closed:
                    raise DeviceLostError(f"semaphore wait: the device was closed while waiting for {value}")
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise wait_timed_out(value, self.value, timeout, self.device.pending_signal(self))
                cv.wait(None if remaining is None else min(remaining, threading.TIMEOUT_MAX))

    def _signal(self, value: int) -> None:
        with self.device.condition:
            check_host_signal(value, self.value)
            self.value = value
            self.device.condition.notify_all()

    def _wake(self) -> None:
        with self.device.condition:
            self.device.condition.notify_all()
