"""Vulkan buffers: a VkBuffer in device-local memory; the host reads and writes it through staging.

A kernel reads host-visible memory across the bus, far slower than device-local memory on a discrete GPU, so storage
buffers always live in device-local memory and `read`/`write` copy through the device's staging buffer. Every buffer
can be a transfer source and target, for that staging."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from backends.vulkan.api import check, ffi, lib, vk
from backends.vulkan.memory import DEVICE_LOCAL, HOST_VISIBLE, MemoryPool
from hal.buffer import Buffer, BufferUsage
from hal.lifetime import Lifetime

_TRANSFER = vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT


class BufferDevice(Protocol):
    """What buffers need of their Vulkan device."""

    handle: Any
    memory: MemoryPool
    lifetime: Lifetime
    storage_usage: int  # the VkBufferUsageFlags of a DISPATCH_STORAGE buffer (a region's flag is one)

    def address(self, cdata: Any) -> int: ...

    def count_objects(self, kind: str, delta: int) -> None: ...

    def staging_copy(self, buffer: VulkanBuffer, offset: int, host: np.ndarray, to_device: bool) -> None: ...


def create_buffer(device: BufferDevice, nbytes: int, usage_bits: int, required: int, preferred: int = 0,
                  own: bool = False) -> tuple:
    """A VkBuffer of `nbytes` bound to fresh memory (a whole allocation if `own`): (handle, allocation)."""
    info = ffi.new("VkBufferCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, "size": nbytes,
                                           "usage": usage_bits, "sharingMode": vk.VK_SHARING_MODE_EXCLUSIVE})
    out = ffi.new("VkBuffer*")
    check(lib.vkCreateBuffer(device.handle, info, ffi.NULL, out), f"vkCreateBuffer of {nbytes} bytes")
    try:
        allocation = device.memory.bind_buffer(out[0], nbytes, required, preferred, own)
    except BaseException:
        lib.vkDestroyBuffer(device.handle, out[0], ffi.NULL)
        raise
    device.count_objects("VkBuffer", 1)
    return out[0], allocation


def destroy_buffer(device: BufferDevice, handle: Any, allocation: Any) -> None:
    lib.vkDestroyBuffer(device.handle, handle, ffi.NULL)
    device.memory.free(allocation)
    device.count_objects("VkBuffer", -1)


class VulkanBuffer(Buffer):
    """`vk_buffer`: the VkBuffer (cffi), None for an empty buffer; `handle` (hal.Buffer's): it as an integer."""

    __slots__ = ("vk_buffer", "_finalizer")

    def __init__(self, device: BufferDevice, size: int, usage: BufferUsage, indirect: bool = False) -> None:
        """`indirect`: vkCmdDispatchIndirect may read it (hal's own buffers for dispatch_indirect)."""
        super().__init__(device, size, usage)
        self.vk_buffer = None
        self._finalizer = None
        if size:  # Vulkan has no empty buffers; nothing can bind an empty range anyway
            bits = _TRANSFER | (device.storage_usage if usage & BufferUsage.DISPATCH_STORAGE else 0)
            if indirect:
                bits |= vk.VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT
            self.vk_buffer, allocation = create_buffer(device, size, bits, DEVICE_LOCAL)
            self.handle = device.address(self.vk_buffer)
            self._finalizer = device.lifetime.track(self, destroy_buffer, device, self.vk_buffer, allocation)

    def _read(self, offset: int, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, np.uint8)
        if nbytes:
            self.device.staging_copy(self, offset, out, to_device=False)
        return out

    def _write(self, offset: int, data: memoryview) -> None:
        self.device.staging_copy(self, offset, np.frombuffer(data, np.uint8), to_device=True)

    def _free(self) -> None:
        if self._finalizer is not None:
            self._finalizer()


class HostVisibleBuffer(Buffer):
    """A small storage buffer in host-visible, coherent memory, mapped for its life: what hal's own shaders and
    copies write for the host to read without a copy (dispatch_indirect's fault record, regions' flags).
    `words`: its bytes as uint32."""

    __slots__ = ("vk_buffer", "words", "_finalizer")

    def __init__(self, device: BufferDevice, size: int) -> None:
        super().__init__(device, size, BufferUsage.DEFAULT)
        bits = _TRANSFER | vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
        self.vk_buffer, allocation = create_buffer(device, max(size, 4), bits, HOST_VISIBLE, own=True)
        pointer = ffi.new("void**")
        try:
            check(lib.vkMapMemory(device.handle, allocation.memory, allocation.offset, max(size, 4), 0, pointer),
                  "vkMapMemory")
        except BaseException:
            destroy_buffer(device, self.vk_buffer, allocation)
            raise
        self.words = np.frombuffer(ffi.buffer(pointer[0], max(size, 4)), np.uint32)
        self.words[:] = 0
        self.handle = device.address(self.vk_buffer)
        self._finalizer = device.lifetime.track(self, _unmap_and_destroy, device, self.vk_buffer, allocation)

    def _read(self, offset: int, nbytes: int) -> np.ndarray:
        return self.words.view(np.uint8)[offset:offset + nbytes].copy()

    def _write(self, offset: int, data: memoryview) -> None:
        self.words.view(np.uint8)[offset:offset + len(data)] = np.frombuffer(data, np.uint8)

    def _free(self) -> None:
        self._finalizer()


def _unmap_and_destroy(device: BufferDevice, handle: Any, allocation: Any) -> None:
    lib.vkUnmapMemory(device.handle, allocation.memory)
    destroy_buffer(device, handle, allocation)
