"""Vulkan command buffers: hal's segments replayed into VkCommandBuffers, never one per dispatch.

- deferred: the whole list is encoded at end() into one VkCommandBuffer.
- single_pass: each command is encoded as it is recorded; a barrier goes in just before the first
  command that waits for one recorded since the last barrier.
Slot references are only known at submit: a command buffer that uses them is encoded then, once per
binding table; the last few tables keep their VkCommandBuffers, so alternating between tables costs
no re-recording. (single_pass with slots therefore encodes at submit, like deferred.) Reusable
command buffers are encoded once and resubmitted as they are.

Each encoding (a `Recording`) owns its VkCommandPool, so retiring one never touches a pool another
thread may be recording into; retired recordings are destroyed once the GPU is done with them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends.vulkan import encoder
from backends.vulkan.api import check, ffi, lib, vk
from backends.vulkan.descriptors import DescriptorArena
from backends.vulkan.encoder import Encoder
from hal.buffer import Buffer
from hal.command_buffer import CommandBuffer
from hal.commands import Command

if TYPE_CHECKING:
    from backends.vulkan.device import VulkanDevice

TABLE_CACHE = 8  # binding tables whose encodings a command buffer keeps


class Recording:
    """One encoded VkCommandBuffer, its pool and (without push descriptors) its descriptor sets."""

    __slots__ = ("vkcb", "arena", "finalizer", "__weakref__")

    def __init__(self, device: VulkanDevice, resettable: bool = False) -> None:
        flags = vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT if resettable else 0
        info = ffi.new("VkCommandPoolCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                                    "flags": flags, "queueFamilyIndex": device.physical.queue_family})
        pool = ffi.new("VkCommandPool*")
        check(lib.vkCreateCommandPool(device.handle, info, ffi.NULL, pool), "vkCreateCommandPool")
        device._count("VkCommandPool", 1)
        self.arena = None if device.push_descriptors else DescriptorArena(device)
        self.finalizer = device._track(self, destroy_recording, device, pool[0], self.arena)
        alloc = ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": pool[0],
            "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1})
        out = ffi.new("VkCommandBuffer*")
        try:
            check(lib.vkAllocateCommandBuffers(device.handle, alloc, out), "vkAllocateCommandBuffers")
        except BaseException:
            self.finalizer()
            raise
        self.vkcb = out[0]


def destroy_recording(device: VulkanDevice, pool: Any, arena: DescriptorArena | None) -> None:
    lib.vkDestroyCommandPool(device.handle, pool, ffi.NULL)  # frees its command buffer too
    device._count("VkCommandPool", -1)
    if arena is not None:
        arena.destroy()


class VulkanCommandBuffer(CommandBuffer):
    __slots__ = ("_recorded", "_by_table", "_open", "_encoder", "encodings", "barriers")

    def __init__(self, device: VulkanDevice, mode: str, binding_capacity: int, strategy: str, dependencies: str,
                 validate: bool) -> None:
        super().__init__(device, mode, binding_capacity, strategy, dependencies, validate)
        self._recorded: Recording | None = None  # the encoding, when no slot is used
        self._by_table: dict[tuple[Buffer, ...], Recording] = {}
        self._open: Recording | None = None  # single_pass: the encoding being recorded
        self._encoder: Encoder | None = None
        self.encodings = 0  # VkCommandBuffers encoded so far (reuse shows as this not growing)
        self.barriers = 0  # pipeline barriers in the latest encoding

    # Recording hooks.
    def _wants_dependencies(self) -> bool:
        return self.dependencies == "hazards"  # barriers mode puts a barrier between every two segments

    def _on_begin(self) -> None:
        if self._single_pass and not self.binding_capacity:
            self._open = Recording(self.device)
            encoder.begin(self.device, self._open.vkcb, self.mode == "one_shot")
            self._encoder = Encoder(self.device, self._open.vkcb, self._tracker, (), self._open.arena)

    def _on_command(self, command: Command, group: int) -> None:
        if self._encoder is not None:
            self._encoder.single(command)

    def _on_end(self) -> None:
        if self._open is not None:
            encoder.end(self.device, self._open.vkcb)
            self.encodings += 1
            self.barriers = self._encoder.barriers
            self._recorded, self._open, self._encoder = self._open, None, None
        elif not self._slot_commands:
            self._recorded = self._encode(())

    def _on_reset(self) -> None:
        for rec in [self._recorded, self._open, *self._by_table.values()]:
            if rec is not None:
                rec.finalizer()
        self._recorded = self._open = self._encoder = None
        self._by_table = {}
        self.device._collect()

    def _encode(self, table: tuple[Buffer, ...]) -> Recording:
        rec = Recording(self.device)
        try:
            encoder.begin(self.device, rec.vkcb, self.mode == "one_shot")
            enc = Encoder(self.device, rec.vkcb, self._tracker, table, rec.arena)
            enc.segments(self._head)
            enc.flush()
            encoder.end(self.device, rec.vkcb)
        except BaseException:
            rec.finalizer()
            raise
        self.encodings += 1
        self.barriers = enc.barriers
        return rec

    # Submission.
    def _vk_command_buffer(self, table: tuple[Buffer, ...]) -> Any:
        """The VkCommandBuffer to submit with `table` (already checked), encoded now if needed."""
        rec = self._recorded
        if rec is not None:
            return rec.vkcb
        key = table[:self._slots_needed]
        rec = self._by_table.get(key)
        if rec is None:
            if len(self._by_table) >= TABLE_CACHE:
                oldest = next(iter(self._by_table))
                self._by_table.pop(oldest).finalizer()
            rec = self._by_table[key] = self._encode(table)
        return rec.vkcb
