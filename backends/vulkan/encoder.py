"""The encoder: writes hal commands into one VkCommandBuffer, with the barriers the dependencies need.

Vulkan copies every argument of a vkCmd* call when it is made, so one set of scratch structs,
built once per encoder, serves every command; the calls go to the driver's own function pointers.
A barrier is one global memory barrier between compute and transfer work. It goes where a command
waits for a command recorded since the last barrier: before each non-empty segment in `barriers`
mode, and only where a dependency crosses in `hazards` mode (a segment whose commands wait only for
work already behind an earlier barrier needs none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends.vulkan.api import check, ffi, vk
from backends.vulkan.descriptors import DescriptorArena
from hal.commands import Command, Copy, Dispatch, Fill, Update, pack_constants

if TYPE_CHECKING:
    from backends.vulkan.device import VulkanDevice
    from hal.buffer import Buffer
    from hal.dependencies import DependencyTracker

COMPUTE_BIND = vk.VK_PIPELINE_BIND_POINT_COMPUTE
COMPUTE_STAGE = vk.VK_SHADER_STAGE_COMPUTE_BIT
STORAGE_BUFFER = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
BARRIER_STAGES = vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | vk.VK_PIPELINE_STAGE_TRANSFER_BIT
MAX_BINDINGS = 64


class Encoder:
    """Records into `vkcb` (begun); `table` resolves slot references. One per recording."""

    __slots__ = ("device", "vkcb", "tracker", "table", "fn", "epoch", "epoch_of", "group_epoch", "pipeline",
                 "infos", "write", "region", "arena", "barriers")

    def __init__(self, device: VulkanDevice, vkcb: Any, tracker: DependencyTracker, table: tuple[Buffer, ...],
                 arena: DescriptorArena | None) -> None:
        self.device, self.vkcb, self.tracker, self.table, self.arena = device, vkcb, tracker, table, arena
        self.fn = device.fn
        self.epoch = 0  # barriers emitted so far
        self.epoch_of: list[int] = []  # per command index: the barriers emitted before it
        self.group_epoch: dict[int, int] = {}  # per dependency group: the latest epoch of its members
        self.pipeline = None
        self.infos = ffi.new("VkDescriptorBufferInfo[]", MAX_BINDINGS)
        self.write = ffi.new("VkWriteDescriptorSet*", {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                                       "descriptorType": STORAGE_BUFFER, "pBufferInfo": self.infos})
        self.region = ffi.new("VkBufferCopy*")
        self.barriers = 0

    # Barriers.
    def needs_barrier(self, command: Command) -> bool:
        """Does `command` wait for a command recorded since the last barrier?"""
        g = self.tracker.group_of[command.index]
        if g < 0:
            return False
        latest = self.group_epoch.get(g)
        if latest is None:
            epoch_of = self.epoch_of
            latest = self.group_epoch[g] = max(epoch_of[p] for p in self.tracker.groups[g])
        return latest == self.epoch

    def barrier(self) -> None:
        self.fn.vkCmdPipelineBarrier(self.vkcb, BARRIER_STAGES, BARRIER_STAGES, 0, 1, self.device.memory_barrier,
                                     0, ffi.NULL, 0, ffi.NULL)
        self.epoch += 1
        self.barriers += 1

    def segment(self, commands: list[Command]) -> None:
        """Deferred emission of one segment: a barrier first if any of its commands needs one."""
        if self.epoch_of and any(map(self.needs_barrier, commands)):
            self.barrier()
        for c in commands:
            self.command(c)

    def single(self, command: Command) -> None:
        """single_pass emission: a barrier just before the first command that needs it."""
        if self.needs_barrier(command):
            self.barrier()
        self.command(command)

    # Commands.
    def command(self, c: Command) -> None:
        self.epoch_of.append(self.epoch)
        kind = type(c)
        if kind is Dispatch:
            self.dispatch(c)
        elif kind is Fill:
            b, offset, size = self._range(c.target)
            p = c.pattern
            self.fn.vkCmdFillBuffer(self.vkcb, b.handle, offset, size, int.from_bytes(p * (4 // len(p)), "little"))
        elif kind is Update:
            b, offset, size = self._range(c.target)
            self.fn.vkCmdUpdateBuffer(self.vkcb, b.handle, offset, len(c.data), ffi.from_buffer(c.data))
        elif kind is Copy:
            s, s_offset, size = self._range(c.source)
            t, t_offset, _ = self._range(c.target)
            region = self.region
            region.srcOffset, region.dstOffset, region.size = s_offset, t_offset, size
            self.fn.vkCmdCopyBuffer(self.vkcb, s.handle, t.handle, 1, region)
        else:  # pragma: no cover - the command kinds are closed
            raise TypeError(f"unknown command {c!r}")

    def _range(self, r: Any) -> tuple[Any, int, int]:
        b = r._buffer
        if b is None:
            b = self.table[r._slot]
        return b, r._offset, (b.size - r._offset if r._length is None else r._length)

    def dispatch(self, c: Dispatch) -> None:
        fn, vkcb = self.fn, self.vkcb
        exe, k = c.executable, c.ordinal
        pipeline = exe.pipelines[k]
        if pipeline != self.pipeline:
            fn.vkCmdBindPipeline(vkcb, COMPUTE_BIND, pipeline)
            self.pipeline = pipeline
        layout = exe.layouts[k]
        bindings = c.bindings
        if bindings:
            infos, table = self.infos, self.table
            for i, r in enumerate(bindings):
                b = r._buffer
                if b is None:
                    b = table[r._slot]
                info = infos[i]
                info.buffer = b.handle
                info.offset = r._offset
                info.range = b.size - r._offset if r._length is None else r._length
            write = self.write
            write.descriptorCount = len(bindings)
            if self.arena is None:
                fn.vkCmdPushDescriptorSetKHR(vkcb, COMPUTE_BIND, layout, 0, 1, write)
            else:
                write.dstSet = self.arena.allocate(exe.set_layouts[k])
                fn.vkUpdateDescriptorSets(self.device.handle, 1, write, 0, ffi.NULL)
                fn.vkCmdBindDescriptorSets(vkcb, COMPUTE_BIND, layout, 0, 1, self.arena.last, 0, ffi.NULL)
        if c.constants:
            words = pack_constants(c.constants)
            fn.vkCmdPushConstants(vkcb, layout, COMPUTE_STAGE, 0, len(words), ffi.from_buffer(words))
        x, y, z = c.workgroups
        fn.vkCmdDispatch(vkcb, x, y, z)


def begin(device: VulkanDevice, vkcb: Any, one_time: bool) -> None:
    info = device.begin_info_once if one_time else device.begin_info
    check(device.fn.vkBeginCommandBuffer(vkcb, info), "vkBeginCommandBuffer")


def end(device: VulkanDevice, vkcb: Any) -> None:
    check(device.fn.vkEndCommandBuffer(vkcb), "vkEndCommandBuffer")
