"""queue_host_call on devices whose queue is the GPU's (CUDA, Vulkan): the queue stops at a gate while a hal thread
runs the function.

The device queues, in order: the call's waits; a notice that the queue got there (CUDA: a host function on the
stream; Vulkan: a signal of an internal timeline); a wait for the gate (CUDA: a stream wait on pinned memory;
Vulkan: a wait on that timeline for a value only the host signals); the call's signals. The HostCallThread takes
the calls in order: it waits for the notice, calls fn, then opens the gate. So fn runs once the waits are met and
the work queued before it is done, everything queued after it waits for its return, and the signals follow that
return from the queue itself. A function that raises, or a call whose waits failed, fails its signal semaphores
before the gate opens (Device.fail_signals, Device.pass_failure_on): their waiters get the failure, never a value.

fn runs on the HostCallThread, not on a driver thread, so it may call the driver (CUDA's rule against API calls in
stream callbacks does not reach it) and hal; it may not wait for its own device's queue (synchronize(), buffer
reads and writes of the device, a semaphore wait for a value queued after it): the queue waits for fn.
"""

from __future__ import annotations

import collections
import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from hal.errors import DeviceError, DeviceLostError

if TYPE_CHECKING:
    from hal.semaphore import Semaphore

IDLE_EXIT_S = 1.0
WAIT_SLICE_S = 0.05


class HostCallOwner(Protocol):
    """What the host-call thread needs of its device (a hal.Device)."""

    @property
    def closed(self) -> bool: ...

    def fail_signals(self, signals: tuple[tuple[Semaphore, int], ...], error: BaseException) -> None: ...


class HostCall:
    """One queued call: `reached()` blocks until the queue got to it (raising if it never will), `release()` opens
    its gate."""

    __slots__ = ("fn", "waits", "signals", "reached", "release")

    def __init__(self, fn: Callable[[], object], waits: tuple[tuple[Semaphore, int], ...],
                 signals: tuple[tuple[Semaphore, int], ...], reached: Callable[[], None],
                 release: Callable[[], None]) -> None:
        self.fn, self.waits, self.signals, self.reached, self.release = fn, waits, signals, reached, release


class HostCallThread:
    """The thread that runs one device's host calls, in queue order (started on demand, gone when idle)."""

    def __init__(self, device: HostCallOwner) -> None:
        self.device = device
        self.condition = threading.Condition()
        self.calls: collections.deque[HostCall] = collections.deque()
        self.current: HostCall | None = None  # the call being run
        self.thread: threading.Thread | None = None

    def put(self, call: HostCall) -> None:
        with self.condition:
            self.calls.append(call)
            if self.thread is None:
                self.thread = threading.Thread(target=self._serve, name="hal-host-calls", daemon=True)
                self.thread.start()
            self.condition.notify_all()

    def is_current(self) -> bool:
        """Whether the caller is this thread (inside a host call's fn)."""
        return threading.current_thread() is self.thread

    def drain(self) -> None:
        """Block until every queued call has ended (the device's close, before it lets its queue drain: calls the
        queue has not reached end when they see the device closed, and leave their gates shut)."""
        if self.is_current():
            return
        with self.condition:
            while self.calls or self.current is not None:
                self.condition.wait(WAIT_SLICE_S)

    def _serve(self) -> None:
        while True:
            with self.condition:
                while not self.calls:
                    if not self.condition.wait(IDLE_EXIT_S) and not self.calls:
                        self.thread = None
                        return
                self.current = self.calls.popleft()
            try:
                self._run(self.current)
            finally:
                with self.condition:
                    self.current = None
                    self.condition.notify_all()

    def _run(self, call: HostCall) -> None:
        try:
            call.reached()
        except BaseException as e:  # the queue never got there (closed, lost): no gate to open, the device's
            self.device.fail_signals(call.signals, e)  # close() lets what waits behind it drain
            return
        try:
            failed = next((s.failure for s, _ in call.waits if s.failure is not None), None)
            if failed is not None:  # fn does not run: its signals fail as its wait did
                self.device.pass_failure_on(call.signals, failed)
            elif self.device.closed:
                self.device.fail_signals(call.signals, DeviceLostError(
                    "queue_host_call: the device was closed before the call's turn came"))
            else:
                self._call(call)
        finally:
            with contextlib.suppress(Exception):  # a closed or lost device: its queue is gone anyway
                call.release()

    def _call(self, call: HostCall) -> None:
        """Run fn; what it raises is its signals' failure."""
        try:
            call.fn()
        except BaseException as e:
            error = e if isinstance(e, DeviceError) else DeviceError(f"queue_host_call: {call.fn!r} raised {e!r}")
            error.__cause__ = error.__cause__ or e
            self.device.fail_signals(call.signals, error)
