"""One encoded VkCommandBuffer with its own VkCommandPool (and, without push descriptors, its descriptor sets).

Each encoding owns its pool while it lives, so retiring one never touches a pool another thread may be
recording into; retired recordings are given back once the GPU is done with them (the device's lifetime), at its
next collect(); those never submitted (a command buffer ended and dropped, or reset, unsubmitted) without a
mark of the queue to wait for.
A pool given back is kept for the next recording (up to KEEP of them): encoding into memory the driver already
holds costs much less than into a fresh pool (on lavapipe, a fresh pool's first pages are page faults: about
1 µs a dispatch of a 1000-dispatch chain, against 0.5 µs reused). Its command buffer is reset by the next
vkBeginCommandBuffer (the pools allow that), not by a call of its own when given back, unless it was let go still
recording (an encoding that failed, a single_pass command buffer reset or dropped before end()): a state
vkBeginCommandBuffer does not accept, so the pool is reset then (a reset on every give-back costs lavapipe's end()
of 10 dispatches about 10%).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from backends.vulkan.api import check, ffi, lib, vk
from backends.vulkan.descriptors import DescriptorArena

if TYPE_CHECKING:
    from backends.vulkan.device import VulkanDevice

KEEP = 16  # reset pools a device keeps for reuse


class CommandPools:
    """A device's VkCommandPools, each with its one VkCommandBuffer: handed out to recordings, given back.
    `cached` is how many wait for reuse now (at most KEEP); `in_use` how many recordings hold (the device's
    live_objects counts those)."""

    def __init__(self, device: VulkanDevice) -> None:
        self.device = device
        self.free: list[tuple[Any, int]] = []  # (VkCommandPool, VkCommandBuffer as an integer)
        self.in_use = 0
        self.lock = threading.Lock()

    @property
    def cached(self) -> int:
        return len(self.free)

    def take(self) -> tuple[Any, int]:
        """A pool and its command buffer, ready to begin: a kept one, or a new one."""
        if not self.free:
            self.device.lifetime.collect()  # recordings the GPU is done with may give theirs back
        with self.lock:  # one lock a call: taking a lock costs as much as the rest of take()
            kept = self.free.pop() if self.free else None
            self.in_use += 1
        if kept is None:
            try:
                kept = self._create()
            except BaseException:
                with self.lock:
                    self.in_use -= 1
                raise
        return kept

    def give(self, pool: Any, command_buffer: int, recording: bool = False) -> None:
        """Take back a pool whose command buffer the GPU is done with: kept, or destroyed beyond KEEP. `recording`:
        its command buffer was let go still recording, a state vkBeginCommandBuffer does not accept: reset first
        (destroyed if that fails)."""
        reusable = not recording or lib.vkResetCommandPool(self.device.handle, pool, 0) == vk.VK_SUCCESS
        with self.lock:
            self.in_use -= 1
            if reusable and len(self.free) < KEEP:
                self.free.append((pool, command_buffer))
                return
        lib.vkDestroyCommandPool(self.device.handle, pool, ffi.NULL)  # frees its command buffer too

    def close(self) -> None:
        with self.lock:
            free, self.free = self.free, []
        for pool, _ in free:
            lib.vkDestroyCommandPool(self.device.handle, pool, ffi.NULL)

    def _create(self) -> tuple[Any, int]:
        device = self.device
        info = ffi.new("VkCommandPoolCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                                    "flags": vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                                    "queueFamilyIndex": device.physical.queue_family})
        pool = ffi.new("VkCommandPool*")
        check(lib.vkCreateCommandPool(device.handle, info, ffi.NULL, pool), "vkCreateCommandPool")
        alloc = ffi.new("VkCommandBufferAllocateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, "commandPool": pool[0],
            "level": vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, "commandBufferCount": 1})
        out = ffi.new("VkCommandBuffer*")
        try:
            check(lib.vkAllocateCommandBuffers(device.handle, alloc, out), "vkAllocateCommandBuffers")
        except BaseException:
            lib.vkDestroyCommandPool(device.handle, pool[0], ffi.NULL)
            raise
        return pool[0], device.address(out[0])


class Recording:
    """`handle`: the VkCommandBuffer as an integer; `arena`: its descriptor sets (None with push descriptors).
    `submitted`: a queue may have it (set before its first submission). `state.recording`: it began and has not
    ended (the emitter sets it). `release()`, or its collection, retires it: given back at a collect() once the queue
    is done with it, or, never submitted, at the next collect()."""

    __slots__ = ("handle", "arena", "submitted", "state", "_release", "__weakref__")

    def __init__(self, device: VulkanDevice, submitted: bool = True) -> None:
        self.submitted = True  # until tracked: __del__ has nothing to let go
        pool, self.handle = device.command_pools.take()
        try:
            self.arena = None if device.push_descriptors else DescriptorArena(device)
        except BaseException:
            device.command_pools.give(pool, self.handle)
            raise
        self.state = RecordingState()
        self._release = device.lifetime.track(self, retire_recording, device, pool, self.handle, self.arena,
                                              self.state)
        self.submitted = submitted

    def release(self) -> None:
        if self.submitted:
            self._release()
        else:
            self._release.unused()

    def __del__(self) -> None:
        if not self.submitted:  # (its collection as part of a cycle may reach the lifetime first: then it waits)
            self._release.unused()


class RecordingState:
    """What a Recording's retirement reads when it runs: the lifetime keeps it, not the Recording, which it must
    not keep alive."""

    __slots__ = ("recording",)

    def __init__(self) -> None:
        self.recording = False


def retire_recording(device: VulkanDevice, pool: Any, handle: int, arena: DescriptorArena | None,
                     state: RecordingState) -> None:
    device.command_pools.give(pool, handle, state.recording)
    if arena is not None:
        arena.destroy()
