"""Device memory: pooled sub-allocation, dedicated allocations, and the accounting the leak tests read.

Drivers cap the number of VkDeviceMemory objects (maxMemoryAllocationCount, 4096 on many GPUs), so
small buffers are carved out of large blocks; big ones, and those the driver asks to own their
memory, get an allocation of their own. An empty block is returned to the driver, except one spare
per memory type, so a program that allocates and frees one small buffer in a loop does not thrash.
"""

from __future__ import annotations

import bisect
import os
import threading
from typing import Any

from backends.vulkan.api import check, ffi, lib, vk
from hal.errors import OutOfMemoryError

BLOCK_SIZE = 64 << 20
DEVICE_LOCAL = vk.VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT
HOST_VISIBLE = vk.VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | vk.VK_MEMORY_PROPERTY_HOST_COHERENT_BIT
HOST_CACHED = vk.VK_MEMORY_PROPERTY_HOST_CACHED_BIT


class Allocation:
    """A range of one VkDeviceMemory: a piece of a pooled block, or a whole allocation (block None)."""

    __slots__ = ("memory", "offset", "size", "block", "type_index")

    def __init__(self, memory: Any, offset: int, size: int, block: Block | None, type_index: int) -> None:
        self.memory, self.offset, self.size, self.block, self.type_index = memory, offset, size, block, type_index


