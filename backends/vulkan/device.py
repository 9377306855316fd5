"""The Vulkan driver and device: one compute queue, timeline semaphores, staging for host access.

Every submission signals the device's own timeline semaphore with the next value and waits for the
previous one, so submissions run in submission order (hal's rule) and the host always knows what the
GPU has finished. Objects released or collected while the GPU may still use them are retired with the
last submitted value (hal.lifetime) and destroyed once the timeline passes it. queue_execute
never waits for the GPU: a submission that waits for a value nobody has signalled yet sits in the
queue (Vulkan timeline semaphores allow waiting before the signal is submitted).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from backends.vulkan import capabilities as caps_module
from backends.vulkan.api import TIMEOUT, api_version, check, device_function, ffi, lib, vk
from backends.vulkan.buffer import HostVisibleBuffer, VulkanBuffer, create_buffer, destroy_buffer
from backends.vulkan.call_stream import CallStream
from backends.vulkan.calls import DeviceCommands
from backends.vulkan.command_buffer import VulkanEmitter
from backends.vulkan.executable import VulkanExecutable
from backends.vulkan.instance import PhysicalDevice, instance
from backends.vulkan.memory import HOST_CACHED, HOST_VISIBLE, MemoryPool
from backends.vulkan.recording import CommandPools, Recording
from backends.vulkan.regions import QueueDriver, run_steps
from backends.vulkan.semaphore import VulkanSemaphore, create_timeline, destroy_timeline
from backends.vulkan.submitter import Submitter
from backends.vulkan.timestamps import TimestampClock
from hal.buffer import Buffer, BufferUsage
from hal.command_buffer import CommandBuffer
from hal.deadline import Deadline
from hal.device import Device
from hal.drivers import DeviceInfo, Driver
from hal.errors import DeviceError, DeviceLostError, HalError, UnsupportedError, ValidationError
from hal.executable import ExecutableSource
from hal.host_call import HostCall
from hal.indirect import FAULT_BYTES, raise_fault
from hal.lifetime import Lifetime
from hal.resubmission import queue_execute
from hal.semaphore import Semaphore, queue_deadlock, waits_for_the_host

STAGING_BYTES = 32 << 20  # the most one staging copy moves; larger reads and writes go in pieces
WAIT_SLICE_NS = 100_000_000  # waits for the GPU are cut in slices to notice a queue that can never run
MAX_TIMELINE_VALUE = (1 << 64) - 1
MAX_PUSHED_BINDINGS = 64  # push descriptors allow fewer anyway (maxPushDescriptors)
# The calls outside recording and submission (which the compiled command_buffer module makes) that run
# often enough to skip the loader's trampoline: the semaphores' and the staging copies'.
HOT_FUNCTIONS = ("vkCmdCopyBuffer", "vkCmdPipelineBarrier", "vkGetSemaphoreCounterValue", "vkWaitSemaphores",
                 "vkSignalSemaphore")


class VulkanDriver(Driver):
    name = "vulkan"

    def devices(self) -> list[DeviceInfo]:
        inst = instance()
        if not inst.devices:
            why = "; ".join(inst.rejected) or "the Vulkan loader found no device"
            raise UnsupportedError(f"no usable Vulkan device ({why})")
        return [DeviceInfo("vulkan", i, d.name, d.kind) for i, d in enumerate(inst.devices)]

    def create_device(self, index: int | None, capabilities: Mapping[str, Any] | None) -> VulkanDevice:
        devices = instance().devices
        if not devices:
            self.devices()
        return VulkanDevice(devices[index or 0], capabilities, index or 0)


class Functions:
    """The driver's own entry points of the calls on the hot paths (no loader trampoline)."""

    __slots__ = HOT_FUNCTIONS

    def __init__(self, device: Any) -> None:
        for name in HOT_FUNCTIONS:
            setattr(self, name, device_function(device, name))


