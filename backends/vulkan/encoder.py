"""The encoder: turns hal commands into a stream of 64-bit words, then replays it into one
VkCommandBuffer: in C (encoder.c, one call per recording) or, without a C compiler, from Python.

A barrier is one global memory barrier between compute and transfer work. It goes where a command
waits for a command recorded since the last barrier: before each non-empty segment in `barriers`
mode, and only where a dependency crosses in `hazards` mode (a segment whose commands wait only for
work already behind an earlier barrier needs none). State that Vulkan keeps across dispatches is not
set again: the pipeline, push descriptors and push constants are emitted only when they change (for
layouts compatible for them, which hal's are whenever the binding and constant counts agree).

Stream words (the opcodes of encoder.c): BIND_PIPELINE pipeline | PUSH_DESCRIPTORS layout n
(buffer offset range)*n | BIND_SET layout set | PUSH_CONSTANTS layout n word*n (32-bit) | DISPATCH x y z |
FILL buffer offset size pattern | UPDATE buffer offset size address | COPY source target source_offset
target_offset size | BARRIER.
"""

from __future__ import annotations

import struct
from array import array
from typing import TYPE_CHECKING, Any

from backends.vulkan import native
from backends.vulkan.api import check, ffi, vk
from backends.vulkan.descriptors import DescriptorArena
from hal.commands import Command, Copy, Dispatch, Fill, Segment, Update, constant_word
from hal.errors import DeviceError

if TYPE_CHECKING:
    from backends.vulkan.device import VulkanDevice
    from hal.buffer import Buffer
    from hal.dependencies import DependencyTracker

(OP_BIND_PIPELINE, OP_PUSH_DESCRIPTORS, OP_BIND_SET, OP_PUSH_CONSTANTS, OP_DISPATCH, OP_FILL, OP_UPDATE, OP_COPY,
 OP_BARRIER) = range(1, 10)
NATIVE_FUNCTIONS = ("vkCmdBindPipeline", "vkCmdPushDescriptorSetKHR", "vkCmdBindDescriptorSets", "vkCmdPushConstants",
                    "vkCmdDispatch", "vkCmdFillBuffer", "vkCmdUpdateBuffer", "vkCmdCopyBuffer", "vkCmdPipelineBarrier")
COMPUTE_BIND = vk.VK_PIPELINE_BIND_POINT_COMPUTE
COMPUTE_STAGE = vk.VK_SHADER_STAGE_COMPUTE_BIT
BARRIER_STAGES = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT
MAX_BINDINGS = 64  # as in encoder.c; push descriptors allow fewer anyway (maxPushDescriptors)


