"""Vulkan submission styles and recording cost, side by side in one process on one Vulkan device.

A chain of D dispatches of `add` (each reads what the one before wrote, so a barrier sits between any
two) over n elements, n = 1K (overheads dominate) and 1M (the kernels do), run five ways:

- naive per dispatch: one VkCommandBuffer per dispatch, recorded with the `vulkan` package's wrappers,
  submitted and waited for (TVM's old runtime; the seed measured 155 µs a dispatch on an H200);
- naive batched: one VkCommandBuffer for the chain, recorded with the `vulkan` package's wrappers
  (new structs on every call), submitted once;
- hal one-shot: record, end (encode) and submit a one_shot command buffer, deferred and single_pass;
- hal reused: a reusable command buffer recorded once, resubmitted.

Reported per dispatch: host µs to record (+ encode), and wall µs from the start of recording (or of the
submission, for reuse) to completion. Then the host µs of one resubmission of an unchanged reusable
command buffer of 10 to 1000 dispatches, taken while the queue waits on a semaphore so the device's
work never competes with the submitting thread: flat means O(1) in the length. Last, hal's recording
cost alone: record and end() per dispatch for 1000 dispatches, as a chain (a barrier after each) and
as a fan (one segment), against the target of 5 µs for record + end; and against the compiled reference
(bench/native/vulkan_reference.pyx: the same vkCmd* calls through the driver's entry points, nothing of
hal's in between): hal's record+end <= 1.5x the reference's recording, hal's resubmission <= 1.1x the
reference's vkQueueSubmit of the same VkCommandBuffer (with the timeline wait and signal that order it).
Each is the best of several turns; beside the record+end ratio, the median of 21 turns that each time hal's
record+end and the reference's recording back to back, and how many of them meet the target: on a host whose
speed drifts between spells, the best of each may pair a fast spell's hal with another's reference. The same for
single_pass, whose vkCmd* calls the device's worker thread makes while recording goes on, with the CPU time of both
threads beside its wall time.
Beside them, the plain-Python recorder that checks nothing (bench.record) takes the same calls: what any
recording API in Python costs before its first vkCmd* call. A second table splits what hal costs above the
reference's calls: the program's loop and a call per command alone (a recorder whose calls do nothing), hal's
recording beyond them, end() beyond the driver's part, and what Python's cyclic garbage collector adds.
And what new values for constant slots cost (issue 18): Vulkan records push constants into the
VkCommandBuffer, so new values mean encoding it again, reported per dispatch.

    python -m bench.vulkan [--device vulkan] [--dispatches 100] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import time
from array import array
from collections.abc import Callable

import numpy as np

import hal
from bench import emit, scaling
from bench.native import reference
from bench.record import CallRecorder, FloorRecorder, reference_us
from tests.kernels import GLSL, WORKGROUP

# Without the `vulkan` package or the Vulkan loader this module still imports; run() then stops at
# hal.create_device("vulkan"), whose error says what to install.
with contextlib.suppress(ImportError, OSError):
    import vulkan as vk

SIZES = (1 << 10, 1 << 20)
RECORD_DISPATCHES = 1000
TARGET_US = 5.0  # issue 3: host µs per dispatch for record + end on lavapipe
RESUBMIT_LENGTHS = (10, 100, 1000)
REFERENCE_RECORD_TARGET, REFERENCE_SUBMIT_TARGET = 1.5, 1.1
PAIRED_TURNS = 21  # against the reference: turns of hal's record+end and the reference's, paired
WORKER_SLEEPS = 0.002  # s: the call stream's worker looks for more calls 50 µs, then sleeps
EXPORT = hal.Export("add", bindings=3, constants=1, workgroup_size=WORKGROUP, readonly=(0, 1))
SOURCE = hal.ExecutableSource.glsl({"add": GLSL["add"]}, [EXPORT])


class Chain:
    """Four buffers of n uint32: dispatch i writes buffer (i + 2) % 4 from the two before it."""

    def __init__(self, dev: hal.Device, n: int) -> None:
        self.dev, self.n = dev, n
        self.exe = dev.load_executable(SOURCE)
        self.bufs = [dev.upload(np.full(n, i, np.uint32)) for i in range(4)]
        self.groups = (-(-n // WORKGROUP), 1, 1)

    def operands(self, i: int) -> tuple[hal.Buffer, hal.Buffer, hal.Buffer]:
        b = self.bufs
        return b[i % 4], b[(i + 1) % 4], b[(i + 2) % 4]

    def record(self, cb: hal.CommandBuffer, dispatches: int, n: int | hal.ConstantSlot | None = None) -> None:
        """`dispatches` dispatches over `n` elements (self.n by default; a constant slot is given at submit)."""
        for i in range(dispatches):
            cb.dispatch(self.exe, "add", self.groups, (self.n if n is None else n,), self.operands(i))
            cb.execution_barrier()

    def release(self) -> None:
        for b in self.bufs:
            b.release()


class Naive:
    """What a user of the `vulkan` package writes by hand: its wrappers, new structs for every call."""

    def __init__(self, chain: Chain) -> None:
        dev = self.dev = chain.dev
        self.chain = chain
        self.device = dev.handle
        self.pool = vk.vkCreateCommandPool(self.device, vk.VkCommandPoolCreateInfo(
            queueFamilyIndex=dev.physical.queue_family), None)
        self.fence = vk.vkCreateFence(self.device, vk.VkFenceCreateInfo(), None)
        self.push = vk.vkGetDeviceProcAddr(self.device, "vkCmdPushDescriptorSetKHR")
        self.pipeline = vk.ffi.cast("VkPipeline", chain.exe.pipeline_handles[0])
        self.layout = vk.ffi.cast("VkPipelineLayout", chain.exe.layout_handles[0])

    def allocate(self) -> object:
        return vk.vkAllocateCommandBuffers(self.device, vk.VkCommandBufferAllocateInfo(
            commandPool=self.pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]

    def dispatch(self, cb: object, i: int) -> None:
        chain = self.chain
        vk.vkCmdBindPipeline(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.pipeline)
        infos = [vk.VkDescriptorBufferInfo(buffer=b.vk_buffer, offset=0, range=b.size) for b in chain.operands(i)]
        write = vk.VkWriteDescriptorSet(dstBinding=0, descriptorCount=3,
                                        descriptorType=vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, pBufferInfo=infos)
        self.push(cb, vk.VK_PIPELINE_BIND_POINT_COMPUTE, self.layout, 0, 1, [write])
        vk.vkCmdPushConstants(cb, self.layout, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0, 4,
                              vk.ffi.new("uint32_t[1]", [chain.n]))
        vk.vkCmdDispatch(cb, *chain.groups)

    def barrier(self, cb: object) -> None:
        access = vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
        compute = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
        vk.vkCmdPipelineBarrier(cb, compute, compute, 0, 1, [vk.VkMemoryBarrier(
            srcAccessMask=access, dstAccessMask=access)], 0, None, 0, None)

    def submit_and_wait(self, cb: object) -> None:
        vk.vkQueueSubmit(self.dev.queue, 1, [vk.VkSubmitInfo(commandBufferCount=1, pCommandBuffers=[cb])],
                         self.fence)
        vk.vkWaitForFences(self.device, 1, [self.fence], vk.VK_TRUE, 0xFFFFFFFFFFFFFFFF)
        vk.vkResetFences(self.device, 1, [self.fence])

    def per_dispatch(self, dispatches: int) -> float:
        """One command buffer per dispatch, each submitted and waited for: wall seconds."""
        t0 = time.perf_counter()
        for i in range(dispatches):
            cb = self.allocate()
            vk.vkBeginCommandBuffer(cb, vk.VkCommandBufferBeginInfo(
                flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
            self.dispatch(cb, i)
            vk.vkEndCommandBuffer(cb)
            self.submit_and_wait(cb)
            vk.vkFreeCommandBuffers(self.device, self.pool, 1, [cb])
        return time.perf_counter() - t0

    def batched(self, dispatches: int) -> tuple[float, float]:
        """One command buffer for the chain: (recording seconds, wall seconds)."""
        t0 = time.perf_counter()
        cb = self.allocate()
        vk.vkBeginCommandBuffer(cb, vk.VkCommandBufferBeginInfo(flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
        for i in range(dispatches):
            self.dispatch(cb, i)
            self.barrier(cb)
        vk.vkEndCommandBuffer(cb)
        t1 = time.perf_counter()
        self.submit_and_wait(cb)
        t2 = time.perf_counter()
        vk.vkFreeCommandBuffers(self.device, self.pool, 1, [cb])
        return t1 - t0, t2 - t0

    def close(self) -> None:
        vk.vkDestroyFence(self.device, self.fence, None)
        vk.vkDestroyCommandPool(self.device, self.pool, None)


def hal_one_shot(chain: Chain, dispatches: int, strategy: str) -> tuple[float, float]:
    """(record + end seconds, wall seconds to completion)."""
    dev = chain.dev
    t0 = time.perf_counter()
    cb = dev.create_command_buffer(strategy=strategy)
    cb.begin()
    chain.record(cb, dispatches)
    cb.end()
    t1 = time.perf_counter()
    dev.queue_execute(cb)
    dev.synchronize()
    return t1 - t0, time.perf_counter() - t0


def hal_reused(chain: Chain, cb: hal.CommandBuffer) -> float:
    dev = chain.dev
    t0 = time.perf_counter()
    dev.queue_execute(cb)
    dev.synchronize()
    return time.perf_counter() - t0


class Gate:
    """A semaphore that holds the queue: submissions made while it is closed wait behind it, so the device's
    work never competes with the submitting thread (on a CPU device it would share its cores). One semaphore
    for every closing: a new one each time would leave the old one waiting for the queue to free it."""

    def __init__(self, dev: hal.Device) -> None:
        self.dev, self.semaphore, self.value = dev, dev.create_semaphore(0), 0

    def close(self, cb: hal.CommandBuffer) -> None:
        """Queue `cb` behind the gate: everything submitted after it waits too."""
        self.value += 1
        self.dev.queue_execute(cb, wait=[(self.semaphore, self.value)])

    def open(self) -> None:
        self.semaphore.signal(self.value)
        self.dev.synchronize()


def resubmit_host_us(dev: hal.Device, gate: Gate, cb: hal.CommandBuffer, submits: int = 50) -> float:
    """Host µs of one queue_execute of an unchanged reusable command buffer, while the queue waits on the gate:
    the mean of `submits`."""
    dev.queue_execute(cb)
    dev.synchronize()
    gate.close(cb)
    t0 = time.perf_counter()
    for _ in range(submits):
        dev.queue_execute(cb)
    seconds = time.perf_counter() - t0
    gate.open()
    return seconds / submits * 1e6


def constant_change_host_us(dev: hal.Device, gate: Gate, chain: Chain, length: int, submits: int = 20) -> dict:
    """Host µs of one queue_execute of a reusable chain whose every dispatch reads constant slot 0: with the value
    of the submission before (`same`), and with a value none of the last TABLE_CACHE submissions had (`new`:
    the VkCommandBuffer is encoded again, since push constants are recorded into it), given as an int, and as a
    Python float (`new_float`) and a numpy float32 (`new_float32`) of the same 32 bits (a subnormal float: the
    kernel reads the word as its element count), the three kinds in turns. Taken behind the gate like
    resubmit_host_us; the mean of `submits`."""
    cb = dev.create_command_buffer(mode="reusable", constant_capacity=1)
    with cb:
        chain.record(cb, length, hal.constant_slot(0))
    dev.queue_execute(cb, constants=(chain.n,))
    dev.synchronize()

    def word(i: int, kind: int) -> int:  # each kind's apart: the cache holds encodings by the words they push
        return chain.n - 1 - 64 * kind - i % 64

    def float32(i: int, kind: int) -> np.float32:
        return np.array([word(i, kind)], np.uint32).view(np.float32)[0]

    new = {"new": [word(i, 0) for i in range(submits)], "new_float": [float(float32(i, 1)) for i in range(submits)],
           "new_float32": [float32(i, 2) for i in range(submits)]}
    for i in range(16):  # new values once first, so that none of the kinds pays for the cache's first encodings
        dev.queue_execute(cb, constants=(word(i, 3),))
    dev.queue_execute(cb, constants=(chain.n,))
    dev.synchronize()
    # The gate's command buffer lives until the gate opens: one let go behind a closed gate would wait there to be
    # destroyed, and a device with something to destroy checks at every submission whether its time has come.
    gated = chain_of(dev, chain, 1)
    gate.close(gated)
    t0 = time.perf_counter()
    for _ in range(submits):
        dev.queue_execute(cb, constants=(chain.n,))
    result = dict(same=(time.perf_counter() - t0) / submits * 1e6)
    seconds = dict.fromkeys(new, 0.0)
    for i in range(submits):  # the kinds of new values in turns: the queue's backlog grows alike for each
        for label, given in new.items():
            t0 = time.perf_counter()
            dev.queue_execute(cb, constants=(given[i],))
            seconds[label] += time.perf_counter() - t0
    gate.open()  # (and `gated` goes once the queue is idle)
    return dict(dispatches=length, **result, **{label: s / submits * 1e6 for label, s in seconds.items()})


def chain_of(dev: hal.Device, chain: Chain, length: int) -> hal.CommandBuffer:
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        chain.record(cb, length)
    return cb


class Reference:
    """The compiled reference on one device: its own command pool and buffer to record into, and a timeline
    semaphore to order its submissions."""

    def __init__(self, native: object, dev: hal.Device) -> None:
        self.dev = dev
        self.native = native.Reference(dev.address(dev.handle))
        self.pool = vk.vkCreateCommandPool(dev.handle, vk.VkCommandPoolCreateInfo(
            flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, queueFamilyIndex=dev.physical.queue_family),
            None)
        self.cb = vk.vkAllocateCommandBuffers(dev.handle, vk.VkCommandBufferAllocateInfo(
            commandPool=self.pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1))[0]
        self.timeline = dev.create_semaphore(0)
        self.value = 0

    def record_us(self, cb: hal.CommandBuffer, repeats: int) -> float:
        """Best-of-`repeats` µs per dispatch to record the dispatches of cb's Program (one export, three
        bindings, one constant each) with the same calls hal's encoder makes, into the command buffer the last
        recording used (hal's encoder records into a kept pool's, which its vkBeginCommandBuffer resets too)."""
        program = cb.program
        first = program.commands[0]
        exe, ordinal = first.executable, first.ordinal
        infos = array("Q", [x for c in program.commands for r in c.bindings
                            for x in (r.buffer.handle, r.offset, r.nbytes)])
        barriers = bytearray(len(program.commands))
        for i in program.barriers:
            barriers[i] = 1
        handle = self.dev.address(self.cb)
        best = float("inf")
        for _ in range(repeats):  # vkBeginCommandBuffer resets what the last recording left, as it does for hal
            t0 = time.perf_counter()
            self.native.record(handle, exe.pipeline_handles[ordinal], exe.layout_handles[ordinal], infos, 3,
                               bytes(barriers), first.constants[0], first.workgroups)
            best = min(best, time.perf_counter() - t0)
        return best / len(program.commands) * 1e6

    def submit_us(self, cb: hal.CommandBuffer, submits: int = 50) -> float:
        """Host µs of one vkQueueSubmit of cb's VkCommandBuffer, each waiting for the reference's timeline at the
        value before its own and signalling its own: the mean of `submits` made while the first waits for a
        value only the host gives afterwards (as resubmit_host_us holds hal's queue)."""
        handle, queue = cb.emitter.command_buffer((), ()), self.dev.address(self.dev.queue)
        self.value += 1
        start = self.value
        t0 = time.perf_counter()
        for _ in range(submits):
            self.value += 1
            self.native.submit(queue, handle, self.timeline.address, self.value)
        seconds = time.perf_counter() - t0
        self.timeline.signal(start)
        self.timeline.wait(self.value)
        return seconds / submits * 1e6

    def close(self) -> None:
        vk.vkDestroyCommandPool(self.dev.handle, self.pool, None)


def against_reference(dev: hal.Device, gate: Gate) -> list[dict]:
    """Per program of RECORD_DISPATCHES dispatches: hal's deferred record+end and resubmission against the
    compiled reference's recording and vkQueueSubmit, in this run; empty without the reference (not built, or
    a device without push descriptors, which it uses)."""
    native = reference("vulkan_reference")
    if native is None or not dev.push_descriptors:
        return []
    ref = Reference(native, dev)
    fixture = scaling.Fixture(dev, RECORD_DISPATCHES)
    rows = []
    for program in ("chain", "fan"):
        record = scaling.PROGRAMS[program][0]
        cb = dev.create_command_buffer(mode="reusable")
        with cb:
            record(cb, fixture, RECORD_DISPATCHES)
        times = dict.fromkeys(("hal_record_end", "hal_record", "hal_end", "hal_record_end_paused", "reference_record",
                               "floor_record", "call_record", "single_pass_record_end", "single_pass_cpu"),
                              float("inf"))
        for _ in range(7):  # in turns, so that a drift of the host's speed lands on all of them alike
            record_us, end_us = record_end_us(dev, record, fixture)
            times["hal_record_end"] = min(times["hal_record_end"], record_us + end_us)
            times["hal_record"], times["hal_end"] = min(times["hal_record"], record_us), min(times["hal_end"], end_us)
            times["hal_record_end_paused"] = min(times["hal_record_end_paused"],
                                                 sum(record_end_us(dev, record, fixture, collector=False)))
            times["reference_record"] = min(times["reference_record"], ref.record_us(cb, 1))
            times["floor_record"] = min(times["floor_record"],
                                        reference_us(record, FloorRecorder, fixture, RECORD_DISPATCHES, 1))
            times["call_record"] = min(times["call_record"],
                                       reference_us(record, CallRecorder, fixture, RECORD_DISPATCHES, 1))
            wall_us, cpu_us = single_pass_us(dev, record, fixture)
            times["single_pass_record_end"] = min(times["single_pass_record_end"], wall_us)
            times["single_pass_cpu"] = min(times["single_pass_cpu"], cpu_us)
        submits = dict(hal_submit=float("inf"), reference_submit=float("inf"))
        for _ in range(5):  # in turns too
            submits["hal_submit"] = min(submits["hal_submit"], resubmit_host_us(dev, gate, cb))
            submits["reference_submit"] = min(submits["reference_submit"], ref.submit_us(cb))
        # Each turn's ratio, hal's record+end and the reference's recording back to back: the best of each above may
        # come from different spells of a host whose speed drifts; a pair shares its spell.
        paired = [sum(record_end_us(dev, record, fixture)) / ref.record_us(cb, 1) for _ in range(PAIRED_TURNS)]
        paired_single = [single_pass_us(dev, record, fixture)[0] / ref.record_us(cb, 1) for _ in range(PAIRED_TURNS)]
        rows.append(dict(program=program, **times, **submits, paired_median=statistics.median(paired),
                         paired_met=sum(ratio <= REFERENCE_RECORD_TARGET for ratio in paired),
                         single_pass_paired_median=statistics.median(paired_single),
                         single_pass_paired_met=sum(ratio <= REFERENCE_RECORD_TARGET for ratio in paired_single)))
    dev.synchronize()
    ref.close()
    fixture.release()
    return rows


def record_end_us(dev: hal.Device, record: Callable, fixture: scaling.Fixture,
                  collector: bool = True) -> tuple[float, float]:
    """µs per dispatch to record, and to end(), `record`'s RECORD_DISPATCHES dispatches (deferred, barriers), once.
    `collector=False`: with Python's cyclic garbage collector paused meanwhile (what its passes over the new
    records cost is the difference)."""
    cb = dev.create_command_buffer(mode="reusable")
    paused = not collector and gc.isenabled()
    if paused:
        gc.disable()
    try:
        t0 = time.perf_counter()
        cb.begin()
        record(cb, fixture, RECORD_DISPATCHES)
        t1 = time.perf_counter()
        cb.end()
        t2 = time.perf_counter()
    finally:
        if paused:
            gc.enable()
    return (t1 - t0) / RECORD_DISPATCHES * 1e6, (t2 - t1) / RECORD_DISPATCHES * 1e6


def single_pass_us(dev: hal.Device, record: Callable, fixture: scaling.Fixture) -> tuple[float, float]:
    """µs per dispatch from begin() to the end of end() of `record`'s RECORD_DISPATCHES dispatches into a single_pass
    command buffer (encoded as recorded, its vkCmd* calls made by the device's worker thread meanwhile), once: the
    wall time, and the CPU time the process spent meanwhile (both threads: what the host spends, the worker's wait
    for more calls included). The CPU time is read once the worker sleeps again: Linux adds up another thread's
    time when it stops running, so a count read while it runs misses up to a scheduler tick of it."""
    cb = dev.create_command_buffer(mode="reusable", strategy="single_pass")
    time.sleep(WORKER_SLEEPS)
    t0, c0 = time.perf_counter(), time.process_time()
    cb.begin()
    record(cb, fixture, RECORD_DISPATCHES)
    cb.end()
    t1 = time.perf_counter()
    time.sleep(WORKER_SLEEPS)
    c1 = time.process_time()
    return (t1 - t0) / RECORD_DISPATCHES * 1e6, (c1 - c0) / RECORD_DISPATCHES * 1e6


def best(repeats: int, f: Callable[..., float | tuple[float, ...]], *args: object) -> tuple[float, ...]:
    """The element-wise minimum of `repeats` calls of f(*args) (a number or a tuple of numbers)."""
    results = [f(*args) for _ in range(repeats)]
    results = [r if isinstance(r, tuple) else (r,) for r in results]
    return tuple(min(r[k] for r in results) for k in range(len(results[0])))


def measure(dev: hal.Device, n: int, dispatches: int, repeats: int) -> dict:
    """Every style on a chain of `dispatches` over n elements: µs per dispatch."""
    chain = Chain(dev, n)
    reused = dev.create_command_buffer(mode="reusable")
    with reused:
        chain.record(reused, dispatches)
    hal_reused(chain, reused)
    row: dict = dict(elements=n, dispatches=dispatches)
    per = 1e6 / dispatches
    if dev.push_descriptors:  # the naive code pushes its descriptors too
        naive = Naive(chain)
        naive.per_dispatch(2)
        row["naive_per_dispatch_wall"] = best(repeats, naive.per_dispatch, dispatches)[0] * per
        rec, wall = best(repeats, naive.batched, dispatches)
        row["naive_batched_record"], row["naive_batched_wall"] = rec * per, wall * per
        naive.close()
    for strategy in ("deferred", "single_pass"):
        rec, wall = best(repeats, hal_one_shot, chain, dispatches, strategy)
        row[f"hal_{strategy}_record"], row[f"hal_{strategy}_wall"] = rec * per, wall * per
    row["hal_reused_wall"] = best(repeats, hal_reused, chain, reused)[0] * per
    chain.release()
    return row


def run(device: str = "vulkan", dispatches: int = 100, progress: Callable[[str], None] = lambda _: None) -> dict:
    with hal.create_device(device) as dev:
        if dev.driver != "vulkan":
            raise SystemExit(f"bench.vulkan needs a Vulkan device, got {dev}")
        meta = dict(device=dev.name, driver_info=dev.physical.driver, kind=dev.physical.type_name,
                    push_descriptors=dev.push_descriptors,
                    dispatches=dispatches, date=time.strftime("%Y-%m-%d"))
        gpu = dev.physical.kind == "gpu"
        # On a CPU device the 1M-element kernels take seconds: fewer dispatches and repeats there.
        rows = []
        for n in SIZES:
            progress(f"vulkan submission styles, {n} elements")
            rows.append(measure(dev, n, dispatches if gpu or n < (1 << 20) else max(4, dispatches // 10),
                                5 if gpu or n < (1 << 20) else 2))
        progress("vulkan resubmission and recording")
        chain = Chain(dev, 1 << 10)
        gate = Gate(dev)
        resubmits = [dict(dispatches=length, host_us=min(resubmit_host_us(dev, gate, cb) for _ in range(3)))
                     for length, cb in ((length, chain_of(dev, chain, length)) for length in RESUBMIT_LENGTHS)]
        progress("vulkan constant slots")
        constants = [constant_change_host_us(dev, gate, chain, length) for length in RESUBMIT_LENGTHS]
        chain.release()
        recording = []
        fixture = scaling.Fixture(dev, RECORD_DISPATCHES)
        for program in ("chain", "fan"):
            for strategy in ("deferred", "single_pass"):
                times = scaling.measure(dev, program, fixture, RECORD_DISPATCHES, strategy, repeats=7)
                recording.append(dict(program=program, strategy=strategy, record=times["record"], end=times["end"]))
        fixture.release()
        progress("vulkan against the compiled reference")
        compared = against_reference(dev, gate)
    return dict(meta=meta, rows=rows, resubmit=resubmits, constants=constants, recording=recording,
                reference=compared)


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.1f}x" if a and b else "n/a"


def report(result: dict) -> str:
    meta = result["meta"]
    lines = [f"## Vulkan on {meta['device']} ({meta['kind']}, {meta['driver_info']}), {meta['date']}", "",
             f"push descriptors: {meta['push_descriptors']}. "
             f"µs per dispatch of a chain (a barrier between dispatches), best of several runs.", "",
             "| elements | dispatches | style | host record µs | wall µs |", "|---:|---:|---|---:|---:|"]
    styles = [("naive: one VkCommandBuffer per dispatch", None, "naive_per_dispatch_wall"),
              ("naive: one batched, `vulkan` wrappers", "naive_batched_record", "naive_batched_wall"),
              ("hal one-shot, deferred", "hal_deferred_record", "hal_deferred_wall"),
              ("hal one-shot, single_pass", "hal_single_pass_record", "hal_single_pass_wall"),
              ("hal reused (resubmitted)", None, "hal_reused_wall")]
    for r in result["rows"]:
        for label, rec, wall in styles:
            if wall in r:
                lines.append(f"| {r['elements']} | {r['dispatches']} | {label} | "
                             f"{'-' if rec is None else format(r[rec], '.2f')} | {r[wall]:.2f} |")
    lines += ["", "| dispatches in the reused command buffer | host µs per resubmission |", "|---:|---:|"]
    lines += [f"| {s['dispatches']} | {s['host_us']:.1f} |" for s in result["resubmit"]]
    lines += ["", "Ratios:"]
    for r in result["rows"]:
        n = r["elements"]
        lines.append(f"- {n} elements: one VkCommandBuffer per dispatch / hal reused = "
                     f"{_ratio(r.get('naive_per_dispatch_wall'), r['hal_reused_wall'])}; / hal one-shot deferred = "
                     f"{_ratio(r.get('naive_per_dispatch_wall'), r['hal_deferred_wall'])}")
        lines.append(f"- {n} elements: recording with the `vulkan` wrappers / hal record+end (deferred) = "
                     f"{_ratio(r.get('naive_batched_record'), r['hal_deferred_record'])}; hal one-shot / hal reused "
                     f"wall = {_ratio(r['hal_deferred_wall'], r['hal_reused_wall'])}")
    if result.get("constants"):
        lines += ["", "A chain whose every dispatch reads a constant slot: host µs per submission with the values of "
                  "the one before, and with new values (encoded again: push constants live in the VkCommandBuffer), "
                  "given as ints, Python floats and numpy float32s; the cost of new values per dispatch:", "",
                  "| dispatches | same values | new values | new, µs per dispatch | new floats, µs per dispatch | "
                  "new float32s, µs per dispatch |", "|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {c['dispatches']} | {c['same']:.1f} | {c['new']:.1f} | {c['new'] / c['dispatches']:.2f} | "
                  f"{c['new_float'] / c['dispatches']:.2f} | {c['new_float32'] / c['dispatches']:.2f} |"
                  for c in result["constants"]]
    first, last = result["resubmit"][0], result["resubmit"][-1]
    lines.append(f"- resubmission host time, {last['dispatches']} vs {first['dispatches']} dispatches: "
                 f"{_ratio(last['host_us'], first['host_us'])} (1.0x = independent of length)")
    lines += ["", f"hal's recording cost, {RECORD_DISPATCHES} dispatches (µs per dispatch, best of 7):", "",
              "| program | strategy | record | end | record + end | target |", "|---|---|---:|---:|---:|---|"]
    for r in result["recording"]:
        total = r["record"] + r["end"]
        verdict = "met" if total <= TARGET_US else "MISSED"
        lines.append(f"| {r['program']} | {r['strategy']} | {r['record']:.2f} | {r['end']:.2f} | {total:.2f} | "
                     f"<= {TARGET_US:g}: {verdict} |")
    if result.get("reference"):
        lines += ["", f"Against the compiled reference, {RECORD_DISPATCHES} dispatches: record+end µs per dispatch "
                  f"(hal deferred), the reference's recording of the same calls and the plain-Python recorder that "
                  f"checks nothing (the least a recording API in Python costs before any vkCmd* call), taken in "
                  f"turns (the best of 7 each); paired turns: the median ratio of {PAIRED_TURNS} turns each timing "
                  f"hal's record+end and the reference's recording back to back, and how many meet the target; "
                  f"bound: that recorder and then the reference's calls, the least a Python API issuing the same "
                  f"calls can cost, against the reference; host µs of one resubmission and of the reference's "
                  f"vkQueueSubmit of the same VkCommandBuffer:", "",
                  "| program | hal record+end | reference record | ratio | paired turns: median ratio, turns met | "
                  "no-check Python recorder | its ratio | bound | hal resubmit | reference submit | ratio |",
                  "|---|---:|---:|---|---|---:|---:|---:|---:|---:|---|"]
        for r in result["reference"]:
            record_ratio = r["hal_record_end"] / r["reference_record"]
            submit_ratio = r["hal_submit"] / r["reference_submit"]
            lines.append(f"| {r['program']} | {r['hal_record_end']:.2f} | {r['reference_record']:.2f} | "
                         f"{_verdict(record_ratio, REFERENCE_RECORD_TARGET)} | "
                         f"{r['paired_median']:.2f}x, {r['paired_met']} of {PAIRED_TURNS} | {r['floor_record']:.2f} | "
                         f"{r['floor_record'] / r['reference_record']:.2f}x | "
                         f"{(r['floor_record'] + r['reference_record']) / r['reference_record']:.2f}x | "
                         f"{r['hal_submit']:.2f} | "
                         f"{r['reference_submit']:.2f} | {_verdict(submit_ratio, REFERENCE_SUBMIT_TARGET)} |")
        lines += ["", "single_pass (each command encoded as it is recorded, the driver's vkCmd* calls made by the "
                  "device's worker thread meanwhile, backends/vulkan/call_stream.pyx): wall µs per dispatch of begin() "
                  "to the end of end(), best of the same turns, against the reference's recording; paired turns as "
                  "above; and the CPU µs of the whole process over it (both threads: what the host spends):", "",
                  "| program | hal single_pass record+end | ratio | paired turns: median ratio, turns met | CPU µs | "
                  "CPU / reference |", "|---|---:|---|---|---:|---:|"]
        for r in result["reference"]:
            lines.append(f"| {r['program']} | {r['single_pass_record_end']:.2f} | "
                         f"{_verdict(r['single_pass_record_end'] / r['reference_record'], REFERENCE_RECORD_TARGET)} | "
                         f"{r['single_pass_paired_median']:.2f}x, {r['single_pass_paired_met']} of {PAIRED_TURNS} | "
                         f"{r['single_pass_cpu']:.2f} | {r['single_pass_cpu'] / r['reference_record']:.2f}x |")
        lines += ["", "Where hal's record+end goes beyond the reference's calls (µs per dispatch, each the best of "
                  f"the same turns). The allowance: what the {REFERENCE_RECORD_TARGET}x target leaves above those "
                  "calls. The calls: the program's loop and a Python call per command (a recorder whose calls do "
                  "nothing). Recording: hal's record() beyond the calls. end(): planning and encoding beyond the "
                  "driver's part (the reference's recording). The collector: what Python's cyclic garbage collector "
                  "added to record+end (both again with it paused), a part of the three before.", "",
                  "| program | allowance | hal above the reference | the calls | recording | end() | the collector |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for r in result["reference"]:
            allowance = (REFERENCE_RECORD_TARGET - 1) * r["reference_record"]
            lines.append(f"| {r['program']} | {allowance:.2f} | {r['hal_record_end'] - r['reference_record']:.2f} | "
                         f"{r['call_record']:.2f} | {r['hal_record'] - r['call_record']:.2f} | "
                         f"{r['hal_end'] - r['reference_record']:.2f} | "
                         f"{r['hal_record_end'] - r['hal_record_end_paused']:.2f} |")
    return "\n".join(lines)


def _verdict(ratio: float, target: float) -> str:
    return f"{ratio:.2f}x (<= {target}: {'met' if ratio <= target else 'MISSED'})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="vulkan")
    parser.add_argument("--dispatches", type=int, default=100)
    parser.add_argument("--json", default=None, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = run(args.device, args.dispatches)
    return emit(result, report(result), args.json)


if __name__ == "__main__":
    raise SystemExit(main())