class VulkanDevice(Device):
    def __init__(self, physical: PhysicalDevice, overrides: Mapping[str, Any] | None, index: int = 0) -> None:
        self.physical = physical
        self.features = caps_module.query(physical)
        caps = self.features.capabilities.with_overrides(overrides)
        caps.check_within(self.features.capabilities, physical.name)
        if caps.supports_push_descriptor:  # a dispatch pushes all its bindings at once
            limit = min(caps.max_per_stage_descriptor_storage_buffer, self.features.max_push_descriptors,
                        MAX_PUSHED_BINDINGS)
            caps = dataclasses.replace(caps, max_per_stage_descriptor_storage_buffer=limit)
        super().__init__("vulkan", physical.name, caps, index)
        self.push_descriptors = caps.supports_push_descriptor
        # A storage buffer may also be a region's flag, which conditional rendering reads where the device has it.
        self.storage_usage = vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | (
            vk.VK_BUFFER_USAGE_CONDITIONAL_RENDERING_BIT_EXT if self.features.conditional_rendering else 0)
        # What glslc and spirv-val check against (SPIR-V 1.6 from Vulkan 1.3 on, else 1.5).
        self.target_env = "vulkan1.3" if physical.api_version >= api_version(1, 3) else "vulkan1.2"
        self._lock = threading.Lock()  # object counts, the pending list
        self._queue_lock = threading.Lock()  # keeps the pending list in submission order
        self._host_access = threading.Lock()  # the staging buffer and its transfer command buffer
        self._recordings_lock = threading.Lock()  # the device's own small VkCommandBuffers, made on first use
        self._objects: collections.Counter[str] = collections.Counter()
        # While the QueueDriver has jobs (regions), the submissions they will make are unknown: a release is then
        # marked with the driver itself, finished once it fell idle and the GPU reached its last submission.
        self._driver = QueueDriver(self)
        self._route_lock = threading.Lock()  # a submission goes to the queue or to the QueueDriver, in order
        self._empty: Recording | None = None
        self._reached = 0  # the latest timeline value _completed() read
        self.lifetime = Lifetime(mark=lambda: self._driver if self._driver.busy() else self._submitter.submitted,
                                 finished=self._finished, on_release=self._replace_token,
                                 settle=lambda: self.call_stream.drain())  # its calls may use what is destroyed
        # A command buffer holding this token resubmits as one vkQueueSubmit (queue_execute): replaced whenever
        # that stops being safe for all of them (something to free, the device lost or closing), and given
        # again to one by a submission that finds it safe.
        self.resubmit_token = object()
        self._pending: collections.deque[tuple[int, tuple, tuple]] = collections.deque()  # (value, waits, signals)
        self._lost: BaseException | None = None
        self.handle = self._create_logical_device()
        try:
            self._setup()
        except BaseException:
            lib.vkDestroyDevice(self.handle, ffi.NULL)
            raise

    def _create_logical_device(self) -> Any:
        physical = self.physical
        priority = ffi.new("float[1]", [1.0])
        queue = ffi.new("VkDeviceQueueCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                                     "queueFamilyIndex": physical.queue_family, "queueCount": 1,
                                                     "pQueuePriorities": priority})
        extensions = [caps_module.PUSH_DESCRIPTOR] if self.push_descriptors else []
        if self.features.conditional_rendering:
            extensions.append(caps_module.CONDITIONAL_RENDERING)
        names = [ffi.new("char[]", e.encode()) for e in extensions]
        name_array = ffi.new("char*[]", names)
        chain = caps_module.FeatureChain.query(physical).enabled()
        if not chain.v12.timelineSemaphore:
            raise UnsupportedError(f"{physical.name} has no timeline semaphores, which hal needs")
        info = ffi.new("VkDeviceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, "pNext": chain.root, "queueCreateInfoCount": 1,
            "pQueueCreateInfos": queue, "enabledExtensionCount": len(extensions),
            "ppEnabledExtensionNames": name_array})
        out = ffi.new("VkDevice*")
        check(lib.vkCreateDevice(physical.handle, info, ffi.NULL, out), f"vkCreateDevice on {physical.name}")
        return out[0]

    def _setup(self) -> None:
        handle = self.handle
        queue = ffi.new("VkQueue*")
        lib.vkGetDeviceQueue(handle, self.physical.queue_family, 0, queue)
        self.queue = queue[0]
        self.fn = Functions(handle)
        self.commands = DeviceCommands(self.address(handle), self.push_descriptors, self.features.conditional_rendering)
        self.call_stream = CallStream(self.commands)
        self.command_pools = CommandPools(self, self.address(self.handle), self.physical.queue_family,
                                          self.call_stream)
        self.memory = MemoryPool(handle, self.physical.handle, self.features.max_memory_allocation_count,
                                 self.features.max_memory_allocation_size)
        self._timeline = create_timeline(self, 0)
        self._submitter = Submitter(self.commands, self.address(self.queue), self.address(self._timeline))
        self._timeline_array = ffi.new("VkSemaphore[1]", [self._timeline])
        self.host_barrier = ffi.new("VkMemoryBarrier*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER, "srcAccessMask": vk.VK_ACCESS_TRANSFER_WRITE_BIT,
            "dstAccessMask": vk.VK_ACCESS_HOST_READ_BIT})
        cache_info = ffi.new("VkPipelineCacheCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO})
        cache = ffi.new("VkPipelineCache*")
        check(lib.vkCreatePipelineCache(handle, cache_info, ffi.NULL, cache), "vkCreatePipelineCache")
        self.pipeline_cache = cache[0]
        self._staging: tuple[Any, Any, np.ndarray] | None = None  # (VkBuffer, allocation, mapped bytes)
        self._transfer: Recording | None = None
        self._faults: HostVisibleBuffer | None = None
        self._host_read: Recording | None = None
        self._gates: tuple[VulkanSemaphore, VulkanSemaphore] | None = None  # host calls' reached, opened timelines
        self._host_calls_queued = 0

    @staticmethod
    def address(cdata: Any) -> int:
        """A handle or pointer as an integer (what the compiled command_buffer module takes)."""
        return int(ffi.cast("uintptr_t", cdata))

    # Accounting.
    def count_objects(self, kind: str, delta: int) -> None:
        """Note `delta` more Vulkan objects of `kind` held (live_objects reports them)."""
        with self._lock:
            self._objects[kind] += delta

    def live_objects(self) -> dict[str, int]:
        """Vulkan objects this device holds now, by type (the leak tests compare these)."""
        with self._lock:
            held = self._objects + collections.Counter(VkCommandPool=self.command_pools.in_use)
        return {k: v for k, v in held.items() if v}

    def memory_stats(self) -> dict[str, int]:
        """Device memory: allocations, bytes allocated from the driver, bytes in use by buffers."""
        return self.memory.stats()

    # Memory, executables, command buffers, semaphores.
    def _allocate(self, nbytes: int, usage: BufferUsage) -> VulkanBuffer:
        self.check_lost()
        self.lifetime.collect()
        return VulkanBuffer(self, nbytes, usage)

    def _load_executable(self, source: ExecutableSource) -> VulkanExecutable:
        self.check_lost()
        return VulkanExecutable(self, source)

    def _create_emitter(self, command_buffer: CommandBuffer) -> VulkanEmitter:
        return VulkanEmitter(self, self.commands, self._submitter, command_buffer.mode, command_buffer.strategy,
                             command_buffer.binding_capacity, command_buffer.constant_capacity)

    def _create_semaphore(self, initial: int) -> VulkanSemaphore:
        self.check_lost()
        return VulkanSemaphore(self, initial)

    # The queue.
    # The resubmission is the hot path: queue_execute is compiled (hal.resubmission, VulkanEmitter.resubmitted), and
    # takes the general path below for everything but an unchanged command buffer holding the device's resubmit token.
    queue_execute = queue_execute

    def _finished(self, mark: Any) -> bool:
        if mark is self._driver:
            return mark.finished_with(self._completed())
        return mark <= self._reached or mark <= self._completed()

    @property
    def submitted(self) -> int:
        """The timeline value of the latest submission."""
        return self._submitter.submitted

    def empty_recording(self) -> Recording:
        """An empty VkCommandBuffer, for a submission that only waits and signals."""
        with self._recordings_lock:
            if self._empty is None:
                self._empty = self._reusable_recording(lambda handle: None)
            return self._empty

    def _host_read_recording(self) -> Recording:
        """A VkCommandBuffer of one barrier that makes all earlier writes visible to the host (a host call's)."""
        with self._recordings_lock:  # not _host_access, which a staging copy holds while it waits for the queue
            if self._host_read is None:
                barrier = ffi.new("VkMemoryBarrier*", {"sType": vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                                                       "srcAccessMask": vk.VK_ACCESS_MEMORY_WRITE_BIT,
                                                       "dstAccessMask": vk.VK_ACCESS_HOST_READ_BIT})
                self._host_read = self._reusable_recording(lambda handle: self.fn.vkCmdPipelineBarrier(
                    handle, vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT, 0, 1, barrier, 0,
                    ffi.NULL, 0, ffi.NULL))
            return self._host_read

    def _reusable_recording(self, record: Callable[[Any], None]) -> Recording:
        recording = Recording(self)
        recording.begin(vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT)
        record(ffi.cast("VkCommandBuffer", recording.handle))
        recording.end()
        return recording

    def queue_recording(self, record: Callable[[Any], None]) -> Recording:
        """Record a small VkCommandBuffer with `record(handle)` and queue it after the work queued so far; the
        caller keeps the Recording until the queue passed it (backends.vulkan.timestamps)."""
        recording = self._reusable_recording(record)
        self._submit_in_order(lambda: self.submit_recording(recording.handle), (), ())
        return recording

    def _queue_clock(self) -> TimestampClock:
        return TimestampClock(self)

    def _queue_execute(self, command_buffer: CommandBuffer, table: tuple[Buffer, ...],
                       waits: tuple[tuple[VulkanSemaphore, int], ...],
                       signals: tuple[tuple[VulkanSemaphore, int], ...], constants: tuple) -> None:
        token = self.resubmit_token  # before the checks: a loss, a release or a close while this runs replaces it
        self.check_lost()
        if (waits or signals) and self.features.max_timeline_difference < MAX_TIMELINE_VALUE:
            for sem, value in waits + signals:
                self.check_timeline_step(sem, value)
        emitter = command_buffer.emitter
        emitter.token = None  # until this submission is queued: its table may differ from the last one's
        work = emitter.command_buffer(table, constants)
        with self._route_lock:
            if emitter.driven or self._driver.busy():  # regions: the QueueDriver submits, in order
                self._replace_token()
                if emitter.driven:
                    self._driver.put(lambda: run_steps(self, work, waits, signals), waits, signals)
                else:
                    self._driver.put(lambda: self.submit_recording(work, waits, signals), waits, signals)
                return
            self.submit_recording(work, waits, signals)
        if self.lifetime.pending:
            with contextlib.suppress(HalError):  # the work is queued: a failure here surfaces at synchronize()
                self.lifetime.collect()
        if not (waits or signals or self.lifetime.pending or self._closed) and emitter.resubmits_in_one_submit:
            emitter.token = token  # the same again is one vkQueueSubmit

    def _queue_host_call(self, fn: Callable[[], object], waits: tuple[tuple[VulkanSemaphore, int], ...],
                         signals: tuple[tuple[VulkanSemaphore, int], ...]) -> None:
        """hal.host_call's gate, for host call n: a submission with the waits signals the `reached` timeline at n
        (after a barrier that shows the host every earlier write), the next waits for the `opened` timeline at n,
        which only the host signals, after fn, and signals. Two timelines, so that the queue and the host never
        signal the same one (close() may signal a stuck gate open while the queue has yet to reach it)."""
        self.check_lost()
        if self._gates is None:  # (under the submit lock, like every host call)
            self._gates = (VulkanSemaphore(self, 0), VulkanSemaphore(self, 0))
            for gate in self._gates:
                gate.internal = True
        reached, opened = self._gates
        self._host_calls_queued += 1
        n = self._host_calls_queued

        def submit() -> None:
            self.submit_recording(self._host_read_recording().handle, waits, ((reached, n),))
            self.submit_recording(self.empty_recording().handle, ((opened, n),), signals, work_waits=waits)

        self._submit_in_order(submit, waits, signals)
        self.host_calls.put(HostCall(fn, waits, signals, reached=lambda: reached.wait(n),
                                     release=lambda: opened.host_signal(n)))

    def _queue_signals(self, signals: tuple[tuple[VulkanSemaphore, int], ...]) -> None:
        self.check_lost()
        self._submit_in_order(lambda: self.submit_recording(self.empty_recording().handle, (), signals), (), signals)

    def _submit_in_order(self, submit: Callable[[], None], waits: tuple, signals: tuple) -> None:
        """Make the submissions of `submit` now, or on the QueueDriver while it has jobs (queue order)."""
        with self._route_lock:
            self._replace_token()
            if self._driver.busy():
                self._driver.put(submit, waits, signals)
            else:
                submit()

    def _queued_work(self) -> list[tuple[tuple, tuple]]:
        self._completed()  # drops what finished
        return [(waits, signals) for _, waits, signals in list(self._pending) + self._driver.entries()]

    def _readback_buffer(self, nbytes: int) -> tuple[HostVisibleBuffer, np.ndarray]:
        buffer = HostVisibleBuffer(self, nbytes)
        return buffer, buffer.words.view(np.uint8)[:nbytes]

    def _replace_token(self) -> None:
        """Resubmissions must take the general path from now on (something to free, lost, closing)."""
        self.resubmit_token = object()

    def raise_failure(self, error: HalError) -> None:
        """Raise `error`, remembering it first when it lost the device (later calls raise it too)."""
        if isinstance(error, DeviceLostError):
            self._lost = error
            self._replace_token()
        raise error

    def check_timeline_step(self, sem: VulkanSemaphore, value: int) -> None:
        """Vulkan bounds how far a wait or signal may be from a timeline's current value."""
        current, limit = sem.query(), self.features.max_timeline_difference
        if abs(value - current) > limit:
            raise ValidationError(f"semaphore value {value} is more than the device's "
                                  f"maxTimelineSemaphoreValueDifference {limit} away from the current value {current}")

    def submit_recording(self, vkcb: int, waits: tuple = (), signals: tuple = (), work_waits: tuple = ()) -> int:
        """Queue the VkCommandBuffer `vkcb` after everything submitted before; returns its timeline value.
        `work_waits`: what the work this submission ends waited for in an earlier submission (a host call's waits,
        before its gate), so that a failure of those waits reaches `signals` while this is queued."""
        with self._queue_lock:  # the pending list stays in submission order
            try:
                value = self._submitter.submit(vkcb, _addressed(waits), _addressed(signals))
            except DeviceLostError as e:
                self.raise_failure(e)
            if waits or signals:
                self._pending.append((value, work_waits + waits, signals))
        return value

    def _value(self, semaphore: Any) -> int:
        out = ffi.new("uint64_t*")
        check(self.fn.vkGetSemaphoreCounterValue(self.handle, semaphore, out), "vkGetSemaphoreCounterValue")
        return int(out[0])

    def _completed(self) -> int:
        """The timeline value the GPU has reached (submissions up to it are done); kept in `_reached`, which a
        mark already behind needs no driver call to pass."""
        done = self._value(self._timeline)
        with self._lock:
            self._reached = max(self._reached, done)
            pending = self._pending
            while pending and pending[0][0] <= done:
                pending.popleft()
        return done

    def pending_signal(self, sem: Semaphore) -> int | None:
        """The smallest value a submitted, unfinished queue_execute will still signal on `sem`."""
        done = self._completed()
        values = [v for value, _, signals in list(self._pending) if value > done for s, v in signals if s is sem]
        values += [v for _, _, signals in self._driver.entries() for s, v in signals if s is sem]
        return min(values) if values else None

    def wait_for_submission(self, value: int, deadline: Deadline | None = None) -> None:
        """Block until the timeline reaches `value` (or `deadline` passes); refuse to wait forever for a host signal
        only this thread could give."""
        values = ffi.new("uint64_t[1]", [value])
        info = ffi.new("VkSemaphoreWaitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, "semaphoreCount": 1,
                                                "pSemaphores": self._timeline_array, "pValues": values})
        with self.waiting():
            while True:
                self.check_lost()
                slice_ns = WAIT_SLICE_NS if deadline is None else min(WAIT_SLICE_NS, int(deadline.remaining() * 1e9))
                try:
                    result = check(self.fn.vkWaitSemaphores(self.handle, info, slice_ns), "vkWaitSemaphores")
                except DeviceLostError as e:
                    self.raise_failure(e)
                if result != TIMEOUT:
                    break
                self._refuse_certain_deadlock()
                if deadline is not None and deadline.passed():
                    raise deadline.error(self, f"submissions {self._completed() + 1} to {value} of its queue")
        self.lifetime.collect()

    def _refuse_certain_deadlock(self) -> None:
        done = self._completed()
        head = next((p for p in list(self._pending) if p[0] == done + 1), None)
        if head is None:
            return
        # A host call's gate opens once the call's own waits are met; its thread waits for the queue itself.
        unmet = [(s, v) for s, v in head[1] if not s.internal and self._value(s.handle) < v]
        me = threading.current_thread()
        if not unmet or any(t is not me and t is not self.host_calls.thread for t in threading.enumerate()):
            return  # another thread may signal
        sem, value = unmet[0]
        raise queue_deadlock(value, self._value(sem.handle))

    def _synchronize(self, deadline: Deadline | None = None) -> None:
        def check() -> None:
            self._refuse_driver_deadlock()
            if deadline is not None and deadline.passed():
                raise deadline.error(self, "a command buffer with regions, submitted step by step,")
        self._driver.wait_idle(check)
        self.wait_for_submission(self._submitter.submitted, deadline)
        error = self._driver.take_error()
        if error is not None:
            raise error if isinstance(error, HalError) else DeviceError(f"a region's submission failed: {error!r}")
        if self._faults is not None:
            raise_fault(self._faults.words, self.capabilities.max_workgroup_count)

    def indirect_faults(self) -> HostVisibleBuffer:
        """The fault record of the dispatch_indirect guards (hal.indirect), made on first use."""
        with self._host_access:
            if self._faults is None:
                self._faults = HostVisibleBuffer(self, FAULT_BYTES)
            return self._faults

    def _refuse_driver_deadlock(self) -> None:
        """While waiting for the QueueDriver: if one of its jobs waits for a value only the host can signal and
        no thread but this one and the driver's exists to do it, waiting would never end; say so instead."""
        me, driver, calls = threading.current_thread(), self._driver.thread, self.host_calls.thread
        if any(t is not me and t is not driver and t is not calls for t in threading.enumerate()):
            return
        for sem, value in waits_for_the_host(list(self._pending) + self._driver.entries(),
                                             lambda s: self._value(s.handle)):
            if not sem.internal:  # (see _refuse_certain_deadlock)
                raise queue_deadlock(value, self._value(sem.handle))

    def check_lost(self) -> None:
        if self._lost is not None:
            raise DeviceLostError(f"the Vulkan device {self.name!r} is lost ({self._lost}); close it, then create a "
                                  f"new device")

    def inject_device_lost(self) -> None:
        """A test hook: from now on the calls that report on the device (vkQueueSubmit; the timelines' waits, reads
        and signals) return VK_ERROR_DEVICE_LOST, as a driver's do once its device is lost, so that the paths a real
        loss takes (DeviceLostError, close, a new device) run on any driver (tests/vulkan/test_device_lost.py)."""
        self.commands.lose()
        for name in ("vkGetSemaphoreCounterValue", "vkWaitSemaphores", "vkSignalSemaphore"):
            setattr(self.fn, name, _lost_call)

    # Host access through staging.
    def staging_copy(self, buffer: VulkanBuffer, offset: int, host: np.ndarray, to_device: bool) -> None:
        """Copy between `host` (bytes) and `buffer` at `offset`, through the staging buffer, piece by piece;
        each piece is submitted in order after all earlier work and waited for."""
        self._driver.wait_idle(self._refuse_driver_deadlock)
        with self._host_access:
            staging = self._staging_buffer(len(host))
            if self._transfer is None or self._transfer.pool.recording:  # (a copy that failed midway left it so)
                if self._transfer is not None:
                    self._transfer.release()
                self._transfer = Recording(self)
            vkcb = ffi.cast("VkCommandBuffer", self._transfer.handle)
            step = len(staging[2])
            for start in range(0, len(host), step):
                piece = host[start:start + step]
                n = len(piece)
                self._transfer.begin(vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT)
                region = ffi.new("VkBufferCopy*", {"srcOffset": 0 if to_device else offset + start,
                                                   "dstOffset": offset + start if to_device else 0, "size": n})
                if to_device:
                    staging[2][:n] = piece
                    self.fn.vkCmdCopyBuffer(vkcb, staging[0], buffer.vk_buffer, 1, region)
                else:
                    self.fn.vkCmdCopyBuffer(vkcb, buffer.vk_buffer, staging[0], 1, region)
                    self.fn.vkCmdPipelineBarrier(vkcb, vk.VK_PIPELINE_STAGE_TRANSFER_BIT, vk.VK_PIPELINE_STAGE_HOST_BIT,
                                                 0, 1, self.host_barrier, 0, ffi.NULL, 0, ffi.NULL)
                self._transfer.end()
                self.wait_for_submission(self.submit_recording(self._transfer.handle))
                if not to_device:
                    piece[:] = staging[2][:n]

    def _staging_buffer(self, nbytes: int) -> tuple[Any, Any, np.ndarray]:
        """The host-visible staging buffer, created on first use (and grown, up to STAGING_BYTES)."""
        want = min(max(nbytes, 1 << 20), STAGING_BYTES)
        if self._staging is not None and len(self._staging[2]) >= want:
            return self._staging
        if self._staging is not None:
            self.wait_for_submission(self._submitter.submitted)
            self._unmap_staging()
        bits = vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT
        handle, allocation = create_buffer(self, want, bits, HOST_VISIBLE, HOST_CACHED, own=True)
        ptr = ffi.new("void**")
        check(lib.vkMapMemory(self.handle, allocation.memory, allocation.offset, want, 0, ptr), "vkMapMemory")
        self._staging = (handle, allocation, np.frombuffer(ffi.buffer(ptr[0], want), np.uint8))
        return self._staging

    def _unmap_staging(self) -> None:
        handle, allocation, _ = self._staging
        self._staging = None
        lib.vkUnmapMemory(self.handle, allocation.memory)
        destroy_buffer(self, handle, allocation)

    def _close(self) -> None:
        self.host_calls.drain()  # a function still running ends first; those not reached fail, their gates shut
        self._release_stuck_submissions()  # the QueueDriver's jobs too: then it drains
        self._driver.wait_idle()
        with self._submit_lock:  # a general submission under way ends first
            self._replace_token()  # no resubmission starts after
        self._release_stuck_submissions()
        while self._waiters:  # waits end within a slice once they see the device closed
            time.sleep(0.01)
        lib.vkDeviceWaitIdle(self.handle)
        if self._staging is not None:
            self._unmap_staging()
        self._faults = None  # unmapped by lifetime.close()
        self.call_stream.close()  # its worker made every call: what follows destroys what they use
        self.lifetime.close()
        self.command_pools.close()
        self.memory.close()
        lib.vkDestroyPipelineCache(self.handle, self.pipeline_cache, ffi.NULL)
        destroy_timeline(self, self._timeline)
        lib.vkDestroyDevice(self.handle, ffi.NULL)

    def _release_stuck_submissions(self) -> None:
        """Submissions still waiting for a value nobody signalled would keep the queue busy forever:
        signal from the host, in submission order, the waits that no earlier submission's signal will
        reach, so the queue drains (their results are discarded)."""
        if self._lost is not None:
            return

        def current(sem: VulkanSemaphore) -> int:  # unreadable: left alone (closing never raises)
            try:
                return self._value(sem.handle)
            except Exception:
                return MAX_TIMELINE_VALUE

        for sem, value in waits_for_the_host(list(self._pending) + self._driver.entries(), current):
            with contextlib.suppress(Exception):
                sem.host_signal(value)


def _lost_call(*arguments: Any) -> int:
    """A device-level call of a lost device (inject_device_lost)."""
    return lib.VK_ERROR_DEVICE_LOST


def _addressed(pairs: tuple[tuple[VulkanSemaphore, int], ...]) -> tuple[tuple[int, int], ...]:
    """(semaphore handle's address, value) per pair, as the Submitter takes them."""
    return tuple([(sem.address, value) for sem, value in pairs]) if pairs else ()
