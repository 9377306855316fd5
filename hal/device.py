"""The device: memory, executables, command buffers and the queue, over each backend's device (hal.drivers makes
them). `hal/` never imports a backend."""

from __future__ import annotations

import abc
import contextlib
import gc
import itertools
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from hal.buffer import Buffer, BufferRef, BufferUsage, bytes_view, ref
from hal.capabilities import Capabilities
from hal.command_buffer import MAX_UPDATE_BYTES, CommandBuffer
from hal.communicator import Communicator, unsupported
from hal.deadline import Deadline
from hal.errors import OutOfMemoryError, UnsupportedError, ValidationError, integer
from hal.executable import Executable, ExecutableSource, check_exports
from hal.failures import Failures
from hal.host_call import HostCallThread
from hal.program import Emitter
from hal.queue_clock import HostCallClock, QueueClock
from hal.readback import Readbacks
from hal.semaphore import Semaphore, check_value, semaphore_pairs

NO_SEMAPHORES: tuple = ()  # queue_execute's default waits and signals: fast paths test identity with it
NO_CONSTANTS: tuple = ()  # queue_execute's default constants, tested by identity likewise


class Device(abc.ABC):
    """A device and its queue. The public methods validate; each backend's device implements the abstract `_` hooks
    (and may replace the others), which are called with arguments already checked (see "The backend contract" below).

    Besides the API, a device offers its backend's other modules (buffers, executables, semaphores) a few plain
    methods: `check_open()`, `closed`, `order_host_access()`, `wait_for_queue()`, `waiting()`, `buffer_released()`,
    `executable_released()`, `fail_signals()`, `pass_failure_on()` and `failures` (hal.failures); each backend's
    device adds its own (its `lifetime`, staging copies, ...). No module reaches into another's private names."""

    def __init__(self, driver: str, name: str, capabilities: Capabilities, index: int = 0) -> None:
        self.driver, self.name = driver, name
        self.index, self.capabilities, self._closed = index, capabilities, False  # index: create_device("cuda:1")
        self.serial = next(_serials)  # which device of the process: two devices of one GPU print apart
        self._submit_lock = threading.Lock()
        # The content-keyed executable cache: source key -> Executable, so each source loads once.
        self._executables: dict[Any, Executable] = {}
        # Replaced at every buffer or executable release: what was checked under an older token (binding
        # tables, dispatched executables) is checked again, since it may use the released one.
        self.release_token = object()
        self._waiters, self._waiters_lock = 0, threading.Lock()  # threads inside waiting()
        self.failures = Failures()  # of queued work: each reported once (hal.failures)
        self.host_calls = HostCallThread(self)  # runs queue_host_call's functions where the backend's queue is a GPU's
        self._reads: tuple[Semaphore, int] | None = None  # queue_read's copy -> host call timeline, its last value
        self._read_lock = threading.Lock()
        self._readbacks = Readbacks(self._readback_buffer)  # queue_read's staging
        self._transients: weakref.WeakSet[Buffer] = weakref.WeakSet()  # queue_alloca's buffers

    # Memory.
    def allocate(self, nbytes: int, usage: BufferUsage | int = BufferUsage.DEFAULT) -> Buffer:
        """A new buffer of device memory (contents undefined).

        Args:
            nbytes: Its size (0 allowed: nothing can use it).
            usage: What it may be used for: `hal.BufferUsage` flags (DEFAULT allows everything).

        Returns:
            The `hal.Buffer`.

        Raises:
            ValidationError: The device is closed, or `nbytes` or `usage` is not valid.
            OutOfMemoryError: The device has no room for it, even once dropped buffers are collected.
        """
        self.check_open()
        nbytes = integer(nbytes, "allocate: nbytes", 0)
        if isinstance(usage, bool) or not isinstance(usage, int) or not 0 < int(usage) <= int(BufferUsage.DEFAULT):
            raise ValidationError(f"allocate: usage must be a combination of hal.BufferUsage flags, got {usage!r}")
        try:
            return self._allocate(nbytes, BufferUsage(usage))
        except OutOfMemoryError:  # buffers dropped unreleased hold themselves (`whole`): the cycle collector frees them
            gc.collect()
        return self._allocate(nbytes, BufferUsage(usage))

    def memory_stats(self) -> dict[str, int]:
        """What the device's memory holds now.

        Returns:
            At least `used_bytes`, the bytes of buffers not yet freed (a released buffer counts until the work using
            it is done); backends add their allocator's figures.

        Raises:
            UnsupportedError: The backend does not report them.
        """
        raise UnsupportedError(f"the {self.driver} backend does not report memory statistics")

    def upload(self, data: Any, usage: BufferUsage | int = BufferUsage.DEFAULT) -> Buffer:
        """A new buffer holding a copy of `data`.

        Args:
            data: A numpy array or anything with the buffer protocol (bytes, memoryview).
            usage: As for `allocate`.

        Returns:
            The `hal.Buffer`, its size `data`'s in bytes.

        Raises:
            ValidationError: The device is closed, or `data` is not bytes-like.
            OutOfMemoryError: The device has no room for it.

        Example:
            >>> buf = dev.upload(np.arange(4, dtype=np.float32))
            >>> buf.read(np.float32)
            array([0., 1., 2., 3.], dtype=float32)
        """
        view = bytes_view(data, "upload")
        buf = self.allocate(view.nbytes, usage)
        try:
            buf.write(view)
        except BaseException:
            buf.release()
            raise
        return buf

    # Executables.
    def load_executable(self, source: ExecutableSource) -> Executable:
        """Load the kernels of `source` onto this device, once: the same source content returns the same Executable.

        Args:
            source: An `hal.ExecutableSource` of this device's format, or a `multi` source with a part for it.

        Returns:
            The `hal.Executable`, which `dispatch` takes.

        Raises:
            ValidationError: The device is closed, or the code disagrees with its Exports (bindings, constants and
                their types, workgroup size, readonly bindings: what each backend can check) or with the device's
                limits.
            UnsupportedError: The source has no part for this driver, or needs a capability the device lacks.
            CompileError: The compiler refused the code (its log is in the error).
        """
        self.check_open()
        if not isinstance(source, ExecutableSource):
            raise ValidationError(f"load_executable: expected a hal.ExecutableSource, got {type(source).__name__}")
        source = source.for_driver(self.driver)
        key = source.key
        exe = self._executables.get(key)
        if exe is None:
            check_exports(source, self.capabilities)
            exe = self._executables[key] = self._load_executable(source)
        return exe

    # Command buffers and submission.
    def create_command_buffer(self, mode: str = "one_shot", binding_capacity: int = 0,
                              strategy: str = "deferred", dependencies: str = "barriers",
                              validate: bool = True, constant_capacity: int = 0) -> CommandBuffer:
        """A command buffer to record into.

        Args:
            mode: "one_shot" (runs once) or "reusable" (runs any number of times).
            binding_capacity: How many slots (`hal.slot(i)`) its commands may bind, given at each submit.
            strategy: "deferred" (emit at `end()`) or "single_pass" (emit while recording).
            dependencies: "barriers" or "hazards" (see `hal.CommandBuffer` and the dependencies page).
            validate: False drops the race check between commands of one segment.
            constant_capacity: How many constant slots (`hal.constant_slot(i)`) its dispatches may read.

        Returns:
            The `hal.CommandBuffer`, initial: record it in a `with` block.

        Raises:
            ValidationError: The device is closed, or an argument is not one of the choices above.
        """
        self.check_open()
        return CommandBuffer(self, mode, binding_capacity, strategy, dependencies, validate, self._create_emitter,
                             constant_capacity)

    def create_semaphore(self, initial: int = 0) -> Semaphore:
        """A timeline semaphore of this device.

        Args:
            initial: Its first value (0 to 2**64 - 1).

        Returns:
            The `hal.Semaphore`.

        Raises:
            ValidationError: The device is closed, or `initial` is out of range.
        """
        self.check_open()
        return self._create_semaphore(check_value(initial, "create_semaphore"))

    def queue_execute(self, command_buffer: CommandBuffer, binding_table: Sequence[Buffer] = (),
                      wait: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES,
                      signal: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES,
                      constants: Sequence[Any] = NO_CONSTANTS) -> None:
        """Submit a command buffer: it runs once its waits are reached, after the work submitted before, then
        signals. Never blocks; submissions to one device run in submission order. An unchanged reusable command
        buffer submitted again with its last table and no semaphores or constants is one driver call.

        Args:
            command_buffer: An ended command buffer of this device (a one_shot one not yet submitted).
            binding_table: The buffers its slots are bound to for this run (`hal.slot(i)` is entry i): at least
                `binding_capacity` of them where its commands use slots.
            constants: The values of its constant slots (`hal.constant_slot(i)` is entry i) for this run, checked
                as literal constants are (their declared types).
            wait: (semaphore, value) pairs of this device that must be reached before it runs.
            signal: (semaphore, value) pairs it signals once done; each value must exceed what the semaphore has or
                was promised.

        Raises:
            ValidationError: The command buffer is not ended, was made by another device, or (one_shot) was
                submitted already; the table or a constant is wrong (sizes, usage, alignment, races between slots
                bound to one buffer); or a semaphore pair is wrong. Nothing is submitted then.
            DeviceLostError: The device was lost.

        Example:
            >>> cb = dev.create_command_buffer()
            >>> with cb:
            ...     cb.fill_buffer(buf, np.uint32(0))
            >>> dev.queue_execute(cb)
        """
        if self._closed:
            self.check_open()
        if not isinstance(command_buffer, CommandBuffer):
            raise ValidationError(f"queue_execute: expected a command buffer created by this device, got "
                                  f"{type(command_buffer).__name__}")
        if command_buffer.device is not self:
            raise ValidationError(f"queue_execute: expected a command buffer created by this device ({self!r}); "
                                  f"this one was created by {command_buffer.device!r}")
        # One-shot claims, promised signal values and the backend's submit state stay consistent across threads.
        with self._submit_lock:
            if command_buffer.accepts(binding_table, self.release_token):
                table = binding_table  # a reusable command buffer again with its last table: nothing to check
            else:
                table = command_buffer.prepare_submit(binding_table)
            if constants is not NO_CONSTANTS or command_buffer.constants_needed:
                constants = command_buffer.prepare_constants(constants)
            if wait is NO_SEMAPHORES and signal is NO_SEMAPHORES:  # the defaults need no checking
                self._queue_execute(command_buffer, table, NO_SEMAPHORES, NO_SEMAPHORES, constants)
            else:
                waits = semaphore_pairs(self, wait, "wait")
                signals = semaphore_pairs(self, signal, "signal")
                if not self._failed_wait(waits, signals):
                    self._queue_execute(command_buffer, table, waits, signals, constants)
                for sem, value in signals:
                    sem.promised = value
            command_buffer.submitted()

    # Queue transfers: each is a one-shot command buffer of its commands, submitted like queue_execute (the same
    # checks, the same order, never blocking); the data of an update is copied when it is called.
    def queue_fill(self, target: Buffer | BufferRef, pattern: Any,
                   wait: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES,
                   signal: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES) -> None:
        """Queue a fill of `target` with `pattern` (as `CommandBuffer.fill_buffer`); never blocks.

        Args:
            target: A buffer or `hal.ref` of this device.
            pattern: 1, 2 or 4 bytes (a numpy scalar or bytes).
            wait, signal: As for `queue_execute`.

        Raises:
            ValidationError: As `fill_buffer`, named `queue_fill`, or a semaphore pair is wrong. Nothing is queued.
        """
        self._queue_transfer("queue_fill", lambda cb: cb.fill_buffer(target, pattern), wait, signal)

    def queue_update(self, target: Buffer | BufferRef, data: Any,
                     wait: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES,
                     signal: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES) -> None:
        """Queue a write of `data` at the start of `target`; never blocks.

        Args:
            target: A buffer or `hal.ref` of this device, at least as large as the data.
            data: Any size (it is written in pieces of at most 64 KiB), copied now.
            wait, signal: As for `queue_execute`.

        Raises:
            ValidationError: The data is empty or does not fit, a range is wrong, or a semaphore pair is wrong.
                Nothing is queued.
        """
        view = bytes_view(data, "queue_update: data")
        whole = self._whole(target, "queue_update", "target")
        if not 0 < view.nbytes <= whole.nbytes:
            raise ValidationError(f"queue_update: {view.nbytes} bytes of data; the target range holds 1 to "
                                  f"{whole.nbytes}")

        def record(cb: CommandBuffer) -> None:  # disjoint pieces of one segment, at most MAX_UPDATE_BYTES each
            for start in range(0, view.nbytes, MAX_UPDATE_BYTES):
                piece = view[start:start + MAX_UPDATE_BYTES]
                cb.update_buffer(ref(whole.buffer, whole.offset + start, len(piece)), piece)

        self._queue_transfer("queue_update", record, wait, signal)

    def queue_copy(self, source: Buffer | BufferRef, target: Buffer | BufferRef,
                   wait: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES,
                   signal: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES) -> None:
        """Queue a copy from `source` to `target` (as `CommandBuffer.copy_buffer`); never blocks.

        Args:
            source: A buffer or `hal.ref` of this device.
            target: A buffer or `hal.ref` of this device.
            wait, signal: As for `queue_execute`.

        Raises:
            ValidationError: As `copy_buffer`, named `queue_copy`, or a semaphore pair is wrong. Nothing is queued.
        """
        self._queue_transfer("queue_copy", lambda cb: cb.copy_buffer(source, target), wait, signal)

    def _queue_transfer(self, what: str, record: Callable[[CommandBuffer], None],
                        wait: Iterable[tuple[Semaphore, int]], signal: Iterable[tuple[Semaphore, int]]) -> None:
        wait = semaphore_pairs(self, wait, "wait", what)  # refused in the name of the operation the user called
        signal = semaphore_pairs(self, signal, "signal", what)
        cb = self.create_command_buffer()
        cb.begin()
        try:
            record(cb)
        except ValidationError as e:  # the command's own check, named by the queue operation the user called
            raise ValidationError(f"{what}: {_RECORDED_COMMAND.sub('', str(e))}") from None
        cb.end()
        self.queue_execute(cb, wait=wait, signal=signal)

    def queue_alloca(self, nbytes: int, wait: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES,
                     signal: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES,
                     usage: BufferUsage | int = BufferUsage.DEFAULT) -> Buffer:
        """A transient buffer for the work queued after this call; never blocks.

        The memory comes from the device's stream-ordered pool (CUDA: cuMemAllocAsync on the queue's stream) or its
        sub-allocator, and goes back with `queue_dealloca`. Contents are undefined.

        Args:
            nbytes: Its size.
            wait, signal: As for `queue_execute`.
            usage: As for `allocate`.

        Returns:
            The `hal.Buffer`, usable at once by work queued from now on.

        Raises:
            ValidationError: The device is closed, or a semaphore pair is wrong (another device's semaphore, a value
                not above the current or promised one). Nothing is queued.
            OutOfMemoryError: The device has no room for it.
        """
        self.check_open()
        nbytes = integer(nbytes, "queue_alloca: nbytes", 0)
        wait = semaphore_pairs(self, wait, "wait", "queue_alloca")  # bad input queues nothing
        signal = semaphore_pairs(self, signal, "signal", "queue_alloca")
        buffer = self.allocate(nbytes, usage)
        self._transients.add(buffer)
        if wait or signal:
            self._queue_transfer("queue_alloca", _no_commands, wait, signal)
        return buffer

    def queue_dealloca(self, buffer: Buffer, wait: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES,
                       signal: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES) -> None:
        """Give a `queue_alloca` buffer back once the waits are met and the work queued before is done (the queue
        runs in order, so nothing queued before still uses it when it goes; CUDA: cuMemFreeAsync on the stream).
        Any later use of the buffer is a ValidationError. Never blocks.

        Args:
            buffer: A buffer this device's `queue_alloca` made.
            wait, signal: As for `queue_execute`.

        Raises:
            ValidationError: The buffer did not come from `queue_alloca`, was given back already, or a semaphore pair
                is wrong.
        """
        self.check_open()
        if not isinstance(buffer, Buffer) or buffer not in self._transients:
            raise ValidationError(f"queue_dealloca: {buffer!r} was not made by this device's queue_alloca; give "
                                  f"other buffers back with buffer.release()")
        if buffer.released:
            raise ValidationError("queue_dealloca: the buffer was already deallocated or released")
        wait = semaphore_pairs(self, wait, "wait", "queue_dealloca")
        signal = semaphore_pairs(self, signal, "signal", "queue_dealloca")
        if wait or signal:
            self._queue_transfer("queue_dealloca", _no_commands, wait, signal)
        buffer.release()  # freed after the work queued so far, the submission above included

    def queue_host_call(self, fn: Callable[[], object], wait: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES,
                        signal: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES) -> None:
        """Queue a call of `fn()` on a hal thread, once the waits are met and the work queued before is done; the
        work queued after, and the signals, follow its return. Never blocks.

        If fn raises (or a wait failed), the signal semaphores fail with a DeviceError naming the cause, and so does
        the work that waits on them; the failure is reported once (hal.failures). fn may use hal and other devices,
        but not wait for this device's queue (synchronize, its buffers' read or write): the queue waits for fn.

        Args:
            fn: A callable taking no arguments.
            wait, signal: As for `queue_execute`.

        Raises:
            ValidationError: `fn` is not callable, or a semaphore pair is wrong. Nothing is queued.
        """
        if self._closed:
            self.check_open()
        if not callable(fn):
            raise ValidationError(f"queue_host_call: fn must be callable (takes no arguments), got {fn!r}")
        with self._submit_lock:
            waits = semaphore_pairs(self, wait, "wait", "queue_host_call")
            signals = semaphore_pairs(self, signal, "signal", "queue_host_call")
            if not self._failed_wait(waits, signals):
                self._queue_host_call(fn, waits, signals)
            for sem, value in signals:
                sem.promised = value

    def queue_clock(self) -> QueueClock:
        """A clock in the queue, for hal.tracing.

        Returns:
            A clock whose `mark()` queues a mark after the work queued so far; once the queue passed them
            (synchronize), `seconds()` gives their times from the first, read where the work runs (CUDA events,
            Vulkan timestamps, the host backend's queue thread); `close()` frees it.

        Raises:
            ValidationError: The device is closed.
        """
        self.check_open()
        return self._queue_clock()

    def queue_read(self, source: Buffer | BufferRef, out: np.ndarray,
                   wait: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES,
                   signal: Iterable[tuple[Semaphore, int]] = NO_SEMAPHORES) -> None:
        """Queue a read of `source` into a numpy array; never blocks: `out` holds the data once a signal is reached
        (a copy into staging memory, then a host call that fills `out`).

        Args:
            source: A buffer or `hal.ref` of this device, at least `out.nbytes` long; its first `out.nbytes` bytes
                are read.
            out: A writable C-contiguous numpy array. If earlier work failed, `out` is left as it was and the
                signals fail with that failure.
            wait, signal: As for `queue_execute`.

        Raises:
            ValidationError: `out` is not a writable contiguous array or is larger than the range, the source is
                not a live buffer of this device, or a semaphore pair is wrong. Nothing is queued.
        """
        if not isinstance(out, np.ndarray) or not out.flags.c_contiguous or not out.flags.writeable:
            raise ValidationError(f"queue_read: out must be a writable C-contiguous numpy array, got "
                                  f"{type(out).__name__}")
        whole = self._whole(source, "queue_read", "source")
        if out.nbytes > whole.nbytes:
            raise ValidationError(f"queue_read: out holds {out.nbytes} bytes; the source range has {whole.nbytes}")
        self.check_open()
        wait = semaphore_pairs(self, wait, "wait", "queue_read")  # bad input queues nothing
        signal = semaphore_pairs(self, signal, "signal", "queue_read")
        target = out.reshape(-1).view(np.uint8)
        n = len(target)
        with self._read_lock:  # reads take the values of their timeline in queue order
            if self._reads is None:
                self._reads = self.create_semaphore(0), 0
                self._reads[0].internal = True  # a failed read fails its own signals only
            sem, value = self._reads
            self._reads = sem, value + 1
            staging, view = self._readbacks.take(n)
            try:
                if n:
                    read_from, into = ref(whole.buffer, whole.offset, n), ref(staging, 0, n)
                    self._queue_transfer("queue_read", lambda cb: cb.copy_buffer(read_from, into), wait,
                                         [(sem, value + 1)])
                else:  # nothing to copy: only the order
                    self.queue_host_call(_nothing, wait=wait, signal=[(sem, value + 1)])

                def deliver() -> None:
                    try:
                        failure = self.failures.take_oldest()
                        if failure is not None:  # earlier work failed: the read's signals fail with it, `out` as it was
                            raise failure
                        target[:] = view[:n]
                    finally:
                        self._readbacks.give(staging, view)  # work queued later may reuse it: it runs after this

                self.queue_host_call(deliver, wait=wait + ((sem, value + 1),), signal=signal)  # a failed wait: no
                # copy came, and the call fails its signals instead of filling `out`
            except BaseException:
                staging.release()  # once the work queued so far is done
                raise

    def _whole(self, reference: Buffer | BufferRef, what: str, role: str) -> BufferRef:
        if not isinstance(reference, (Buffer, BufferRef)) or isinstance(reference, BufferRef) and \
                reference.buffer is None:
            raise ValidationError(f"{what}: {role} must be a hal.Buffer or a hal.ref() of one, got {reference!r}")
        if reference.buffer.released if isinstance(reference, BufferRef) else reference.released:
            raise ValidationError(f"{what}: {role} is a released buffer")
        return reference.whole if isinstance(reference, Buffer) else reference

    # Failures of queued work.
    def _failed_wait(self, waits: tuple[tuple[Semaphore, int], ...],
                     signals: tuple[tuple[Semaphore, int], ...]) -> bool:
        """Under the submit lock: if a wait's semaphore failed, the work fails the same way without running (its
        signals fail); True then."""
        failure = next((s.failure for s, _ in waits if s.failure is not None), None)
        if failure is None:
            return False
        self._fail(signals, failure)
        if signals:
            self._queue_signals(signals)  # the values still come, in queue order: nothing queued waits forever
        return True

    def fail_signals(self, signals: tuple[tuple[Semaphore, int], ...], error: BaseException) -> None:
        """Queued work failed with `error` (a backend's call): its signal semaphores fail, and so, in queue order,
        do the signals of queued work that waits on a failed semaphore; the next synchronize() raises `error`."""
        with self._submit_lock:  # no submission lands between the check of its waits and this
            self._fail(signals, error)
            self.failures.note(error)

    def pass_failure_on(self, signals: tuple[tuple[Semaphore, int], ...], failure: BaseException) -> None:
        """Queued work did not run because a semaphore it waits on failed with `failure`: its signals fail the same
        way. The failure was noted where it arose, and may have been raised since: it is not noted again."""
        with self._submit_lock:
            self._fail(signals, failure)

    def _fail(self, signals: tuple[tuple[Semaphore, int], ...], error: BaseException) -> None:
        """Under the submit lock: fail `signals`, then what queued work waits on a failed semaphore signals."""
        for sem, _ in signals:
            sem.fail(error)
        for waits, later in self._queued_work():
            failure = next((s.failure for s, _ in waits if s.failure is not None), None)
            if failure is not None:
                for sem, _ in later:
                    sem.fail(failure)

    def synchronize(self, timeout: float | None = None) -> None:
        """Wait until all submitted work is done.

        Args:
            timeout: Seconds to wait at most; None waits for as long as it takes (hal.deadline).

        Raises:
            DeviceError: Submitted work failed and nothing has raised that failure yet (each failure is reported
                once, at the first place that observes it: hal.failures).
            DeviceLostError: The device was lost.
            TimeoutError: Work was still running after `timeout` seconds (named in the message; nothing is lost).
            ValidationError: The device is closed, the timeout is not seconds, or this is called inside a
                `queue_host_call` function (the queue waits for it).
        """
        self.check_open()
        self._refuse_inside_host_call("synchronize()")
        self._synchronize(Deadline.of(timeout, "synchronize"))
        self.failures.raise_unreported("a submission failed")

    def _refuse_inside_host_call(self, what: str) -> None:
        if self.host_calls.is_current():
            raise ValidationError(f"{what} inside a queue_host_call function would wait for its own queue, which "
                                  f"waits for the function; queue the work instead (queue_read, queue_execute) or do "
                                  f"it after a wait on the call's signal")

    def close(self) -> None:
        """Free the device once the work that can still run has run (also what leaving a `with` block does).
        Submissions still waiting on a semaphore are dropped and their signal semaphores fail. Idempotent; any
        later use of the device raises ValidationError."""
        if self._closed:
            return
        self._closed = True
        self._executables.clear()
        self._readbacks.close()
        self._close()

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        closed = " closed" if self._closed else ""
        return f"<{type(self).__name__} {self.driver}:{self.index} #{self.serial}: {self.name}{closed}>"

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self) -> None:
        """Raise ValidationError if the device is closed."""
        if self._closed:
            raise ValidationError(f"the {self.driver} device {self.name!r} is closed; create a new one")

    def wait_for_queue(self) -> None:
        """Wait until the work queued so far is done, leaving its failures to synchronize() (for a communicator
        draining its devices)."""
        self._refuse_inside_host_call("a wait for the queue")
        self._synchronize()

    def order_host_access(self, what: str = "a buffer read or write") -> None:
        """Called before a buffer read or write (`what`): host access is ordered after submitted work, and a failure
        of that work nothing has raised yet is raised (see synchronize)."""
        self._refuse_inside_host_call(what)
        self._synchronize()
        self.failures.raise_unreported(f"{what}: work queued before it failed")

    @contextlib.contextmanager
    def waiting(self) -> Iterator[None]:
        """Marks a thread waiting on the device (for backends whose close() must let such waits end
        before destroying what they wait on: see `_waiters`)."""
        with self._waiters_lock:
            self._waiters += 1
        try:
            yield
        finally:
            with self._waiters_lock:
                self._waiters -= 1

    def buffer_released(self) -> None:
        self.release_token = object()  # a buffer was released: what was checked with it in use is checked again

    def executable_released(self, executable: Executable) -> None:
        """An executable was released: it leaves the cache, and command buffers using it are checked again."""
        key = executable.source.key
        if self._executables.get(key) is executable:
            del self._executables[key]
        self.release_token = object()

    # The backend contract: what a backend's device implements (the abstract methods) and may replace (the others).
    # Each is called with its arguments checked; the queue_* ones under the submit lock, and none of them may block
    # on the device's work (synchronize's excepted).
    @abc.abstractmethod
    def _allocate(self, nbytes: int, usage: BufferUsage) -> Buffer:
        """A new buffer of `nbytes` bytes (0 allowed) for `usage`, its contents undefined; OutOfMemoryError when the
        device cannot hold it."""

    @abc.abstractmethod
    def _load_executable(self, source: ExecutableSource) -> Executable:
        """Load `source` (this driver's form of it, its exports within the device's limits): CompileError for code
        the backend cannot build, UnsupportedError for a format it does not take. Called once per source: the
        device keeps what it returns."""

    @abc.abstractmethod
    def _create_emitter(self, command_buffer: CommandBuffer) -> Emitter:
        """The backend's side of a new command buffer (see hal.program.Emitter)."""

    @abc.abstractmethod
    def _create_semaphore(self, initial: int) -> Semaphore:
        """A timeline semaphore of this device at `initial`."""

    @abc.abstractmethod
    def _queue_execute(self, command_buffer: CommandBuffer, table: tuple[Buffer, ...],
                       waits: tuple[tuple[Semaphore, int], ...], signals: tuple[tuple[Semaphore, int], ...],
                       constants: tuple) -> None:
        """Queue a checked submission: `table` is the binding table and `constants` the constant slots' values,
        both checked (NO_CONSTANTS when the command buffer reads none); it runs after every wait pair is reached
        and the work queued before, then signals. A failure while it runs fails its signals (fail_signals)."""

    def new_communicator(self, devices: tuple[Device, ...], world: int, rank: int,
                         rendezvous: str | None) -> Communicator:
        """The backend's communicator for hal.create_communicator (`devices`: this process's ranks, from `rank`, of
        `world`; `rendezvous`: the one-process-per-device form's file; all checked)."""
        return self._create_communicator(devices, world, rank, rendezvous)

    def _create_communicator(self, devices: tuple[Device, ...], world: int, rank: int,
                             rendezvous: str | None) -> Communicator:
        """A communicator (the arguments checked); backends without collectives keep this refusal."""
        raise unsupported(self.driver)

    @abc.abstractmethod
    def _queue_host_call(self, fn: Callable[[], object], waits: tuple[tuple[Semaphore, int], ...],
                         signals: tuple[tuple[Semaphore, int], ...]) -> None:
        """Queue `fn` to run on a hal thread once the waits are met and the work queued before is done; the work
        queued after, and the signals, follow its return (or fail with what it raised). See hal.host_call for the
        GPU backends' gate."""

    def _queue_clock(self) -> QueueClock:
        """See queue_clock: here host calls, which the GPU backends replace with their own timers."""
        return HostCallClock(self)

    def _queue_signals(self, signals: tuple[tuple[Semaphore, int], ...]) -> None:
        """Under the submit lock: queue a submission that only signals (for work skipped since a wait failed)."""
        self._queue_host_call(_nothing, (), signals)

    def _queued_work(self) -> Iterable[tuple[tuple, tuple]]:
        """(waits, signals) of the queued, unfinished work that waits or signals, in queue order: fail_signals
        fails what waits on a failed semaphore (backends whose queue checks waits as it runs keep this default)."""
        return ()

    @abc.abstractmethod
    def _readback_buffer(self, nbytes: int) -> tuple[Buffer, np.ndarray]:
        """A buffer of at least `nbytes` that copies write and the host reads directly (its numpy view)."""

    @abc.abstractmethod
    def _synchronize(self, deadline: Deadline | None = None) -> None:
        """Block until the work queued so far is done (its failures reach synchronize() through `failures`;
        DeviceLostError if the device is lost; `deadline.error` once it has passed)."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Free what the device holds once the work that can still run has run; called once, by close()."""


def _nothing() -> None:
    """A host call that only keeps the queue's order."""


def _no_commands(cb: CommandBuffer) -> None:
    """A submission that only waits and signals."""


_serials = itertools.count(1)  # Device.serial
# The recorder's "command 0 (copy_buffer): " before a queue transfer's refusal: the user called no such command.
_RECORDED_COMMAND = re.compile(r"^command \d+ \(\w+\): ")
