"""The CUDA driver and device: the primary context, one stream, the stream-ordered memory pool.

Everything a device does goes on its one stream, in submission order: graph launches, stream
launches of one-shot command buffers, semaphore waits and signals (stream memory operations, so a
submission waits for another's signal without a host round trip), staging copies and frees. Host
access waits for the stream. What must outlive in-flight work (modules, pinned staging) is retired
with an event and destroyed once the event has passed (hal.lifetime).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from cuda.bindings import driver

from backends.cuda_graph import context
from backends.cuda_graph.api import NOT_READY, SUCCESS, call, fail
from backends.cuda_graph.buffer import CudaBuffer, host_alloc
from backends.cuda_graph.clock import EventClock
from backends.cuda_graph.command_buffer import CudaEmitter, launch_host_call_notice
from backends.cuda_graph.communicator import CudaCommunicator
from backends.cuda_graph.executable import PARAMETER_BYTES, CudaExecutable
from backends.cuda_graph.resubmission import Resubmission
from backends.cuda_graph.semaphore import CudaSemaphore
from hal.buffer import Buffer, BufferUsage
from hal.capabilities import Capabilities
from hal.command_buffer import CommandBuffer
from hal.deadline import Deadline
from hal.device import Device
from hal.drivers import DeviceInfo, Driver
from hal.errors import DeviceLostError, HalError, UnsupportedError, ValidationError
from hal.executable import Executable, ExecutableSource
from hal.host_call import HostCall
from hal.indirect import FAULT_BYTES, raise_fault
from hal.lifetime import Lifetime, Release
from hal.resubmission import queue_execute
from hal.semaphore import Semaphore, queue_deadlock, waits_for_the_host

A = driver.CUdevice_attribute
STAGING_BYTES = 32 << 20
POLL_S = 0.0002  # the host's polling period while the stream waits for a semaphore
EARLY_LAUNCH_DRIVER = 12030  # programmatic edges in graphs (CUgraphEdgeData): driver 12.3
# Chains the commands of one segment run in (see hal.dependencies). CUDA's instantiation and launch cost grow with a
# graph's width, and a wide fan runs no faster on the GPU than 64 lanes of it (fewer lanes than that leave
# longer kernels waiting): the figures are in bench/README.md.
GRAPH_LANES = 64


def graph_lanes() -> int:
    """$HAL_CUDA_GRAPH_LANES (0: as wide as the segments), else GRAPH_LANES."""
    value = os.environ.get("HAL_CUDA_GRAPH_LANES", "")
    if not value:
        return GRAPH_LANES
    if not value.isdigit():
        raise ValidationError(f"HAL_CUDA_GRAPH_LANES must be a whole number of lanes (0: no limit), got {value!r}")
    return int(value)


class CudaDriver(Driver):
    name = "cuda"

    def __init__(self) -> None:
        try:
            err, = driver.cuInit(0)
        except RuntimeError as e:  # cuda-python found no libcuda.so: the NVIDIA driver is not installed
            raise UnsupportedError(f"no CUDA driver on this machine ({e})") from e
        if err != SUCCESS:
            raise UnsupportedError(f"cuInit failed: {fail(err, 'cuInit')}; no usable NVIDIA driver or GPU")

    def devices(self) -> list[DeviceInfo]:
        count = call(driver.cuDeviceGetCount)
        if not count:
            raise UnsupportedError("the CUDA driver sees no GPU")
        return [DeviceInfo("cuda", i, call(driver.cuDeviceGetName, 256, call(driver.cuDeviceGet, i))
                           .split(b"\0", 1)[0].decode(), "gpu") for i in range(count)]

    def create_device(self, index: int | None, capabilities: Mapping[str, Any] | None) -> CudaDevice:
        return CudaDevice(index or 0, capabilities)


def query_capabilities(device: Any) -> Capabilities:
    def attr(a: Any) -> int:
        return int(call(driver.cuDeviceGetAttribute, a, device))

    return Capabilities(
        supported_subgroup_operations=0xFF,  # warps do all of Vulkan's subgroup operations
        max_push_constants_size=PARAMETER_BYTES,
        max_uniform_buffer_range=attr(A.CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY),
        max_storage_buffer_range=int(call(driver.cuDeviceTotalMem, device)),
        max_per_stage_descriptor_storage_buffer=PARAMETER_BYTES // 8,
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
        max_workgroup_count=(attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X), attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
                             attr(A.CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)),
        max_workgroup_size=(attr(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X), attr(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
                            attr(A.CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)),
        max_workgroup_invocations=attr(A.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        storage_buffer_offset_alignment=16,  # what vector loads of 16 bytes need
        fill_buffer_alignment=1,  # memset nodes take 1-, 2- and 4-byte elements at their own alignment
        update_buffer_alignment=1,
        copy_buffer_alignment=1,
        supports_early_launch=attr(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) >= 9 and
        int(call(driver.cuDriverGetVersion)) >= EARLY_LAUNCH_DRIVER,
        supports_foreign_calls=True,  # captured from a stream (CommandBuffer.call)
    )


class CudaDevice(Device):
    def __init__(self, ordinal: int, overrides: Mapping[str, Any] | None) -> None:
        self.ordinal = ordinal
        self.cu_device = call(driver.cuDeviceGet, ordinal)
        name = call(driver.cuDeviceGetName, 256, self.cu_device).split(b"\0", 1)[0].decode()
        self.compute_capability = (
            int(call(driver.cuDeviceGetAttribute, A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.cu_device)),
            int(call(driver.cuDeviceGetAttribute, A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.cu_device)))
        real = query_capabilities(self.cu_device)
        caps = real.with_overrides(overrides)
        caps.check_within(real, name)
        super().__init__("cuda", name, caps, ordinal)
        self.driver_version = int(call(driver.cuDriverGetVersion))  # e.g. 12040 for 12.4
        self.context = context.acquire(self.cu_device, ordinal)  # (backends.cuda_graph.context: after a fault)
        self.context_handle = int(self.context)
        _current.device = self
        try:
            self.stream = call(driver.cuStreamCreate, driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
        except BaseException:
            _current.device = None
            context.release(self.cu_device)
            raise
        self.stream_handle = int(self.stream)
        self._capture_stream: Any = None  # made at the first call's capture (capture_stream)
        self.pool = call(driver.cuDeviceGetDefaultMemPool, self.cu_device)
        call(driver.cuMemPoolSetAttribute, self.pool, driver.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
             driver.cuuint64_t(0xFFFFFFFFFFFFFFFF))  # keep freed memory for reuse instead of returning it
        self.graph_lanes = graph_lanes()
        self._lock = threading.Lock()  # the pending list
        self._staging: tuple[int, int, np.ndarray] | None = None
        self._staging_lock = threading.Lock()
        # A pinned timeline the stream writes after each submission that waits or signals: the host reads
        # which of those are done without a driver call.
        self._marks = host_alloc(8)
        self._marks[2][:] = 0
        self._faults: tuple[int, int, np.ndarray] | None = None  # the dispatch_indirect fault record (hal.indirect)
        self._submitted = 0  # submissions with waits or signals: the mark each writes
        self._pending: list[tuple[int, tuple, tuple]] = []  # (mark, waits, signals) of unfinished submissions
        self._gate: CudaSemaphore | None = None  # host calls' gate (hal.host_call), made on first use
        self.host_signalled = threading.Condition()  # notified at each host write of a semaphore value
        self._gates = 0  # host calls queued: the gate value the last one opens
        self._host_frees: list[int] = []  # pinned memory done with, freed once the stream is idle (_free_host)
        self._host_frees_lock = threading.Lock()
        self._destroyers = {  # per kind of handle track() takes: how to free one, and whether that is stream-ordered
            "memory": (self._free_memory, True),  # cuMemFreeAsync is ordered after the work submitted so far
            "exec": (self._destroy_exec, True),  # an exec in flight is freed by the driver when it is done
            "graph": (self._destroy_graph, True),
            "host": (self._free_host, False),
            "module": (self._unload_module, False),
            "owner": (_keep, False),
        }
        self.lifetime = Lifetime(mark=self._mark, finished=lambda event: driver.cuEventQuery(event)[0] != NOT_READY,
                                 forget=driver.cuEventDestroy, on_release=self._replace_token)
        self._lost: HalError | None = None
        # A command buffer holding its token resubmits as one launch (queue_execute): revoked whenever that stops
        # being safe for all of them (something to free or released, the device lost or closing), and given again
        # to one by a submission that finds it safe.
        self.resubmission = Resubmission()

    @property
    def resubmit_token(self) -> object:
        """The token a command buffer's emitter holds while its resubmission is one launch."""
        return self.resubmission.token

    @property
    def capture_stream(self) -> int:
        """The stream calls' functions are captured from (CommandBuffer.call), one per device: a library that keeps
        state per stream (torch's cuBLAS workspace) keeps one."""
        if self._capture_stream is None:
            self.activate()
            self._capture_stream = call(driver.cuStreamCreate, driver.CUstream_flags.CU_STREAM_NON_BLOCKING)
        return int(self._capture_stream)

    @property
    def graph_lanes(self) -> int:
        """The most chains a segment's commands run in (0: no limit); each command buffer reads it as it
        is created."""
        return self._graph_lanes

    @graph_lanes.setter
    def graph_lanes(self, lanes: int) -> None:
        if type(lanes) is not int or lanes < 0:
            raise ValidationError(f"graph_lanes must be a whole number of lanes (0: no limit), got {lanes!r}")
        self._graph_lanes = lanes

    # Context and lifetimes.
    def activate(self) -> None:
        """Make the device's context current in this thread (driver calls without a handle need it). A
        thread remembers the device it last activated, so the common case costs one attribute read."""
        if _current.device is not self:
            call(driver.cuCtxSetCurrent, self.context)
            _current.device = self

    def track(self, owner: object, kind: str, handle: Any) -> Release:
        """Free `handle` (kind: memory, host, module, graph, exec, or owner: an imported buffer's owner object,
        kept alive) once `owner` is released (call the result) or collected, when the work submitted until then
        no longer needs it; or at close (hal.lifetime)."""
        destroy, ordered = self._destroyers[kind]
        return self.lifetime.track(owner, destroy, handle, ordered=ordered)

    def collect(self) -> None:
        """Free what was released or collected and what retired work has finished with (a safe point)."""
        if self.lifetime.pending:
            self.lifetime.collect()
        if self._host_frees:
            self._free_hosts_if_idle()

    def _free_memory(self, address: int) -> None:
        self.activate()
        call(driver.cuMemFreeAsync, address, self.stream)

    def _destroy_exec(self, handle: int) -> None:
        self.activate()
        call(driver.cuGraphExecDestroy, driver.CUgraphExec(handle))

    def _destroy_graph(self, handle: int) -> None:
        self.activate()
        call(driver.cuGraphDestroy, driver.CUgraph(handle))

    def _free_host(self, address: int) -> None:
        """cuMemFreeHost waits for everything on the stream, which may be stopped at a host call's gate whose function
        needs a lock the caller holds (a deadlock): pinned memory waits for an idle stream (collect(), synchronize(),
        close())."""
        with self._host_frees_lock:
            self._host_frees.append(address)
        self._free_hosts_if_idle()

    @property
    def host_frees_pending(self) -> int:
        """Pinned allocations done with that wait for an idle stream to be freed (see _free_host)."""
        return len(self._host_frees)

    def _free_hosts_if_idle(self) -> None:
        self.activate()
        if driver.cuStreamQuery(self.stream)[0] != SUCCESS:  # busy (an error shows at the next submission or wait)
            return
        with self._host_frees_lock:
            addresses, self._host_frees = self._host_frees, []
        for i, address in enumerate(addresses):
            try:
                call(driver.cuMemFreeHost, address)
            except BaseException:
                with self._host_frees_lock:  # the others wait for the next try
                    self._host_frees[:0] = addresses[i + 1:]
                raise

    def _unload_module(self, handle: int) -> None:
        self.activate()
        call(driver.cuModuleUnload, driver.CUmodule(handle))

    def _mark(self) -> Any:
        """An event recorded after the work submitted so far (hal.lifetime's mark)."""
        self.activate()
        event = call(driver.cuEventCreate, driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        call(driver.cuEventRecord, event, self.stream)
        return event

    def _replace_token(self) -> None:
        """Something is left to free: the next submission must take the general path, which collects."""
        self.resubmission.revoke()

    def buffer_released(self) -> None:
        """A buffer was released: a table holding it must be checked again, by the general path."""
        super().buffer_released()
        self.resubmission.revoke()

    def executable_released(self, executable: Executable) -> None:
        """An executable was released: command buffers using it are checked again, by the general path."""
        super().executable_released(executable)
        self.resubmission.revoke()

    # Memory.
    def _allocate(self, nbytes: int, usage: BufferUsage) -> CudaBuffer:
        self.check_lost()
        self.activate()
        self.collect()
        return CudaBuffer(self, nbytes, usage)

    def memory_stats(self) -> dict[str, int]:
        """The stream-ordered pool's figures: bytes in use (allocated, not yet freed in stream order) and
        reserved from the driver, and the high-water mark of use."""
        attribute = driver.CUmemPool_attribute
        return {name: int(call(driver.cuMemPoolGetAttribute, self.pool, a)) for name, a in (
            ("used_bytes", attribute.CU_MEMPOOL_ATTR_USED_MEM_CURRENT),
            ("reserved_bytes", attribute.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
            ("used_high_bytes", attribute.CU_MEMPOOL_ATTR_USED_MEM_HIGH))}

    def allocate_memory(self, nbytes: int) -> int:
        return int(call(driver.cuMemAllocAsync, nbytes, self.stream))

    def import_buffer(self, obj: Any, usage: BufferUsage | int = BufferUsage.DEFAULT) -> CudaBuffer:
        """A hal buffer over the memory of `obj` (a PyTorch or CuPy tensor, or anything speaking DLPack or
        the CUDA Array Interface), without a copy. `obj` stays alive while the buffer does; it must be
        contiguous and on this device. Work `obj`'s stream had queued is ordered before this device's."""
        self.check_open()
        view = _strided_view(obj, self.stream_handle)
        if view.device_id != self.ordinal or not view.is_device_accessible:
            raise ValidationError(f"import_buffer: the memory is on device {view.device_id}, "
                                  f"not on cuda:{self.ordinal}")
        itemsize = np.dtype(view.dtype).itemsize if view.dtype is not None else 1
        shape = tuple(view.shape)
        strides = view.strides
        contiguous = strides is None or all(
            s == int(np.prod(shape[i + 1:], dtype=np.int64)) for i, s in enumerate(strides))
        if not contiguous:
            raise ValidationError(f"import_buffer: the memory is strided {strides} for shape {shape}; give a "
                                  f"contiguous tensor (e.g. tensor.contiguous())")
        size = int(np.prod(shape, dtype=np.int64)) * itemsize
        alignment = self.capabilities.storage_buffer_offset_alignment
        if int(view.ptr) % alignment:
            raise ValidationError(f"import_buffer: the memory starts at 0x{int(view.ptr):x}, not a multiple of the "
                                  f"device's storage_buffer_offset_alignment {alignment}; import the whole tensor "
                                  f"and bind a range of it with hal.ref()")
        return CudaBuffer(self, size, BufferUsage(usage), address=int(view.ptr), owner=obj)

    def core_view(self, buffer: CudaBuffer) -> Any:
        """A cuda.core Buffer over `buffer`'s memory, for DLPack export."""
        core = _cuda_core()
        return core.Buffer.from_handle(buffer.address, buffer.size, owner=buffer)

    def order_consumer(self, stream: Any) -> None:
        """Make the consumer's `stream` (a DLPack stream value) wait for the work submitted here."""
        if stream == -1:
            return
        if stream is None:
            self._synchronize()
            return
        event = call(driver.cuEventCreate, driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        call(driver.cuEventRecord, event, self.stream)
        call(driver.cuStreamWaitEvent, driver.CUstream(int(stream)), event, 0)
        call(driver.cuEventDestroy, event)

    def queue_wait_stream(self, stream: Any) -> None:
        """Order the work queued here after this call after the work queued so far on another library's CUDA
        `stream` (a torch.cuda.Stream, a CuPy or cuda.core stream, or a CUstream handle as an int), without a host
        wait: an event recorded there, which this device's stream waits for."""
        self.check_open()
        self.activate()
        event = call(driver.cuEventCreate, driver.CUevent_flags.CU_EVENT_DISABLE_TIMING)
        try:
            call(driver.cuEventRecord, event, driver.CUstream(stream_handle(stream)))
            with self._submit_lock:  # in queue order with hal's own submissions
                self._replace_token()
                call(driver.cuStreamWaitEvent, self.stream, event, 0)
        finally:
            call(driver.cuEventDestroy, event)  # released once the wait is done with it

    def queue_signal_stream(self, stream: Any) -> None:
        """Order the work queued on another library's CUDA `stream` after this call after the work queued here so
        far (the other way round from queue_wait_stream), without a host wait."""
        self.check_open()
        self.activate()
        with self._submit_lock:
            self.order_consumer(stream_handle(stream))

    def staging_copy(self, address: int, host: np.ndarray, to_device: bool) -> None:
        """Copy between `host` and device memory at `address` through pinned staging, piece by piece, in
        stream order; waits for each piece."""
        self.check_lost()
        self.activate()
        with self._staging_lock:
            if self._staging is None:
                self._staging = host_alloc(STAGING_BYTES)
            _, staging, view = self._staging
            for start in range(0, len(host), STAGING_BYTES):
                piece = host[start:start + STAGING_BYTES]
                n = len(piece)
                if to_device:
                    view[:n] = piece
                    call(driver.cuMemcpyAsync, address + start, staging, n, self.stream)
                else:
                    call(driver.cuMemcpyAsync, staging, address + start, n, self.stream)
                self._wait_stream()
                if not to_device:
                    piece[:] = view[:n]

    # Executables, command buffers, semaphores.
    def _load_executable(self, source: ExecutableSource) -> CudaExecutable:
        self.check_lost()
        self.activate()
        return CudaExecutable(self, source)

    def _create_communicator(self, devices: tuple[Device, ...], world: int, rank: int,
                             rendezvous: str | None) -> CudaCommunicator:
        return CudaCommunicator(devices, world, rank, rendezvous)

    def _create_emitter(self, command_buffer: CommandBuffer) -> CudaEmitter:
        self.activate()
        return CudaEmitter(self, command_buffer.mode, command_buffer.strategy, command_buffer.binding_capacity,
                           command_buffer.constant_capacity)

    def _create_semaphore(self, initial: int) -> CudaSemaphore:
        self.activate()
        return CudaSemaphore(self, initial)

    # The queue.
    # The resubmission is the hot path: queue_execute is compiled (hal.resubmission, CudaEmitter.resubmitted), and
    # takes the general path below for everything but an unchanged command buffer holding the device's resubmit token.
    queue_execute = queue_execute

    def _queue_clock(self) -> EventClock:
        return EventClock(self)

    def _queue_execute(self, command_buffer: CommandBuffer, table: tuple[Buffer, ...],
                       waits: tuple[tuple[CudaSemaphore, int], ...],
                       signals: tuple[tuple[CudaSemaphore, int], ...], constants: tuple) -> None:
        """The general path: a first submission, a new table or constants, semaphores (queue_execute takes the
        resubmission)."""
        token = self.resubmission.token  # before the checks: a loss, a release or a close while this runs replaces it
        if self._lost is not None:
            self.check_lost()
        self.activate()
        if waits:
            # A resubmission from another thread must not land between this one's wait and its launch, and none
            # may hold the GIL in a launch queued behind a wait only the host can end: none until it has run.
            self._replace_token()
            self._stream_waits(waits)
        emitter = command_buffer.emitter
        emitter.token = None  # until this submission is queued: its table may differ from the last one's
        try:
            emitter.submit(table, constants)
        except DeviceLostError as e:
            self.raise_failure(e)
        if waits or signals:
            self._end_submission(waits, signals, signals)
        if self.lifetime.pending:
            with contextlib.suppress(HalError):  # the work is queued: a failure here surfaces at synchronize()
                self.lifetime.collect()
        unfinished = self._pending and self._unfinished()  # submissions that wait or signal, not yet run
        if not (waits or signals or self.lifetime.pending or self._closed or unfinished) and \
                emitter.resubmits_in_one_launch:
            emitter.token = token  # the same again is one launch

    def _queue_host_call(self, fn: Callable[[], object], waits: tuple[tuple[CudaSemaphore, int], ...],
                         signals: tuple[tuple[CudaSemaphore, int], ...]) -> None:
        """hal.host_call's gate on the stream: the waits, a host function that wakes hal's thread, a wait for the
        gate value n (pinned memory the thread writes after fn). The thread writes the signals itself, before it
        opens the gate: the work before is done, and a host write wakes the host's waiters at once (the stream's
        writes are polled)."""
        if self._lost is not None:
            self.check_lost()
        self._replace_token()  # no resubmission slips between the parts below
        self.activate()
        if self._gate is None:  # (under the submit lock, like every host call)
            self._gate = CudaSemaphore(self, 0)
            self._gate.internal = True
        gate = self._gate
        self._gates += 1
        opened = self._gates
        self._stream_waits(waits)
        reached = threading.Event()
        launch_host_call_notice(self.stream_handle, reached)
        self._stream_waits(((gate, opened),))
        self._end_submission(waits + ((gate, opened),), signals, ())  # the thread writes the signals

        def wait_reached() -> None:
            while not reached.wait(POLL_S * 50):
                if self.closed:
                    raise DeviceLostError("queue_host_call: the device was closed before the call's turn came")
                self.check_lost()

        def open_gate() -> None:  # also after a failure: the signals, already failed, must not hold up the stream
            for sem, value in signals:
                sem.host_write(value)
            gate.host_write(opened)

        self.host_calls.put(HostCall(fn, waits, signals, reached=wait_reached, release=open_gate))

    def _queue_signals(self, signals: tuple[tuple[CudaSemaphore, int], ...]) -> None:
        self._replace_token()
        self.activate()
        self._end_submission((), signals, signals)

    def _stream_waits(self, waits: tuple[tuple[CudaSemaphore, int], ...]) -> None:
        """The stream waits for each semaphore to reach its value."""
        for sem, value in waits:
            call(driver.cuStreamWaitValue64, self.stream, sem.device_address, value,
                 driver.CUstreamWaitValue_flags.CU_STREAM_WAIT_VALUE_GEQ)

    def _end_submission(self, waits: tuple, signals: tuple, written: tuple) -> None:
        """Close a submission that waits or signals: the stream writes the `written` signals and the next mark;
        until the mark is written, the submission is pending with its `waits` and `signals`."""
        self._submitted += 1
        for sem, value in written:
            call(driver.cuStreamWriteValue64, self.stream, sem.device_address, value, 0)
        call(driver.cuStreamWriteValue64, self.stream, self._marks[1], self._submitted, 0)
        with self._lock:
            self._pending.append((self._submitted, waits, signals))

    def _queued_work(self) -> list[tuple[tuple, tuple]]:
        return [(waits, signals) for _, waits, signals in self._unfinished()]

    def _readback_buffer(self, nbytes: int) -> tuple[CudaBuffer, np.ndarray]:
        host, address, view = host_alloc(nbytes)
        buffer = CudaBuffer(self, nbytes, BufferUsage.DEFAULT, address=address)
        buffer.own_host_memory(host)
        return buffer, view

    def raise_failure(self, error: HalError) -> None:
        """Raise `error`, remembering it first when it lost the device (later calls raise it too)."""
        if isinstance(error, DeviceLostError):
            self._remember_lost(error)
        raise error

    def _remember_lost(self, error: HalError) -> HalError:
        """Fail every later call with `error`, and create no CUDA device in this process from now on
        (backends.cuda_graph.context); returns it."""
        if isinstance(error, DeviceLostError):
            context.lost(str(error).split(";")[0])
        self._lost = error
        self.resubmission.revoke()
        return error

    def _done_mark(self) -> int:
        return int(self._marks[2].view(np.uint64)[0])

    def _unfinished(self) -> list[tuple[int, tuple, tuple]]:
        """The submissions with waits or signals the stream has not finished."""
        done = self._done_mark()
        with self._lock:
            self._pending = [p for p in self._pending if p[0] > done]
            return list(self._pending)

    def pending_signal(self, sem: Semaphore) -> int | None:
        """The smallest value an unfinished submission will still signal on `sem`."""
        values = [v for _, _, signals in self._unfinished() for s, v in signals if s is sem]
        return min(values) if values else None

    def _wait_stream(self, deadline: Deadline | None = None) -> None:
        """Wait for everything on the stream. While a submission waits for a semaphore, or until a deadline, poll
        instead of blocking, and refuse to wait for a host signal no other thread could give."""
        with self.waiting():
            while True:
                self.check_lost()
                unfinished = self._unfinished()
                if deadline is None and not any(s.value < v for _, waits, _ in unfinished for s, v in waits):
                    err, = driver.cuStreamSynchronize(self.stream)
                    if err != SUCCESS:
                        raise self._remember_lost(fail(err, "cuStreamSynchronize"))
                    break
                err, = driver.cuStreamQuery(self.stream)
                if err == SUCCESS:
                    break
                if err != NOT_READY:
                    raise self._remember_lost(fail(err, "cuStreamQuery"))
                self._refuse_certain_deadlock(unfinished)
                if deadline is not None and deadline.passed():
                    raise deadline.error(self, f"the work queued on its stream ({len(unfinished)} submission(s) with "
                                               f"semaphores among it unfinished)")
                time.sleep(POLL_S)
        self.collect()

    def _refuse_certain_deadlock(self, unfinished: list[tuple[int, tuple, tuple]]) -> None:
        """The first unfinished submission with a wait that neither the current values nor the signals
        of the submissions before it reach can only run after a host signal; without another thread,
        waiting would never end."""
        if any(t is not threading.current_thread() and t is not self.host_calls.thread
               for t in threading.enumerate()):
            return  # another thread may signal (not the host calls' thread: it waits for the queue itself)
        for sem, value in waits_for_the_host(unfinished, lambda s: s.value):
            if not sem.internal:  # a host call's gate opens once the calls' own waits are met
                raise queue_deadlock(value, sem.value)

    def _synchronize(self, deadline: Deadline | None = None) -> None:
        self.activate()
        self._wait_stream(deadline)
        if self._faults is not None:
            raise_fault(self._faults[2].view(np.uint32), self.capabilities.max_workgroup_count)

    def wait_for_work(self) -> None:
        """Wait for the work submitted so far, leaving its failures to synchronize() (a lost device stays lost,
        dispatch_indirect faults stay recorded)."""
        self.activate()
        with contextlib.suppress(HalError):
            self._wait_stream()

    def indirect_faults(self) -> int:
        """The device address of the fault record the dispatch_indirect setters write (pinned host memory the
        host reads at synchronize), made on first use."""
        with self._staging_lock:
            if self._faults is None:
                self._faults = host_alloc(FAULT_BYTES)
                self._faults[2][:] = 0
            return self._faults[1]

    def check_lost(self) -> None:
        if self._lost is not None:
            raise DeviceLostError(f"the CUDA device {self.name!r} is lost ({self._lost})")

    def _close(self) -> None:
        with self._submit_lock:  # a general submission under way ends first
            self.resubmission.revoke()  # no resubmission starts after
        with contextlib.suppress(HalError):
            self.activate()
        self.host_calls.drain()  # a function still running ends first; those not reached fail
        for sem, value in waits_for_the_host(self._unfinished(), lambda s: s.value):  # let a stuck queue drain
            sem.value = value
        while self._waiters:  # semaphore waits end within a poll once they see the device closed
            time.sleep(0.001)
        while driver.cuStreamQuery(self.stream)[0] == NOT_READY:  # polled: a host call's notice needs the GIL
            time.sleep(POLL_S)
        self.lifetime.close()
        for address in self._host_frees:  # the stream is idle
            driver.cuMemFreeHost(address)
        self._host_frees = []
        for host in (self._staging, self._marks, self._faults):
            if host is not None:
                driver.cuMemFreeHost(host[0])
        self._staging = self._faults = None
        driver.cuStreamSynchronize(self.stream)
        driver.cuStreamDestroy(self.stream)
        if self._capture_stream is not None:
            driver.cuStreamDestroy(self._capture_stream)
        if _current.device is self:
            _current.device = None
        context.release(self.cu_device)


class _Current(threading.local):
    """Per thread: the device whose context it made current (None before any)."""

    device: CudaDevice | None = None


_current = _Current()


def _keep(owner: Any) -> None:
    """An imported buffer's owner needs no freeing: holding it until the work is done is the point."""


def stream_handle(stream: Any) -> int:
    """The CUstream of another library's stream object (or of an int handle)."""
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    if hasattr(stream, "__cuda_stream__"):  # the CUDA stream protocol (cuda.core, recent CuPy and PyTorch)
        return int(stream.__cuda_stream__()[1])
    for attribute in ("cuda_stream", "ptr", "handle"):  # torch.cuda.Stream, cupy.cuda.Stream, others
        value = getattr(stream, attribute, None)
        if value is not None:
            return int(value)
    raise ValidationError(f"expected a CUDA stream (torch, CuPy, cuda.core) or a CUstream handle, got "
                          f"{type(stream).__name__}")


def _cuda_core() -> Any:
    try:
        import cuda.core as core
        core.Buffer  # noqa: B018 - older releases keep it under cuda.core.experimental
    except (ImportError, AttributeError):
        import cuda.core.experimental as core
    return core


def _strided_view(obj: Any, stream: int) -> Any:
    try:
        from cuda.core.utils import StridedMemoryView
    except ImportError:
        from cuda.core.experimental.utils import StridedMemoryView
    try:
        make = getattr(StridedMemoryView, "from_any_interface", None)
        return make(obj, stream_ptr=stream) if make is not None else StridedMemoryView(obj, stream_ptr=stream)
    except Exception as e:  # whatever the producer raises: not an array this device can take
        raise ValidationError(f"import_buffer: {type(obj).__name__} exposes no CUDA memory through DLPack or "
                              f"the CUDA Array Interface ({e})") from e
