"""One encoded VkCommandBuffer with its own VkCommandPool (and, without push descriptors, its descriptor sets).

Each encoding owns its pool, so retiring one never touches a pool another thread may be recording
into; retired recordings are destroyed once the GPU is done with them (the device's lifetime).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends.vulkan.api import check, ffi, lib, vk
from backends.vulkan.descriptors import DescriptorArena

if TYPE_CHECKING:
    from backends.vulkan.device import VulkanDevice


class Recording:
    """`handle`: the VkCommandBuffer as an integer; `arena`: its descriptor sets (None with push descriptors);
    `finalizer()` retires it."""

    __slots__ = ("handle", "arena", "finalizer", "__weakref__")

    def __init__(self, device: VulkanDevice, resettable: bool = False) -> None:
        flags = vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT if resettable else 0
        info = ffi.new("VkCommandPoolCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                                    "flags": flags, "queueFamilyIndex": device.physical.queue_family})
        pool = ffi.new("VkCommandPool*")
        check(lib.vkCreateCommandPool(device.handle, info, ffi.NULL, pool), "vkCreateCommandPool")
        device.count_objects("VkCommandPool", 1)
        self.arena = None if device.push_descriptors else DescriptorArena(device)
        self.finalizer = device.lifetime.track(self, destroy_recording, device, pool[0], self.arena)
        alloc = ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": pool[0],
            "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1})
        out = ffi.new("VkCommandBuffer*")
        try:
            check(lib.vkAllocateCommandBuffers(device.handle, alloc, out), "vkAllocateCommandBuffers")
        except BaseException:
            self.finalizer()
            raise
        self.handle = device.address(out[0])


def destroy_recording(device: VulkanDevice, pool: Any, arena: DescriptorArena | None) -> None:
    lib.vkDestroyCommandPool(device.handle, pool, ffi.NULL)  # frees its command buffer too
    device.count_objects("VkCommandPool", -1)
    if arena is not None:
        arena.destroy()