class Block:
    """One VkDeviceMemory carved up first-fit; `free` holds sorted, coalesced (offset, size) holes."""

    __slots__ = ("memory", "size", "starts", "sizes", "used")

    def __init__(self, memory: Any, size: int) -> None:
        self.memory, self.size = memory, size
        self.starts, self.sizes = [0], [size]
        self.used = 0

    def take(self, size: int, alignment: int) -> int | None:
        for i, (start, hole) in enumerate(zip(self.starts, self.sizes)):
            aligned = -(-start // alignment) * alignment
            if aligned + size <= start + hole:
                rest = start + hole - aligned - size
                pieces = ([(start, aligned - start)] if aligned > start else []) + \
                         ([(aligned + size, rest)] if rest else [])
                self.starts[i:i + 1] = [s for s, _ in pieces]
                self.sizes[i:i + 1] = [n for _, n in pieces]
                self.used += size
                return aligned
        return None

    def give(self, offset: int, size: int) -> None:
        self.used -= size
        i = bisect.bisect(self.starts, offset)
        if i < len(self.starts) and offset + size == self.starts[i]:  # merge with the hole after
            size += self.sizes[i]
            del self.starts[i], self.sizes[i]
        if i and self.starts[i - 1] + self.sizes[i - 1] == offset:  # and with the hole before
            self.sizes[i - 1] += size
        else:
            self.starts.insert(i, offset)
            self.sizes.insert(i, size)


class MemoryPool:
    """Allocates memory for buffers of one VkDevice; counts what it holds. Safe to call from any thread."""

    def __init__(self, device: Any, physical: Any, max_allocations: int, max_allocation_size: int) -> None:
        self.device = device
        self.props = ffi.new("VkPhysicalDeviceMemoryProperties*")
        lib.vkGetPhysicalDeviceMemoryProperties(physical, self.props)
        self.max_allocations = max_allocations
        self.max_allocation_size = max_allocation_size
        self.dedicated_allowed = not os.environ.get("HAL_VULKAN_DISABLE_DEDICATED_ALLOCATION")
        self.blocks: dict[int, list[Block]] = {}
        self.allocations = 0  # VkDeviceMemory objects alive
        self.allocated_bytes = 0  # their total size
        self.used_bytes = 0  # bytes handed out to buffers
        self.lock = threading.RLock()

    def memory_type(self, type_bits: int, required: int, preferred: int = 0) -> int:
        """The first memory type allowed by `type_bits` with `required` (and `preferred`, if any has it)."""
        types = self.props.memoryTypes
        allowed = [i for i in range(self.props.memoryTypeCount)
                   if type_bits >> i & 1 and types[i].propertyFlags & required == required]
        if not allowed:
            raise OutOfMemoryError(f"the device has no memory type with properties 0x{required:x} for this buffer")
        best = [i for i in allowed if types[i].propertyFlags & preferred == preferred]
        return (best or allowed)[0]

    def heap_size(self, type_index: int) -> int:
        return int(self.props.memoryHeaps[self.props.memoryTypes[type_index].heapIndex].size)

    def bind_buffer(self, buffer: Any, nbytes: int, required: int, preferred: int = 0, own: bool = False) -> Allocation:
        """Memory for `buffer` (a VkBuffer of `nbytes`), bound to it; a whole allocation if `own`."""
        with self.lock:
            return self._bind_buffer(buffer, required, preferred, own)

    def _bind_buffer(self, buffer: Any, required: int, preferred: int, own: bool) -> Allocation:
        info = ffi.new("VkBufferMemoryRequirementsInfo2*", {
            "sType": vk.VK_STRUCTURE_TYPE_BUFFER_MEMORY_REQUIREMENTS_INFO_2, "buffer": buffer})
        dedicated = ffi.new("VkMemoryDedicatedRequirements*",
                            {"sType": vk.VK_STRUCTURE_TYPE_MEMORY_DEDICATED_REQUIREMENTS})
        reqs = ffi.new("VkMemoryRequirements2*",
                       {"sType": vk.VK_STRUCTURE_TYPE_MEMORY_REQUIREMENTS_2, "pNext": dedicated})
        lib.vkGetBufferMemoryRequirements2(self.device, info, reqs)
        r = reqs.memoryRequirements
        size, alignment = int(r.size), int(r.alignment)
        type_index = self.memory_type(r.memoryTypeBits, required, preferred)
        dedicate = dedicated.requiresDedicatedAllocation or (dedicated.prefersDedicatedAllocation
                                                             and self.dedicated_allowed)
        if dedicate or own or size > BLOCK_SIZE // 4:
            alloc = Allocation(self._allocate(size, type_index, buffer if dedicate else None), 0, size, None,
                               type_index)
        else:
            alloc = self._suballocate(size, alignment, type_index)
        self.used_bytes += size
        try:
            check(lib.vkBindBufferMemory(self.device, buffer, alloc.memory, alloc.offset), "vkBindBufferMemory")
        except BaseException:
            self._free(alloc)
            raise
        return alloc

    def _suballocate(self, size: int, alignment: int, type_index: int) -> Allocation:
        blocks = self.blocks.setdefault(type_index, [])
        for block in blocks:
            offset = block.take(size, alignment)
            if offset is not None:
                return Allocation(block.memory, offset, size, block, type_index)
        block_size = min(BLOCK_SIZE, max(size, self.heap_size(type_index) // 8))
        block = Block(self._allocate(block_size, type_index, None), block_size)
        blocks.append(block)
        return Allocation(block.memory, block.take(size, alignment), size, block, type_index)

    def _allocate(self, size: int, type_index: int, dedicated_buffer: Any) -> Any:
        heap = self.heap_size(type_index)
        if size > heap or size > self.max_allocation_size:
            raise OutOfMemoryError(f"cannot allocate {size} bytes: the memory heap holds {heap} and one allocation "
                                   f"may hold at most {self.max_allocation_size}")
        if self.allocations >= self.max_allocations:
            raise OutOfMemoryError(f"the device allows {self.max_allocations} memory allocations and all are in use")
        dedicated = ffi.new("VkMemoryDedicatedAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO, "buffer": dedicated_buffer}) \
            if dedicated_buffer is not None else ffi.NULL
        info = ffi.new("VkMemoryAllocateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, "pNext": dedicated,
                                                 "allocationSize": size, "memoryTypeIndex": type_index})
        out = ffi.new("VkDeviceMemory*")
        check(lib.vkAllocateMemory(self.device, info, ffi.NULL, out), f"vkAllocateMemory of {size} bytes")
        self.allocations += 1
        self.allocated_bytes += size
        return out[0]

    def free(self, alloc: Allocation) -> None:
        """Give `alloc` back (its buffer must be destroyed, or about to be, and idle on the device)."""
        with self.lock:
            self._free(alloc)

    def _free(self, alloc: Allocation) -> None:
        self.used_bytes -= alloc.size
        block = alloc.block
        if block is None:
            self._release(alloc.memory, alloc.size)
            return
        block.give(alloc.offset, alloc.size)
        if not block.used:
            blocks = self.blocks[alloc.type_index]
            if sum(1 for b in blocks if not b.used) > 1:  # keep one empty block as a spare
                blocks.remove(block)
                self._release(block.memory, block.size)

    def _release(self, memory: Any, size: int) -> None:
        lib.vkFreeMemory(self.device, memory, ffi.NULL)
        self.allocations -= 1
        self.allocated_bytes -= size

    def close(self) -> None:
        with self.lock:
            for blocks in self.blocks.values():
                for block in blocks:
                    self._release(block.memory, block.size)
            self.blocks.clear()

    def stats(self) -> dict[str, int]:
        with self.lock:
            return {"allocations": self.allocations, "allocated_bytes": self.allocated_bytes,
                    "used_bytes": self.used_bytes, "blocks": sum(len(b) for b in self.blocks.values())}
