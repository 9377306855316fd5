"""Descriptor sets for devices without push descriptors (or with HAL_VULKAN_DISABLE_PUSH_DESCRIPTOR).

Each recording owns an arena: descriptor pools allocated as needed, one set per dispatch, all freed
together when the recording is retired, so nothing is freed while the GPU may still read it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from backends.vulkan.api import check, ffi, lib, vk

if TYPE_CHECKING:
    from backends.vulkan.device import VulkanDevice

SETS_PER_POOL = 256
DESCRIPTORS_PER_POOL = 2048


class DescriptorArena:
    __slots__ = ("device", "pools", "info", "layout", "last")

    def __init__(self, device: VulkanDevice) -> None:
        self.device = device
        self.pools: list[Any] = []
        self.layout = ffi.new("VkDescriptorSetLayout[1]")
        self.info = ffi.new("VkDescriptorSetAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorSetCount": 1,
            "pSetLayouts": self.layout})
        self.last = ffi.new("VkDescriptorSet[1]")

    def allocate(self, set_layout: Any) -> Any:
        """A set of `set_layout` (also left in `last`), from the current pool or a new one."""
        self.layout[0] = set_layout
        if self.pools:
            self.info.descriptorPool = self.pools[-1]
            result = lib.vkAllocateDescriptorSets(self.device.handle, self.info, self.last)
            if result == vk.VK_SUCCESS:
                return self.last[0]
            if result not in (vk.VK_ERROR_OUT_OF_POOL_MEMORY, vk.VK_ERROR_FRAGMENTED_POOL):
                check(result, "vkAllocateDescriptorSets")
        self.info.descriptorPool = self._new_pool()
        check(lib.vkAllocateDescriptorSets(self.device.handle, self.info, self.last), "vkAllocateDescriptorSets")
        return self.last[0]

    def _new_pool(self) -> Any:
        size = ffi.new("VkDescriptorPoolSize*", {"type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 "descriptorCount": DESCRIPTORS_PER_POOL})
        info = ffi.new("VkDescriptorPoolCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                                       "maxSets": SETS_PER_POOL, "poolSizeCount": 1,
                                                       "pPoolSizes": size})
        out = ffi.new("VkDescriptorPool*")
        check(lib.vkCreateDescriptorPool(self.device.handle, info, ffi.NULL, out), "vkCreateDescriptorPool")
        self.pools.append(out[0])
        self.device._count("VkDescriptorPool", 1)
        return out[0]

    def destroy(self) -> None:
        for pool in self.pools:
            lib.vkDestroyDescriptorPool(self.device.handle, pool, ffi.NULL)
        self.device._count("VkDescriptorPool", -len(self.pools))
        self.pools.clear()
