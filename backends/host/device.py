"""The host device: numpy memory, Python kernels, and a queue served by one worker thread.

queue_execute only appends to the queue, so it never blocks the caller, also when a submission
waits for a semaphore value nobody has signalled yet. Submissions run in submission order. A kernel
that raises fails its submission: its signal semaphores fail (waiters get the error instead of
hanging) and the next synchronize(), read or write raises it as a DeviceError.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from backends.host.buffer import HostBuffer
from backends.host.command_buffer import HostEmitter, execute
from backends.host.communicator import HostCommunicator
from backends.host.executable import HostExecutable
from backends.host.semaphore import HostSemaphore
from hal.buffer import Buffer, BufferUsage
from hal.capabilities import Capabilities
from hal.command_buffer import CommandBuffer
from hal.deadline import Deadline
from hal.device import Device
from hal.drivers import DeviceInfo, Driver
from hal.errors import DeviceError, DeviceLostError, UnsupportedError, ValidationError
from hal.executable import ExecutableSource
from hal.lifetime import Lifetime
from hal.semaphore import queue_deadlock

IDLE_EXIT_S = 1.0
WORKER_NAME = "hal-host-queue"

# Generous limits, and no alignment beyond a fill pattern's own: the host is the tests' oracle, so it
# accepts everything some backend can run. Override capabilities to emulate a stricter device.
HOST_CAPABILITIES = Capabilities(
    supported_subgroup_operations=0,
    max_push_constants_size=256,
    max_uniform_buffer_range=(1 << 31) - 1,
    max_storage_buffer_range=(1 << 31) - 1,
    max_per_stage_descriptor_storage_buffer=64,
    supports_storage_buffer_storage_class=True,
    supports_storage_buffer_8bit_access=True,
    supports_storage_buffer_16bit_access=True,
    supports_float16=True,
    supports_float64=True,
    supports_int8=True,
    supports_int16=True,
    supports_int64=True,
    supports_int64_atomics=True,
    supports_push_descriptor=False,
    max_workgroup_count=((1 << 31) - 1, 65535, 65535),
    max_workgroup_size=(1024, 1024, 64),
    max_workgroup_invocations=1024,
    storage_buffer_offset_alignment=1,
    fill_buffer_alignment=1,
    update_buffer_alignment=1,
    copy_buffer_alignment=1,
    supports_foreign_calls=True,
)


class HostDriver(Driver):
    name = "host"

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo("host", 0, "numpy (CPU)", "cpu")]

    def create_device(self, index: int | None, capabilities: Mapping[str, Any] | None) -> HostDevice:
        if index not in (None, 0):
            raise UnsupportedError(f"the host driver has one device, 0; got {index}")
        return HostDevice(HOST_CAPABILITIES.with_overrides(capabilities))


class _Submission:
    """A queued command buffer (the emitter's plan of now: reset() makes new ones), or a host call's function
    (`call`)."""

    __slots__ = ("order", "static", "bodies", "table", "constants", "waits", "signals", "call")

    def __init__(self, emitter: HostEmitter | None, table: tuple[Buffer, ...], constants: tuple,
                 waits: tuple[tuple[HostSemaphore, int], ...], signals: tuple[tuple[HostSemaphore, int], ...],
                 call: Callable[[], object] | None = None) -> None:
        if emitter is not None:
            self.order, self.static, self.bodies = emitter.order, emitter.static, emitter.bodies
        self.table, self.constants, self.waits, self.signals, self.call = table, constants, waits, signals, call


class HostDevice(Device):
    def __init__(self, capabilities: Capabilities) -> None:
        super().__init__("host", "numpy (CPU)", capabilities)
        self.condition = threading.Condition()  # the queue's state; semaphores wait on it too
        self._pending: collections.deque[_Submission] = collections.deque()
        self._running = False
        self._closing = False
        self._worker: threading.Thread | None = None
        self._queued = 0  # submissions queued so far
        self._finished = 0  # of them, those run (or failed)
        self.lifetime = Lifetime(mark=lambda: self._queued, finished=lambda queued: queued <= self._finished)
        self._used_bytes = 0  # in HostBuffers not yet dropped
        self._memory_lock = threading.Lock()

    def _allocate(self, nbytes: int, usage: BufferUsage) -> HostBuffer:
        return HostBuffer(self, nbytes, usage)

    def count_memory(self, delta: int) -> None:
        """A buffer's memory was made (delta > 0) or dropped."""
        with self._memory_lock:
            self._used_bytes += delta

    def memory_stats(self) -> dict[str, int]:
        with self._memory_lock:
            return {"used_bytes": self._used_bytes}

    def _load_executable(self, source: ExecutableSource) -> HostExecutable:
        return HostExecutable(self, source)

    def _create_emitter(self, command_buffer: CommandBuffer) -> HostEmitter:
        return HostEmitter()

    def _create_semaphore(self, initial: int) -> HostSemaphore:
        return HostSemaphore(self, initial)

    def _create_communicator(self, devices: tuple[Device, ...], world: int, rank: int,
                             rendezvous: str | None) -> HostCommunicator:
        if rendezvous is not None:
            raise UnsupportedError("host collectives join host devices of one process: "
                                   "hal.create_communicator([host_device, ...]) without rank, world or rendezvous")
        return HostCommunicator(devices)

    def _queue_execute(self, command_buffer: CommandBuffer, table: tuple[Buffer, ...],
                       waits: tuple[tuple[HostSemaphore, int], ...],
                       signals: tuple[tuple[HostSemaphore, int], ...], constants: tuple) -> None:
        self._queue(_Submission(command_buffer.emitter, table, constants, waits, signals))

    def _queue_host_call(self, fn: Callable[[], object], waits: tuple[tuple[HostSemaphore, int], ...],
                         signals: tuple[tuple[HostSemaphore, int], ...]) -> None:
        self._queue(_Submission(None, (), (), waits, signals, call=fn))  # the worker calls it in turn

    def _readback_buffer(self, nbytes: int) -> tuple[HostBuffer, np.ndarray]:
        buffer = HostBuffer(self, nbytes, BufferUsage.DEFAULT)
        return buffer, buffer.data

    def _queue(self, submission: _Submission) -> None:
        with self.condition:
            self._pending.append(submission)
            self._queued += 1
            if self._worker is None:
                self._worker = threading.Thread(target=self._serve, name=WORKER_NAME, daemon=True)
                self._worker.start()
            self.condition.notify_all()

    def _wait_idle(self, deadline: Deadline | None = None) -> None:
        if threading.current_thread() is self._worker:
            raise ValidationError("a host kernel or queue_host_call function cannot wait for its own queue (a "
                                  "buffer read or write, or synchronize, inside it); pass data through the "
                                  "dispatch's bindings, or queue the work (queue_read, queue_execute)")
        with self.condition:
            while self._pending or self._running:
                if not self._running:
                    self._refuse_certain_deadlock()
                if deadline is not None and deadline.passed():
                    running = "a kernel or host call" if self._running else "a submission not started yet"
                    raise deadline.error(self, f"{running}, the first of {len(self._pending)} queued submission(s),")
                self.condition.wait(None if deadline is None else deadline.remaining())

    def _refuse_certain_deadlock(self) -> None:
        """Under the lock, the queue idle: if its head waits for a value that only the host can signal
        and no other thread exists to do it, waiting would never end; say so instead."""
        unmet = [(s, v) for s, v in self._pending[0].waits if s.value < v and s.failure is None]
        if not unmet:
            return
        me = threading.current_thread()
        if any(t is not me and t.name != WORKER_NAME for t in threading.enumerate()):
            return  # another thread may signal
        sem, value = unmet[0]
        raise queue_deadlock(value, sem.value)

    def pending_signal(self, sem: HostSemaphore) -> int | None:
        """The smallest value a queued or running submission will still signal on `sem`."""
        with self.condition:
            values = [v for submission in self._pending for s, v in submission.signals if s is sem]
        return min(values) if values else None

    def _synchronize(self, deadline: Deadline | None = None) -> None:
        self._wait_idle(deadline)

    def _close(self) -> None:
        with self.condition:
            self._closing = True
            self.condition.notify_all()  # wakes the worker, and semaphore waiters, who then see the device closed
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join()
        self.lifetime.close()

    def _serve(self) -> None:
        """The queue worker: run submissions in order, each once its waits are reached. It exits after
        IDLE_EXIT_S without work, so a device dropped without close() does not keep a thread alive."""
        cv = self.condition
        while True:
            with cv:
                head, error = self._next()
                if head is None:
                    return
                self._running = True
            try:
                if error is None and head.call is not None:
                    head.call()
                elif error is None:
                    execute(head.order, head.static, head.bodies, self.capabilities.max_workgroup_count, head.table,
                            head.constants)
            except BaseException as e:  # execute() wraps Exceptions; a SystemExit from a kernel still fails the work
                if isinstance(e, DeviceError):
                    error = e
                elif head.call is not None:
                    error = DeviceError(f"queue_host_call: {head.call!r} raised {e!r}")
                else:
                    error = DeviceError(f"host: a kernel raised {e!r}")
                error.__cause__ = error.__cause__ or e
            finally:
                with cv:
                    self._pending.popleft()
                    self._finished += 1
                    self._running = False
                    for sem, value in head.signals:
                        if error is not None:
                            sem.fail(error)
                        elif value > sem.value:
                            sem.value = value
                    if error is not None and not any(s.failure is error for s, _ in head.waits):
                        self.failures.note(error)  # (a failed wait's failure was noted where it arose)
                    cv.notify_all()
                self.lifetime.collect()  # what was released while this ran

    def _next(self) -> tuple[_Submission | None, BaseException | None]:
        """Under the lock: wait for the head submission to become runnable (or failed); (None, None) to exit."""
        cv = self.condition
        while True:
            if not self._pending:
                if self._closing or not cv.wait(IDLE_EXIT_S) and not self._pending:
                    self._worker = None
                    return None, None
                continue
            head = self._pending[0]
            failed = next((s.failure for s, _ in head.waits if s.failure is not None), None)
            if failed is not None or all(s.value >= v for s, v in head.waits):
                return head, failed
            if self._closing:
                return head, DeviceLostError("the device was closed before this submission's waits were reached")
            cv.wait()
