"""CUDA timeline semaphores: a 64-bit value in pinned host memory the GPU can address.

The stream waits for it with cuStreamWaitValue64 and signals it with cuStreamWriteValue64, so one
submission waits for another's signal (or for the host's) without a host round trip; the host reads
and writes the same memory directly. Values only grow: a host signal may not reach a value a
submitted signal has yet to write, or that write would move the value back.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any, Protocol

import numpy as np

from backends.cuda_graph.buffer import host_alloc
from hal.errors import DeviceLostError
from hal.lifetime import Release
from hal.semaphore import Semaphore, check_host_signal, wait_timed_out

SPIN_S = 50e-6  # poll without sleeping this long first: waits on a GPU are often short
SLEEP_S = 100e-6  # then poll this often (a host signal wakes the waiters at once)


class TimelineDevice(Protocol):
    """What semaphores need of their CUDA device."""

    driver: str
    host_signalled: threading.Condition  # notified at each host write of a semaphore value

    @property
    def closed(self) -> bool: ...

    def check_open(self) -> None: ...

    def check_lost(self) -> None: ...

    def track(self, owner: object, kind: str, handle: Any) -> Release: ...

    def pending_signal(self, sem: Semaphore) -> int | None: ...

    def waiting(self) -> contextlib.AbstractContextManager[None]: ...


class CudaSemaphore(Semaphore):
    __slots__ = ("host_address", "device_address", "_cell")

    def __init__(self, device: TimelineDevice, initial: int) -> None:
        super().__init__(device)
        self.host_address, self.device_address, view = host_alloc(8)
        self._cell = view.view(np.uint64)
        self._cell[0] = initial
        device.track(self, "host", self.host_address)

    @property
    def value(self) -> int:
        return int(self._cell[0])

    @value.setter
    def value(self, value: int) -> None:
        self._cell[0] = value

    def _query(self) -> int:
        if self.device.closed:
            raise DeviceLostError("semaphore query: the device was closed")
        self.device.check_lost()
        return self.value

    def _wait(self, value: int, timeout: float | None) -> None:
        device = self.device
        start = time.monotonic()
        with device.waiting():
            while self._cell[0] < value and self.failure is None:
                if device.closed:
                    raise DeviceLostError(f"semaphore wait: the device was closed while waiting for {value}")
                device.check_lost()
                elapsed = time.monotonic() - start
                if timeout is not None and elapsed >= timeout:
                    raise wait_timed_out(value, self.value, timeout, device.pending_signal(self))
                if elapsed > SPIN_S:  # host signals wake the sleep at once; the stream's writes are polled
                    with device.host_signalled:
                        if self._cell[0] < value and self.failure is None:
                            device.host_signalled.wait(SLEEP_S if timeout is None else
                                                       min(SLEEP_S, max(0.0, timeout - elapsed)))
                else:
                    time.sleep(0)  # spins without holding the GIL: a host call's threads may need it

    def _signal(self, value: int) -> None:
        check_host_signal(value, self._query(), self.device.pending_signal(self))
        self.host_write(value)

    def host_write(self, value: int) -> None:
        """Set the value from the host (never lower) and wake the host's waiters."""
        with self.device.host_signalled:
            if value > self._cell[0]:
                self._cell[0] = value
            self.device.host_signalled.notify_all()

    def _wake(self) -> None:
        with self.device.host_signalled:
            self.device.host_signalled.notify_all()