class Encoder:
    """Encodes into `vkcb` (begun); `table` resolves slot references. One per recording."""

    __slots__ = ("device", "vkcb", "tracker", "table", "arena", "native", "stream", "keep", "fence", "group_max",
                 "last_segment", "pipeline", "compatible", "descriptors", "constants", "barriers")

    def __init__(self, device: VulkanDevice, vkcb: Any, tracker: DependencyTracker, table: tuple[Buffer, ...],
                 arena: DescriptorArena | None) -> None:
        self.device, self.vkcb, self.tracker, self.table, self.arena = device, vkcb, tracker, table, arena
        # The native encoder bound to this command buffer: stream -> 0, or the bad word's index + 1.
        self.native = None if device.native is None else native.bind(device.native, device.address(vkcb),
                                                                      device.native_functions,
                                                                      device.address(device.memory_barrier),
                                                                      BARRIER_STAGES)
        self.stream: list[int] = []
        self.keep: list[Any] = []  # what stream addresses point into, until the stream is replayed
        self.fence = 0  # the index of the first command after the last barrier
        self.group_max: list[int] = []  # hazards: per dependency group, its latest command (-1: none)
        self.last_segment = -1  # the segment of the last command encoded
        self.pipeline = 0
        self.compatible: object = None  # the layout kind of the last dispatch (see VulkanExecutable.compatible)
        self.descriptors: list[int] | None = None  # the words of the descriptors last set
        self.constants: list[int] | None = None  # the push constants last set, as 32-bit words
        self.barriers = 0

    # Barriers: in barriers mode, before every segment after the first; in hazards mode, where a command
    # waits for a command at or past `fence`, the first command after the last barrier (commands are
    # encoded in index order).
    def segments(self, segment: Segment | None) -> None:
        """Append the segments linked from `segment` (each a run of commands nothing orders) to the stream:
        a barrier before a segment if one of its commands needs it. The hot loop: everything is inlined."""
        stream, table, arena = self.stream, self.table, self.arena
        hazards = self.tracker.hazards  # in barriers mode every segment after the first waits: no groups needed
        if hazards:
            group_of, groups, group_max = self.tracker.group_of, self.tracker.groups, self.group_max
            if len(group_max) < len(groups):  # single_pass: the groups grow as commands come
                group_max += [max(g, default=-1) for g in groups[len(group_max):]]
        pipeline, compatible, descriptors, constants = self.pipeline, self.compatible, self.descriptors, self.constants
        fence, last_segment = self.fence, self.last_segment
        while segment is not None:
            commands = segment.commands
            segment = segment.next
            if not commands:
                continue
            if hazards:
                needs = False
                for c in commands:
                    g = group_of[c.index]
                    if g >= 0 and group_max[g] >= fence:
                        needs = True
                        break
            else:
                needs = last_segment != commands[0].segment and last_segment >= 0
            last_segment = commands[0].segment
            if needs:
                stream.append(OP_BARRIER)
                fence = commands[0].index
                self.barriers += 1
            for c in commands:
                if type(c) is not Dispatch:
                    self._transfer(c)
                    continue
                exe, k = c.executable, c.ordinal
                if exe.pipeline_handles[k] != pipeline:
                    pipeline = exe.pipeline_handles[k]
                    stream += (OP_BIND_PIPELINE, pipeline)
                layout = exe.layout_handles[k]
                if exe.compatible[k] is not compatible:  # another kind of layout: what was set may be disturbed
                    compatible, descriptors, constants = exe.compatible[k], None, None
                bindings = c.bindings
                if bindings:
                    words = []
                    for r in bindings:
                        b = r._buffer
                        if b is not None:  # a direct reference's length is always known
                            words += (b.vk_handle, r._offset, r._length)
                        else:
                            b = table[r._slot]
                            words += (b.vk_handle, r._offset, b.size - r._offset if r._length is None else r._length)
                    if words != descriptors:
                        descriptors = words
                        if arena is None:
                            stream += (OP_PUSH_DESCRIPTORS, layout, len(bindings))
                            stream += words
                        else:
                            stream += (OP_BIND_SET, layout, arena.write(exe.set_layouts[k], words))
                if c.constants:
                    words = [x & 0xFFFFFFFF if type(x) is int else constant_word(x) for x in c.constants]
                    if words != constants:
                        constants = words
                        stream += (OP_PUSH_CONSTANTS, layout, len(words))
                        stream += words
                stream += (OP_DISPATCH, *c.workgroups)
        self.pipeline, self.compatible, self.descriptors, self.constants = pipeline, compatible, descriptors, constants
        self.fence, self.last_segment = fence, last_segment

    def single(self, command: Command) -> None:
        """single_pass encoding of one command (a barrier just before it if it needs one); replayed at once."""
        segment = Segment(command.segment)
        segment.commands.append(command)
        self.segments(segment)
        self.flush()

    def _transfer(self, c: Command) -> None:
        kind = type(c)
        if kind is Fill:
            b, offset, size = self._range(c.target)
            p = c.pattern
            self.stream += (OP_FILL, b.vk_handle, offset, size, int.from_bytes(p * (4 // len(p)), "little"))
        elif kind is Update:
            b, offset, _ = self._range(c.target)
            data = ffi.from_buffer(c.data)
            self.keep.append(data)
            self.stream += (OP_UPDATE, b.vk_handle, offset, len(c.data), int(ffi.cast("uintptr_t", data)))
        elif kind is Copy:
            s, s_offset, size = self._range(c.source)
            t, t_offset, _ = self._range(c.target)
            self.stream += (OP_COPY, s.vk_handle, t.vk_handle, s_offset, t_offset, size)
        else:  # pragma: no cover - the command kinds are closed
            raise TypeError(f"unknown command {c!r}")

    def _range(self, r: Any) -> tuple[Any, int, int]:
        b = r._buffer
        if b is None:
            b = self.table[r._slot]
        return b, r._offset, (b.size - r._offset if r._length is None else r._length)

    # Replay.
    def flush(self) -> None:
        """Record the stream into the VkCommandBuffer and start a new one."""
        stream = self.stream
        if not stream:
            return
        if self.native is not None:
            bad = self.native(array("Q", stream))
            if bad:  # pragma: no cover - the stream comes from this module
                raise DeviceError(f"internal error: the native encoder rejected word {bad - 1} of its stream")
        else:
            replay(self.device, self.vkcb, stream)
        stream.clear()
        self.keep.clear()


def replay(device: VulkanDevice, vkcb: Any, s: list[int]) -> None:
    """The stream, recorded call by call from Python (without the native encoder)."""
    fn, cast = device.fn, ffi.cast
    infos = ffi.new("VkDescriptorBufferInfo[]", MAX_BINDINGS)
    write = ffi.new("VkWriteDescriptorSet*", {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                              "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              "pBufferInfo": infos})
    one_set, region = ffi.new("VkDescriptorSet[1]"), ffi.new("VkBufferCopy*")
    i, n = 0, len(s)
    while i < n:
        op = s[i]
        if op == OP_BIND_PIPELINE:
            fn.vkCmdBindPipeline(vkcb, COMPUTE_BIND, cast("VkPipeline", s[i + 1]))
            i += 2
        elif op == OP_PUSH_DESCRIPTORS:
            count = s[i + 2]
            for k in range(count):
                j = i + 3 + 3 * k
                infos[k] = (cast("VkBuffer", s[j]), s[j + 1], s[j + 2])
            write.descriptorCount = count
            fn.vkCmdPushDescriptorSetKHR(vkcb, COMPUTE_BIND, cast("VkPipelineLayout", s[i + 1]), 0, 1, write)
            i += 3 + 3 * count
        elif op == OP_BIND_SET:
            one_set[0] = cast("VkDescriptorSet", s[i + 2])
            fn.vkCmdBindDescriptorSets(vkcb, COMPUTE_BIND, cast("VkPipelineLayout", s[i + 1]), 0, 1, one_set, 0,
                                       ffi.NULL)
            i += 3
        elif op == OP_PUSH_CONSTANTS:
            count = s[i + 2]
            data = struct.pack(f"<{count}I", *s[i + 3:i + 3 + count])
            fn.vkCmdPushConstants(vkcb, cast("VkPipelineLayout", s[i + 1]), COMPUTE_STAGE, 0, 4 * count,
                                  ffi.from_buffer(data))
            i += 3 + count
        elif op == OP_DISPATCH:
            fn.vkCmdDispatch(vkcb, s[i + 1], s[i + 2], s[i + 3])
            i += 4
        elif op == OP_FILL:
            fn.vkCmdFillBuffer(vkcb, cast("VkBuffer", s[i + 1]), s[i + 2], s[i + 3], s[i + 4])
            i += 5
        elif op == OP_UPDATE:
            fn.vkCmdUpdateBuffer(vkcb, cast("VkBuffer", s[i + 1]), s[i + 2], s[i + 3], cast("void*", s[i + 4]))
            i += 5
        elif op == OP_COPY:
            region.srcOffset, region.dstOffset, region.size = s[i + 3], s[i + 4], s[i + 5]
            fn.vkCmdCopyBuffer(vkcb, cast("VkBuffer", s[i + 1]), cast("VkBuffer", s[i + 2]), 1, region)
            i += 6
        elif op == OP_BARRIER:
            fn.vkCmdPipelineBarrier(vkcb, BARRIER_STAGES, BARRIER_STAGES, 0, 1, device.memory_barrier, 0, ffi.NULL,
                                    0, ffi.NULL)
            i += 1
        else:  # pragma: no cover - the stream comes from this module
            raise DeviceError(f"internal error: opcode {op} at word {i} of the encoder's stream")


def begin(device: VulkanDevice, vkcb: Any, one_time: bool) -> None:
    info = device.begin_info_once if one_time else device.begin_info
    check(device.fn.vkBeginCommandBuffer(vkcb, info), "vkBeginCommandBuffer")


def end(device: VulkanDevice, vkcb: Any) -> None:
    check(device.fn.vkEndCommandBuffer(vkcb), "vkEndCommandBuffer")
