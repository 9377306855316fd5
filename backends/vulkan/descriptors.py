"""Descriptor sets for devices without push descriptors (or with HAL_VULKAN_DISABLE_PUSH_DESCRIPTOR).

Each recording owns an arena: descriptor pools allocated as needed, one set per dispatch, all freed
together when the recording is retired, so nothing is freed while the GPU may still read it.
"""

from __future__ import annotations

from typing import Any, Protocol

from backends.vulkan.api import FRAGMENTED_POOL, OUT_OF_POOL_MEMORY, SUCCESS, check, ffi, lib, vk

SETS_PER_POOL = 256
DESCRIPTORS_PER_POOL = 2048


class DescriptorDevice(Protocol):
    """What descriptor pools need of their Vulkan device."""

    handle: Any

    def count_objects(self, kind: str, delta: int) -> None: ...


class DescriptorArena:
    __slots__ = ("device", "pools", "info", "layout", "out")

    def __init__(self, device: DescriptorDevice) -> None:
        self.device = device
        self.pools: list[Any] = []
        self.layout = ffi.new("VkDescriptorSetLayout[1]")
        self.info = ffi.new("VkDescriptorSetAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO, "descriptorSetCount": 1,
            "pSetLayouts": self.layout})
        self.out = ffi.new("VkDescriptorSet[1]")

    def write(self, set_layout: Any, words: list[int]) -> int:
        """A new set of `set_layout` holding storage buffers (buffer, offset, range) x n; its handle."""
        self.layout[0] = set_layout
        n = len(words) // 3
        handle = self._allocate(n)
        infos = ffi.new("VkDescriptorBufferInfo[]", [(ffi.cast("VkBuffer", words[3 * i]), words[3 * i + 1],
                                                      words[3 * i + 2]) for i in range(n)])
        write = ffi.new("VkWriteDescriptorSet*", {"sType": vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                                  "dstSet": handle, "descriptorCount": n,
                                                  "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                  "pBufferInfo": infos})
        lib.vkUpdateDescriptorSets(self.device.handle, 1, write, 0, ffi.NULL)
        return int(ffi.cast("uintptr_t", handle))

    def _allocate(self, descriptors: int) -> Any:
        """A set of the layout in `self.layout` (with `descriptors` bindings), from the current pool or a new one."""
        if self.pools:
            self.info.descriptorPool = self.pools[-1]
            result = lib.vkAllocateDescriptorSets(self.device.handle, self.info, self.out)
            if result == SUCCESS:
                return self.out[0]
            if result not in (OUT_OF_POOL_MEMORY, FRAGMENTED_POOL):  # (else a new pool)
                check(result, "vkAllocateDescriptorSets")
        self.info.descriptorPool = self._new_pool(max(DESCRIPTORS_PER_POOL, descriptors))
        check(lib.vkAllocateDescriptorSets(self.device.handle, self.info, self.out), "vkAllocateDescriptorSets")
        return self.out[0]

    def _new_pool(self, descriptors: int) -> Any:
        size = ffi.new("VkDescriptorPoolSize*", {"type": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                                 "descriptorCount": descriptors})
        info = ffi.new("VkDescriptorPoolCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                                       "maxSets": SETS_PER_POOL, "poolSizeCount": 1,
                                                       "pPoolSizes": size})
        out = ffi.new("VkDescriptorPool*")
        check(lib.vkCreateDescriptorPool(self.device.handle, info, ffi.NULL, out), "vkCreateDescriptorPool")
        self.pools.append(out[0])
        self.device.count_objects("VkDescriptorPool", 1)
        return out[0]

    def destroy(self) -> None:
        for pool in self.pools:
            lib.vkDestroyDescriptorPool(self.device.handle, pool, ffi.NULL)
        self.device.count_objects("VkDescriptorPool", -len(self.pools))
        self.pools.clear()
