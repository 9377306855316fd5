"""Vulkan command buffers: a Program replayed into one VkCommandBuffer, never one per dispatch (compiled).

Every vkCmd* call goes straight to the driver's entry point (vkGetDeviceProcAddr, declared by the
Khronos headers), so recording costs what the driver charges.

- deferred: the whole Program is encoded at end() into one VkCommandBuffer.
- single_pass: each command is encoded as it is recorded, after a barrier when the planner put one
  before it; the device's worker thread makes the vkCmd* calls meanwhile (backends.vulkan.call_stream), so
  recording and the driver's work overlap.
- A barrier is one global memory barrier between compute and transfer work, where the Program says a
  command waits for one recorded since the last barrier. State Vulkan keeps across dispatches is not set
  again: the pipeline, descriptors and push constants are emitted only when they change (for layouts
  compatible for them, which hal's are whenever the binding and constant counts agree).
- Slot references and constant slots are only known at submit: a command buffer that uses them is encoded
  then, once per binding table and constant values (push constants are recorded into the VkCommandBuffer,
  which cannot be patched, so new values cost one re-encoding: about what end() costs, bench/vulkan.py);
  the TABLE_CACHE most recently used keep their VkCommandBuffers, so alternating between tables or values
  costs no re-recording (single_pass with slots therefore encodes at submit, like deferred). Reusable command
  buffers are encoded once and resubmitted as they are.
- dispatch_indirect: a guard dispatch and a barrier, then vkCmdDispatchIndirect (backends.vulkan.indirect).
- Regions: where the device has conditional rendering, an if_nonzero region whose body holds dispatches, fills,
  updates and word copies (as dispatches: backends.vulkan.gated_transfers) is encoded in place, its dispatches gated on the flag (Encoder.conditional): no host round trip; such a while_nonzero
  runs in chunks of iterations, each gated, the host checking the flag once a chunk. A command buffer with other
  regions becomes Steps: VkCommandBuffers for the runs of commands between regions, and per region a
  VkCommandBuffer copying its flag where the host reads it; the device's QueueDriver submits them in turn, reading
  the flag between (backends.vulkan.regions).
- The resubmission of an unchanged command buffer (hal.resubmission.queue_execute) is `VulkanEmitter.resubmitted`:
  one vkQueueSubmit after a few identity checks.
"""

cimport cython
from libc.stdint cimport uint32_t, uint64_t, uintptr_t
from libcpp.vector cimport vector

from hal.buffer cimport Buffer, BufferRef, ConstantSlot
from hal.command_buffer cimport CommandBuffer
from hal.commands cimport (
    Call, Command, Copy, Dispatch, DispatchArguments, Fill, Range, Region, Update, argument_ranges, argument_words,
    arguments_size, checked_word, new_dispatch
)
from hal.program cimport Emitter, Program
from backends.vulkan.khronos cimport (
    VkDeviceSize, VkPipelineStageFlags, VkBuffer, VkPipeline, VkPipelineLayout, VkDescriptorSet,
    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT,
    VK_PIPELINE_STAGE_HOST_BIT, VK_PIPELINE_STAGE_CONDITIONAL_RENDERING_BIT_EXT,
    VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT, VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT, VkBufferCopy
)
from backends.vulkan.call_stream cimport CallStream, StreamedCalls
from backends.vulkan.bound cimport Bound, Counts, descriptors_differ
from backends.vulkan.calls cimport Calls, DeviceCommands
from backends.vulkan.recording cimport Recording
from backends.vulkan.submitter cimport Submitter

from backends.vulkan.buffer import HostVisibleBuffer, VulkanBuffer
from backends.vulkan.call_context import VulkanCallContext
from backends.vulkan.gated_transfers import GatedTransfers
from backends.vulkan.indirect import IndirectGuard
from backends.vulkan.regions import Steps
from hal.buffer import BufferUsage
from hal.errors import DeviceError, DeviceLostError

TABLE_CACHE = 8  # binding tables (with constant values) whose encodings a command buffer keeps
# A gated loop's chunks: the host checks its flag before the first and after each, and the next chunk is the next
# size (the last repeats), so a loop of n iterations costs about log2(n) round trips to the host, and at most 64
# gated-off iterations (a barrier and skipped dispatches each) run after its flag clears. Sizes whose chunk would
# hold more than CHUNK_DISPATCHES dispatches are left out (but 2), bounding what end() encodes for a long body.
CHUNK_ITERATIONS = (2, 4, 8, 16, 32, 64)
CHUNK_DISPATCHES = 4096


cdef VkPipelineStageFlags BARRIER_STAGES = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT


@cython.final  # its methods are called directly
cdef class Encoder:
    """Records commands into one VkCommandBuffer (begun) through `calls` (backends.vulkan.calls: made at once, or
    streamed to a worker thread), which skip the state Vulkan already holds; `table` resolves slot references and
    `slot_constants` constant slots, `arena` gives descriptor sets when the device has no push descriptors (`calls`
    then makes them at once), `guard` (an IndirectGuard) guards dispatch_indirect commands."""

    cdef Calls calls
    cdef tuple table
    cdef tuple slot_constants
    cdef object arena
    cdef public object guard
    cdef object executable  # the last dispatch's executable and export ordinal, and their handles
    cdef Py_ssize_t ordinal
    cdef VkPipeline pipeline
    cdef VkPipelineLayout layout
    cdef object set_layout
    cdef object kind  # the layout kind of the last dispatch (see VulkanExecutable.compatible)
    cdef vector[uint64_t] scratch  # the arguments of a dispatch whose record holds none
    cdef bint guarded  # a dispatch_indirect's guard was recorded (see finish)
    cdef set guarded_first  # the static dispatch_indirect commands whose guards ran first (guard_static)
    cdef Py_ssize_t barriers  # made so far (the calls' Bound counts the other state-setting calls)
    cdef object transfers  # GatedTransfers: gated regions' latches, fills and copies, as dispatches
    cdef object predicate  # a word of hal's own where a gated region's flag is latched

    def __init__(self, Calls calls, tuple table, tuple slot_constants, arena, guard=None, transfers=None,
                 predicate=None):
        self.calls = calls
        self.table = table
        self.slot_constants = slot_constants
        self.arena = arena
        self.guard = guard
        self.transfers = transfers
        self.predicate = predicate
        self.executable = None
        self.ordinal = -1
        self.kind = None
        self.guarded = False
        self.barriers = 0

    cdef Counts counts(self):
        """The state-setting calls made so far, by kind: what was not skipped (read once the calls were made)."""
        cdef Counts counted = self.calls.bound.counts
        counted.barriers = self.barriers
        return counted

    cdef void barrier(self) except *:
        self.calls.pipeline_barrier(BARRIER_STAGES, BARRIER_STAGES, &self.calls.fn.memory_barrier)
        self.barriers += 1

    cdef void encode(self, Command c) except *:
        cdef type kind = type(c)
        cdef Buffer b, s
        cdef BufferRef r
        cdef VkBufferCopy region
        cdef bytes data
        if kind is Dispatch:
            self.dispatch(<Dispatch>c)
        elif kind is Call:
            self.foreign(<Call>c)
        elif kind is Fill:
            r = (<Fill>c).target
            b = self.resolve(r)
            self.calls.fill_buffer(<VkBuffer><uintptr_t>b.handle, r.offset, self.length(r, b),
                                   _pattern_word((<Fill>c).pattern))
        elif kind is Update:
            r = (<Update>c).target
            b = self.resolve(r)
            data = (<Update>c).data
            self.calls.update_buffer(<VkBuffer><uintptr_t>b.handle, r.offset, len(data), <const char*>data)
        else:
            r = (<Copy>c).source
            s = self.resolve(r)
            region.srcOffset = r.offset
            region.size = self.length(r, s)
            r = (<Copy>c).target
            b = self.resolve(r)
            region.dstOffset = r.offset
            self.calls.copy_buffer(<VkBuffer><uintptr_t>s.handle, <VkBuffer><uintptr_t>b.handle, &region)

    cdef void foreign(self, Call c) except *:
        """A call (hal.calls): its function records into this VkCommandBuffer itself, after every call made so far
        (a single_pass encoding's worker drained first). What it binds is unknown afterwards, so the next dispatch
        sets its pipeline, descriptors and push constants again."""
        cdef Bound* bound = self.calls.bound
        if isinstance(self.calls, StreamedCalls):
            (<StreamedCalls>self.calls).stream.drain()
        buffers = []
        for r in c.bindings:
            b = self.resolve(<BufferRef>r)
            buffers.append((b.handle, (<BufferRef>r).offset, self.length(<BufferRef>r, b)))
        context = VulkanCallContext(<uintptr_t>self.calls.cb, tuple(buffers), c.constant_values(self.slot_constants))
        try:
            c.function(context)
        except Exception as e:
            raise DeviceError(f"command {c.index} (call): its function raised {e!r} while recording into the "
                              f"VkCommandBuffer") from e
        bound.pipeline = NULL
        bound.descriptors_set = bound.words_set = False
        self.kind = None

    cdef void conditional(self, Region region) except *:
        """A region's body, once (an if_nonzero, or an iteration of a loop), on the device: its dispatches, fills and
        copies (what VulkanEmitter.gated lets through; fills and copies as hal's dispatches) gated by conditional
        rendering. The flag is latched first, copied to a word of hal's own that is the predicate: the body may
        write its flag, and a predicate that changes while conditional rendering is active may discard commands
        (some drivers read it before each). The copy is hal's copy kernel: NVIDIA's driver reads a predicate that
        vkCmdCopyBuffer wrote one copy late, whatever the barrier, and one a shader wrote on time. The barrier before
        the copy also waits for the last region's predicate read (the word's last reader)."""
        cdef BufferRef flag = region.condition
        cdef Program body = region.body
        cdef Py_ssize_t i
        cdef VkBuffer predicate = <VkBuffer><uintptr_t>(<Buffer>self.predicate).handle
        self.calls.pipeline_barrier(BARRIER_STAGES | VK_PIPELINE_STAGE_CONDITIONAL_RENDERING_BIT_EXT,
                                    VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, &self.calls.fn.latch_barrier)
        self.gated_words(region, self.resolve(flag), flag.offset, <Buffer>self.predicate, 0, 4)
        self.calls.pipeline_barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                    VK_PIPELINE_STAGE_CONDITIONAL_RENDERING_BIT_EXT, &self.calls.fn.condition_barrier)
        self.barriers += 2
        self.calls.begin_conditional(predicate, 0)
        for i in range(len(body.commands)):
            if body.barrier_before(i) and i > 0:
                self.barrier()
            c = body.commands[i]
            if type(c) is Dispatch:
                self.dispatch(<Dispatch>c)
            elif type(c) is Fill:
                self.gated_fill(<Fill>c)
            elif type(c) is Update:
                self.gated_update(<Update>c)
            else:
                self.gated_copy(<Copy>c)
        self.calls.end_conditional()

    cdef void gated_fill(self, Fill c) except *:
        """A fill as hal's fill kernel (backends.vulkan.gated_transfers), which conditional rendering gates."""
        cdef BufferRef r = c.target
        cdef Buffer b = self.resolve(r)
        cdef VkDeviceSize length = self.length(r, b)
        base, first = self.transfers.split(r.offset)
        ranges = (BufferRef(b, -1, base, r.offset + length - base),)
        word = _pattern_word(c.pattern)
        for start, groups in self.transfers.groups(length // 4):
            self.dispatch(new_dispatch(c.index, c.segment, self.transfers.executable, self.transfers.fill,
                                       (groups, 1, 1), (first, length // 4, word, start), ranges))

    cdef void gated_copy(self, Copy c) except *:
        """A copy of 32-bit words as hal's copy kernel, which conditional rendering gates."""
        cdef Buffer sb = self.resolve(c.source)
        self.gated_words(c, sb, c.source.offset, self.resolve(c.target), c.target.offset,
                         self.length(c.source, sb))

    cdef void gated_update(self, Update c) except *:
        """An update as hal's copy kernel, from a buffer holding its data."""
        self.gated_words(c, self.transfers.data_of(c), 0, self.resolve(c.target), c.target.offset, len(c.data))

    cdef void gated_words(self, Command c, Buffer source, VkDeviceSize source_offset, Buffer target,
                          VkDeviceSize target_offset, VkDeviceSize length) except *:
        source_base, source_first = self.transfers.split(source_offset)
        target_base, target_first = self.transfers.split(target_offset)
        ranges = (BufferRef(source, -1, source_base, source_offset + length - source_base),
                  BufferRef(target, -1, target_base, target_offset + length - target_base))
        for start, groups in self.transfers.groups(length // 4):
            self.dispatch(new_dispatch(c.index, c.segment, self.transfers.executable, self.transfers.copy,
                                       (groups, 1, 1), (source_first, target_first, length // 4, start), ranges))

    cdef inline Buffer resolve(self, BufferRef r):
        return r.buffer if r.buffer is not None else <Buffer>self.table[r.slot]

    cdef inline VkDeviceSize length(self, BufferRef r, Buffer b) noexcept:
        return r.nbytes if r.bounded else b.size - r.offset

    cdef void finish(self) except *:
        """End of the recording: if a guard ran, make its fault record visible to the host."""
        if self.guarded:
            self.calls.pipeline_barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                                        &self.calls.fn.fault_barrier)
            self.barriers += 1

    cdef void guard_static(self, list commands) except *:
        """At the start of a recording: the guards of the static dispatch_indirect `commands`, one after another, and
        one barrier after them all, instead of a guard and a barrier before each (static counts are the ones the
        submission starts with, which no command of the recording writes)."""
        for c in commands:
            self.guard_dispatch(<Dispatch>c)
        self.calls.pipeline_barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT,
                                    &self.calls.fn.indirect_barrier)
        self.barriers += 1
        self.guarded_first = set(commands)

    cdef void guard_counts(self, Dispatch c) except *:
        """Before dispatch_indirect `c`: the guard dispatch that puts its checked counts where
        vkCmdDispatchIndirect reads them, and the barrier between the two."""
        self.guard_dispatch(c)
        self.calls.pipeline_barrier(VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT,
                                    &self.calls.fn.indirect_barrier)
        self.barriers += 1

    cdef void guard_dispatch(self, Dispatch c) except *:
        """The guard dispatch of dispatch_indirect `c`: its checked counts where vkCmdDispatchIndirect reads them."""
        cdef BufferRef p = c.parameters
        cdef Buffer b = self.resolve(p)
        cdef Py_ssize_t base = p.offset - p.offset % self.guard.alignment
        cdef Buffer chunk
        chunk, slot = self.guard.place(c)
        ranges = (BufferRef(b, -1, base, p.offset + 12 - base), chunk.whole, (<Buffer>self.guard.fault).whole)
        self.dispatch(new_dispatch(c.index, c.segment, self.guard.executable, self.guard.entry, (1, 1, 1),
                                   self.guard.constants(c.index, p.offset - base, slot), ranges))
        self.guarded = True

    cdef void dispatch(self, Dispatch c) except *:
        cdef bint forget = False
        cdef DispatchArguments* arguments
        if c.parameters is not None and (self.guarded_first is None or c not in self.guarded_first):
            self.guard_counts(c)
        exe = c.executable
        if exe is not self.executable or c.ordinal != self.ordinal:
            self.executable, self.ordinal = exe, c.ordinal
            self.pipeline = <VkPipeline><uintptr_t>exe.pipeline_handles[c.ordinal]
            self.layout = <VkPipelineLayout><uintptr_t>exe.layout_handles[c.ordinal]
            self.set_layout = exe.set_layouts[c.ordinal]
            kind = exe.compatible[c.ordinal]
            if kind is not self.kind:  # another kind of layout: what was set may be disturbed
                self.kind = kind
                forget = True
        arguments = c.arguments if c.arguments != NULL else self.resolved_arguments(c)
        if self.arena is not None:
            self.bind_descriptor_set(arguments, forget)
            forget = False
        if c.parameters is None:
            self.calls.encode(self.pipeline, self.layout, forget, True, arguments)
        else:
            self.calls.encode(self.pipeline, self.layout, forget, False, arguments)
            chunk, slot = self.guard.place(c)
            self.calls.dispatch_indirect(<VkBuffer><uintptr_t>(<Buffer>chunk).handle, 12 * slot)

    cdef DispatchArguments* resolved_arguments(self, Dispatch c) except NULL:
        """The arguments of `c`, whose record holds none (slots, transients, constant slots, parameters), resolved
        through the table and constant values into `scratch`."""
        cdef Py_ssize_t i, bindings = len(c.bindings), count = len(c.constants)
        cdef BufferRef r
        cdef Buffer b
        cdef size_t size = arguments_size(bindings, count)
        self.scratch.resize(size // 8)
        cdef DispatchArguments* arguments = <DispatchArguments*>self.scratch.data()
        arguments.bindings, arguments.words, arguments.size = bindings, count, size
        for i in range(3):
            arguments.groups[i] = c.workgroups[i]
        cdef Range* ranges = argument_ranges(arguments)
        for i in range(bindings):
            r = <BufferRef>c.bindings[i]  # (checked when recorded)
            b = self.resolve(r)
            ranges[i].handle, ranges[i].offset, ranges[i].size = b.handle, r.offset, self.length(r, b)
        cdef uint32_t* words = argument_words(arguments)
        for i in range(count):
            value = c.constants[i]
            if type(value) is ConstantSlot:
                value = self.slot_constants[(<ConstantSlot>value).index]
            words[i] = checked_word(value)
        return arguments

    cdef void bind_descriptor_set(self, const DispatchArguments* arguments, bint forget) except *:
        """Without push descriptors: a descriptor set for the arguments' bindings, bound if they differ from those
        bound (on the calls' Bound, which only this thread touches then)."""
        cdef Bound* bound = self.calls.bound
        cdef const Range* ranges = argument_ranges(<DispatchArguments*>arguments)
        cdef uint32_t i
        if forget:
            bound.descriptors_set = bound.words_set = False
        self.calls.make_room(arguments)
        if arguments.bindings and descriptors_differ(bound, ranges, arguments.bindings):
            chosen = <VkDescriptorSet><uintptr_t>self.arena.write(self.set_layout, [
                x for i in range(arguments.bindings) for x in (ranges[i].handle, ranges[i].offset, ranges[i].size)])
            self.calls.bind_descriptor_set(self.layout, chosen)
            bound.counts.descriptor_sets += 1


cdef uint32_t _pattern_word(bytes pattern):
    """A 1-, 2- or 4-byte fill pattern replicated to the 32 bits vkCmdFillBuffer takes."""
    return int.from_bytes(pattern * (4 // len(pattern)), "little")


cdef class VulkanEmitter(Emitter):
    """The Vulkan side of one command buffer (hal.program.Emitter): its encoded VkCommandBuffers.

    `encodings` counts the VkCommandBuffers encoded so far (reuse shows as it not growing); `counts` the
    state-setting calls of the latest encoding (barriers, pipelines, descriptor_sets, constant_pushes,
    dispatches). `token`: the device's resubmit token while a resubmission is one vkQueueSubmit (see
    `resubmitted`)."""

    cdef object device
    cdef DeviceCommands fn
    cdef Submitter submitter
    cdef readonly Py_ssize_t lanes
    cdef readonly bint graph_layout
    cdef bint one_time, single_pass
    cdef bint slots_possible  # a binding or constant capacity: single_pass cannot encode while recording
    cdef Program program
    cdef object recorded  # the Recording, when the command buffer uses no slot
    cdef Recording submitted  # the Recording the last submission used: an unchanged resubmission submits it again
    cdef dict by_table  # (binding table's used prefix, words of the constant slots read) -> Recording
    cdef Recording open  # single_pass: the Recording being encoded
    cdef CallStream stream  # the device's: single_pass's calls are made by its worker thread
    cdef Encoder encoder
    cdef object guard  # the IndirectGuard, once a dispatch_indirect needs it
    cdef object transfers  # the GatedTransfers, once a region is gated
    cdef object predicate  # the word gated regions latch their flags in (Encoder.conditional), once one needs it
    cdef readonly bint driven  # the Program has regions: submitted as Steps by the device's QueueDriver
    cdef dict flag_slots  # region -> its word in `flags`
    cdef readonly object flags  # HostVisibleBuffer where the regions' flags are copied for the host
    cdef readonly Py_ssize_t encodings
    cdef Counts counted  # the latest encoding's (see counts)
    cdef public object token

    def __init__(self, device, DeviceCommands fn, Submitter submitter, str mode, str strategy,
                 Py_ssize_t binding_capacity, Py_ssize_t constant_capacity):
        self.device = device
        self.fn = fn
        self.submitter = submitter
        self.lanes = 0  # replayed in recording order: no graph to lay out
        self.graph_layout = False
        self.reads_arguments = True  # (Encoder.dispatch)
        self.one_time = mode == "one_shot"
        self.single_pass = strategy == "single_pass"
        self.stream = device.call_stream
        self.slots_possible = binding_capacity > 0 or constant_capacity > 0
        self.by_table = {}
        self.encodings = 0

    @property
    def counts(self) -> dict:
        """The latest encoding's state-setting calls by kind (empty before the first): made when asked, as encoding
        is what must be quick."""
        if self.encodings == 0:
            return {}
        return {"barriers": self.counted.barriers, "pipelines": self.counted.pipelines,
                "descriptor_sets": self.counted.descriptor_sets, "constant_pushes": self.counted.constant_pushes,
                "dispatches": self.counted.dispatches}

    def begin(self, Program program) -> None:
        self.program = program
        self.driven = False
        if self.single_pass and not self.slots_possible:
            self.open = Recording(self.device, submitted=False)
            self.begin_recording(self.open)
            # Without push descriptors, the descriptor sets come from Python: encoded in this thread.
            calls = Calls(self.fn, self.open.pool) if self.open.arena is not None else \
                StreamedCalls(self.stream, self.open.pool)
            self.encoder = Encoder(calls, (), (), self.open.arena)

    cpdef void command(self, Program program, object command) except *:
        # Regions are Steps, encoded at end(); so are calls, whose function fails there cleanly if it fails (end()
        # raises and the command buffer stays recording), not halfway through a recording.
        if (type(command) is Region or type(command) is Call) and self.encoder is not None:
            self.drop_open()
        if self.encoder is not None:
            if self.stream.stopping:  # the device closed: encoding would use what it destroyed
                self.device.check_open()
            if program.barrier_before((<Command>command).index):
                self.encoder.barrier()
            if type(command) is Dispatch and (<Dispatch>command).parameters is not None:
                self.encoder.guard = self.indirect_guard()
            self.encoder.encode(<Command>command)

    def end(self, Program program) -> None:
        self.program = program
        if program.regions and not self.on_device(program):
            self.driven = True
            if self.open is not None:
                self.drop_open()
            self.flag_slots = {}
            self.number_regions(program)
            self.flags = HostVisibleBuffer(self.device, 4 * len(self.flag_slots))
            if not program.slot_users and not program.constant_users:
                self.recorded = self.steps((), ())
            return
        if self.open is not None:
            self.encoder.finish()
            self.stream.drain()  # the worker made every call: the VkCommandBuffer is this thread's again
            self.open.end()
            self.encodings += 1
            self.counted = self.encoder.counts()
            self.recorded, self.open, self.encoder = self.open, None, None
        elif not program.slot_users and not program.constant_users:
            self.recorded = self.encode((), ())

    def reset(self) -> None:
        for rec in [self.recorded, self.open, *self.by_table.values()]:
            if rec is not None:
                rec.release()
        if self.guard is not None:
            self.guard.release()
        if self.flags is not None:
            self.flags.release()
        if self.predicate is not None:
            self.predicate.release()
        if self.transfers is not None:
            self.transfers.release()
        self.recorded = self.submitted = self.open = self.encoder = self.token = self.guard = self.flags = None
        self.predicate = None
        self.driven = False
        self.by_table = {}
        self.program = None
        self.device.lifetime.collect()

    cdef bint gated(self, Region region):
        """Whether conditional rendering can gate `region`'s body: the device has it, and the body holds no region
        (it does not nest) and only dispatches, fills, updates and copies of whole 32-bit words (it gates dispatches
        only: the others run as hal's dispatches, backends.vulkan.gated_transfers)."""
        cdef BufferRef s, t
        if self.fn.begin_conditional == NULL or region.body.regions:
            return False
        for c in region.body.commands:
            if type(c) is Copy:
                s, t = (<Copy>c).source, (<Copy>c).target
                if s.offset % 4 or t.offset % 4 or s.nbytes % 4:
                    return False
            elif type(c) is not Dispatch and type(c) is not Fill and type(c) is not Update:
                return False
        return True

    cdef object predicate_word(self):
        if self.predicate is None:
            self.predicate = VulkanBuffer(self.device, 4, BufferUsage.DISPATCH_STORAGE)  # (conditional rendering too)
        return self.predicate

    cdef object gated_transfers(self, list regions):
        """The GatedTransfers if a region among `regions` is gated (its flag is latched by hal's copy kernel, its
        fills, updates and copies run as hal's kernels), else None."""
        if self.transfers is None and any(self.gated(<Region>r) for r in regions):
            caps = self.device.capabilities
            self.transfers = GatedTransfers(self.device, caps.storage_buffer_offset_alignment,
                                            caps.max_workgroup_count[0])
        return self.transfers

    cdef bint on_device(self, Program program):
        """Whether every region of `program` runs in the one VkCommandBuffer: if_nonzero regions it can gate.
        Otherwise the Program is Steps (backends.vulkan.regions), where gated loops run in chunks of iterations."""
        for i in program.regions:
            region = <Region>program.commands[i]
            if region.loop or not self.gated(region):
                return False
        return True

    cdef void drop_open(self) except *:
        """Give up single_pass's VkCommandBuffer (a region came: the Program becomes Steps), ended first: one
        still recording must not go back to the pool."""
        self.stream.drain()
        self.open.end()
        self.open.release()
        self.open = self.encoder = None

    cdef object indirect_guard(self):
        if self.guard is None:
            self.guard = IndirectGuard(self.device)
        return self.guard

    cdef void begin_recording(self, Recording rec) except *:
        # A reusable one may be queued again while it is pending; so may the steps of a loop, also of a one_shot.
        rec.begin(VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT if self.one_time and not self.driven else
                  VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT)

    cdef object encode(self, tuple table, tuple constants):
        """A new Recording of the whole Program, slots resolved through `table`, constant slots by `constants`; the
        guards of its static dispatch_indirect commands first (Encoder.guard_static)."""
        return self.encode_range(self.program, 0, len(self.program.commands), table, constants, True, False)

    cdef object encode_range(self, Program program, Py_ssize_t start, Py_ssize_t stop, tuple table,
                             tuple constants, bint static_first=False, bint submitted=True):
        """A new Recording of `program`'s commands [start, stop) (regions among them only if-regions it gates);
        `static_first`: guard the static dispatch_indirect commands at its start; `submitted`: see Recording (False:
        command_buffer() hands it out)."""
        cdef Recording rec = Recording(self.device, submitted)
        cdef Encoder encoder
        cdef Py_ssize_t i
        try:
            self.begin_recording(rec)
            indirect = program.indirect or any((<Region>program.commands[i]).body.indirect for i in program.regions)
            regions = [program.commands[i] for i in program.regions]
            encoder = Encoder(Calls(self.fn, rec.pool), table, constants, rec.arena,
                              self.indirect_guard() if indirect else None,  # (gated regions' too)
                              self.gated_transfers(regions), self.predicate_word() if regions else None)
            static = [program.commands[i] for i in program.static_indirect]
            if static_first and static:
                encoder.guard_static(static)
            for i in range(start, stop):
                if program.barrier_before(i) and i > start:  # the first follows a submission: ordered by the queue
                    encoder.barrier()
                if type(program.commands[i]) is Region:
                    encoder.conditional(<Region>program.commands[i])
                else:
                    encoder.encode(program.commands[i])
            encoder.finish()
            rec.end()
        except BaseException:
            rec.release()
            raise
        self.encodings += 1
        self.counted = encoder.counts()
        return rec

    cdef void number_regions(self, Program program):
        """Give each region (nested ones too) its word in `flags`."""
        for i in program.regions:
            region = program.commands[i]
            self.flag_slots[region] = len(self.flag_slots)
            self.number_regions((<Region>region).body)

    cdef object steps(self, tuple table, tuple constants):
        """The Steps of the whole Program for `table` and `constants` (see backends.vulkan.regions)."""
        steps = Steps(self.flags.words)
        try:
            self.add_steps(steps, self.program, table, constants)
        except BaseException:
            steps.release()
            raise
        return steps

    cdef void add_steps(self, object steps, Program program, tuple table, tuple constants) except *:
        """`program`'s Steps: runs of commands (gated ifs among them), and between them the regions the host checks:
        a loop it can gate as chunks of iterations, the others as their body's Steps."""
        cdef Py_ssize_t start = 0, i
        cdef Region r
        cdef Buffer flag
        for i in program.regions:
            r = <Region>program.commands[i]
            gated = self.gated(r)
            if gated and not r.loop:
                continue  # encoded within its run
            if i > start:
                steps.run(self.encode_range(program, start, i, table, constants))
            flag = r.condition.buffer if r.condition.buffer is not None else <Buffer>table[r.condition.slot]
            word = self.flag_slots[r]
            readback = self.encode_readback(flag, r.condition.offset, 4 * word)
            if gated:
                sizes = [k for k in CHUNK_ITERATIONS if k == 2 or k * len(r.body.commands) <= CHUNK_DISPATCHES]
                steps.chunks(readback, word, [self.encode_iterations(r, k, table, constants) for k in sizes])
            else:
                self.add_steps(steps.region(r.loop, readback, word), r.body, table, constants)
            start = i + 1
        if start < len(program.commands):
            steps.run(self.encode_range(program, start, len(program.commands), table, constants))

    cdef object encode_iterations(self, Region loop, Py_ssize_t k, tuple table, tuple constants):
        """A Recording of `k` iterations of a gated loop, each gated on its flag: those after the flag clears run
        nothing."""
        cdef Recording rec = Recording(self.device)
        cdef Encoder encoder
        cdef Py_ssize_t i
        try:
            self.begin_recording(rec)
            encoder = Encoder(Calls(self.fn, rec.pool), table, constants, rec.arena,
                              self.indirect_guard() if loop.body.indirect else None, self.gated_transfers([loop]),
                              self.predicate_word())
            for i in range(k):
                if i:
                    encoder.barrier()  # the iteration before wrote what this one reads, its flag too
                encoder.conditional(loop)
            encoder.finish()
            rec.end()
        except BaseException:
            rec.release()
            raise
        return rec

    cdef object encode_readback(self, Buffer flag, Py_ssize_t offset, Py_ssize_t target):
        """A Recording copying the 4 bytes at `offset` of `flag` to byte `target` of `flags`, for the host."""
        cdef Recording rec = Recording(self.device)
        cdef Calls calls
        cdef VkBufferCopy region
        region.srcOffset, region.dstOffset, region.size = offset, target, 4
        try:
            self.begin_recording(rec)
            calls = Calls(self.fn, rec.pool)
            calls.copy_buffer(<VkBuffer><uintptr_t>flag.handle, <VkBuffer><uintptr_t>(<Buffer>self.flags).handle,
                              &region)
            calls.pipeline_barrier(VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT, &self.fn.host_barrier)
            rec.end()
        except BaseException:
            rec.release()
            raise
        return rec

    @property
    def resubmits_in_one_submit(self) -> bool:
        """Reusable, submitted, without constant slots (their values come with every submit) or regions: submitted
        again with the same binding table, it is one vkQueueSubmit of the VkCommandBuffer the last submission used."""
        return self.submitted is not None and not self.one_time and not self.driven and \
            not self.program.constant_users

    cdef bint resubmitted(self, object device, object command_buffer, object binding_table) except -1:
        """One vkQueueSubmit of the VkCommandBuffer the last submission used, if this emitter holds the device's
        `resubmit_token` (given by the general path: reusable, no constant slots, nothing to free, the device neither
        lost nor closing) and the command buffer accepts the table without a look; False leaves the submission to
        the general path."""
        if self.token is not device.resubmit_token or self.device is not device or \
                not (<CommandBuffer>command_buffer).accepts(binding_table, device.release_token):
            return False
        try:
            self.submitter.submit(self.submitted.handle)
        except DeviceLostError as e:
            device.raise_failure(e)
        return True

    def command_buffer(self, tuple table, tuple constants) -> object:
        """The VkCommandBuffer (as an integer) to submit with `table` and constant slot values `constants`
        (already checked), encoded now if needed; for a driven command buffer, its Steps."""
        rec = self.recorded
        if rec is None:
            words = tuple([checked_word(constants[i]) for i in self.program.constant_users])
            key = (table[:self.program.slots_needed], words)
            rec = self.by_table.pop(key, None)  # put back last: the least recently used goes first
            if rec is None:
                if len(self.by_table) >= TABLE_CACHE:
                    oldest = next(iter(self.by_table))
                    self.by_table.pop(oldest).release()
                rec = self.steps(table, constants) if self.driven else self.encode(table, constants)
            self.by_table[key] = rec
        if self.driven:
            return rec
        self.submitted = <Recording>rec
        self.submitted.mark_submitted()
        return rec.handle
