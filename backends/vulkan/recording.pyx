"""One encoded VkCommandBuffer with its own VkCommandPool (and, without push descriptors, descriptor sets) (compiled).

Each encoding owns its pool while it lives, so retiring one never touches a pool another thread may be
recording into. A pool given back is kept for the next recording (up to KEEP of them): encoding into memory the
driver already holds costs much less than into a fresh pool (on lavapipe, a fresh pool's first pages are page
faults). Its command buffer is reset by the
next vkBeginCommandBuffer (the pools allow that), not by a call of its own when given back, unless it was let go
still recording (an encoding that failed, a single_pass command buffer reset or dropped before end()): a state
vkBeginCommandBuffer does not accept, so the pool is reset then (a reset on every give-back would cost every
end() a driver call). Calls for a single_pass command buffer's VkCommandBuffer may still wait in the device's
call stream (backends.vulkan.call_stream) when it is let go: take() and give() drain the stream before they reset or
destroy a pool let go recording, and the device closes the stream before the pools.

When its pool goes back:
- A recording a queue may hold (handed to a submission, or made for one) is tracked by the device's lifetime:
  let go, its pool goes back at a collect() once the queue is done with it. So is one with descriptor sets, whose
  arena is plain Python and is destroyed only there.
- One never submitted, without descriptor sets, gives its pool back the moment it is let go (end() of a command
  buffer that is dropped unsubmitted costs no trip through the lifetime). Let go by its collection, that give-back
  may run inside the garbage collector, in any thread, while that thread holds any lock, the driver's own included
  (the collector may run inside the validation layer's message callback): it takes no lock, calls no Python code and
  calls no driver function (a pool to reset, or beyond KEEP, waits in the kept list for the next take()), so it
  cannot deadlock, and holding the GIL from start to end it cannot interleave with take() or close().
"""

cimport cython
from libc.stdint cimport uintptr_t
from libc.string cimport memset

from backends.vulkan.bound cimport begin_state
from backends.vulkan.driver_calls cimport check, entry
from backends.vulkan.khronos cimport (
    VkCommandBufferAllocateInfo, VkCommandBufferBeginInfo, VkCommandPoolCreateInfo, PFN_vkAllocateCommandBuffers,
    PFN_vkBeginCommandBuffer, PFN_vkCreateCommandPool, PFN_vkDestroyCommandPool, PFN_vkEndCommandBuffer,
    PFN_vkResetCommandPool, VK_COMMAND_BUFFER_LEVEL_PRIMARY, VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
    VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
    VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, VK_SUCCESS
)

from backends.vulkan.descriptors import DescriptorArena
from hal.errors import DeviceError

KEEP = 16  # reset pools a device keeps for reuse


@cython.auto_pickle(False)  # (nor copied: a copy would be a second owner of the pool)
cdef class CommandPool:
    """A VkCommandPool and its one VkCommandBuffer: what a Recording holds, and the lifetime after it until the queue
    is done with it. `arena`: the recording's descriptor sets (None with push descriptors); `recording`: its command
    buffer began and has not ended (Recording.begin and end note it)."""

    @property
    def handle(self) -> int:
        """The VkCommandBuffer, as an integer."""
        return <uintptr_t>self.command_buffer


@cython.auto_pickle(False)
cdef class CommandPools:
    """A device's VkCommandPools (CommandPool each): handed out to recordings, given back. `cached` is how many wait
    for reuse now (at most KEEP, but for those the collector gave back since the last take()); `in_use` how many
    recordings (or the lifetime, for them) hold (the device's live_objects counts those)."""

    def __init__(self, device, uintptr_t handle, unsigned queue_family, stream):
        self.device = device
        self.stream = stream
        self.handle = <VkDevice>handle
        self.queue_family = queue_family
        # What a dispatch may need (a worker encoding on the Bound cannot make room): with push descriptors, at most
        # 64 bindings (VulkanDevice); without, the recording thread makes room as it encodes (Calls.encode).
        self.most_bindings = device.capabilities.max_per_stage_descriptor_storage_buffer if device.push_descriptors \
            else 0
        self.most_words = device.capabilities.max_push_constants_size // 4
        self.create_pool = <PFN_vkCreateCommandPool>entry(self.handle, b"vkCreateCommandPool")
        self.destroy_pool = <PFN_vkDestroyCommandPool>entry(self.handle, b"vkDestroyCommandPool")
        self.reset_pool = <PFN_vkResetCommandPool>entry(self.handle, b"vkResetCommandPool")
        self.allocate = <PFN_vkAllocateCommandBuffers>entry(self.handle, b"vkAllocateCommandBuffers")
        self.begin = <PFN_vkBeginCommandBuffer>entry(self.handle, b"vkBeginCommandBuffer")
        self.end = <PFN_vkEndCommandBuffer>entry(self.handle, b"vkEndCommandBuffer")
        self.free = []  # kept for reuse
        self.alive = set()  # every pool made and not destroyed: kept, held, or waiting for the queue
        self.closed = False

    @property
    def cached(self) -> int:
        return len(self.free)

    @property
    def in_use(self) -> int:
        return len(self.alive) - len(self.free)

    cdef CommandPool take(self):
        """A pool whose command buffer is ready to begin: a kept one (reset first if it was let go recording), or a
        new one. Kept pools beyond KEEP (given back by the collector) are destroyed here."""
        cdef CommandPool kept
        if self.closed:
            self.device.check_open()
            raise DeviceError("this Vulkan device is closed; create a new one")
        if not self.free:
            self.device.lifetime.collect()  # recordings the GPU is done with may give theirs back
        while len(self.free) > KEEP:
            kept = self.free.pop(0)
            if kept.recording:
                self.stream.drain()  # calls for the command buffer of a pool let go recording may wait in the stream
            self.destroy(kept)
        while self.free:
            kept = self.free.pop()
            if not kept.recording or self.reset(kept):
                return kept
        return self.create()

    cdef bint reset(self, CommandPool kept) except -1:
        """Ready a pool let go still recording for its next vkBeginCommandBuffer: once the stream made the calls for
        its command buffer that may still wait there, reset it (destroyed if that fails). Is it still there?"""
        self.stream.drain()
        kept.recording = False
        if self.reset_pool(self.handle, kept.pool, 0) == VK_SUCCESS:
            return True
        self.destroy(kept)
        return False

    cdef void give(self, CommandPool kept, bint collecting=False) except *:
        """Take back a pool no recording and no queue uses any more: kept, or destroyed beyond KEEP; one let go
        still recording is reset first (destroyed if that fails). Its arena, if any, is destroyed. Nothing happens
        once closed (close() destroyed it). `collecting`: a finalizer gives it back, where no driver function may be
        called (see the module's docstring): it is kept as it is, and take() resets it or destroys it."""
        arena, kept.arena = kept.arena, None
        if self.closed or kept.pool == NULL:
            return
        if collecting:
            self.free.append(kept)
            return
        if kept.recording:
            self.reset(kept)
        if kept.pool != NULL:
            if len(self.free) < KEEP:
                self.free.append(kept)
            else:
                self.destroy(kept)
        if arena is not None:
            arena.destroy()

    def retire(self, CommandPool kept) -> None:
        """The lifetime's destroy of a tracked recording's pool (see give)."""
        self.give(kept)

    cdef void destroy(self, CommandPool kept) noexcept:
        self.destroy_pool(self.handle, kept.pool, NULL)  # frees its command buffer too
        kept.pool = NULL
        self.alive.discard(kept)

    cdef CommandPool create(self):
        cdef VkCommandPoolCreateInfo info
        cdef VkCommandBufferAllocateInfo allocate
        cdef CommandPool made = CommandPool.__new__(CommandPool)
        made.bound.descriptors.resize(self.most_bindings)
        made.bound.words.resize(self.most_words)
        info.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO
        info.pNext = NULL
        info.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT
        info.queueFamilyIndex = self.queue_family
        check(self.create_pool(self.handle, &info, NULL, &made.pool), "vkCreateCommandPool")
        allocate.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO
        allocate.pNext = NULL
        allocate.commandPool = made.pool
        allocate.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY
        allocate.commandBufferCount = 1
        try:
            check(self.allocate(self.handle, &allocate, &made.command_buffer), "vkAllocateCommandBuffers")
        except BaseException:
            self.destroy_pool(self.handle, made.pool, NULL)
            raise
        self.alive.add(made)
        return made

    def close(self) -> None:
        """Destroy every pool, kept or held (the device waited for its queue; the lifetime gave back what it held
        first). Pools given back later are left alone."""
        self.closed = True
        alive, self.alive, self.free = self.alive, set(), []
        for kept in alive:
            self.destroy_pool(self.handle, (<CommandPool>kept).pool, NULL)
            (<CommandPool>kept).pool = NULL


@cython.auto_pickle(False)
cdef class Recording:
    """A VkCommandBuffer to encode into, with the pool it came from (`pool`; `handle` is the VkCommandBuffer as an
    integer, `arena` its descriptor sets, None with push descriptors). `submitted`: a queue may have it
    (mark_submitted() before its first submission; made with submitted=True, it is from the start). release(), or
    its collection, lets it go (see the module's docstring for when its pool goes back)."""

    def __init__(self, device, bint submitted=True):
        self.pools = <CommandPools?>device.command_pools
        self.pool = self.pools.take()
        if not device.push_descriptors:
            try:
                self.pool.arena = DescriptorArena(device)
            except BaseException:
                self.pools.give(self.pool)
                self.released = True
                raise
            self.track()
        if submitted:
            self.mark_submitted()

    @property
    def handle(self) -> int:
        return <uintptr_t>self.pool.command_buffer

    @property
    def arena(self):
        return self.pool.arena

    cpdef void begin(self, unsigned flags) except *:
        """vkBeginCommandBuffer with usage `flags`. Until end(), its pool is noted recording: let go before, it is
        reset before its next use."""
        cdef VkCommandBufferBeginInfo info
        memset(&info, 0, sizeof(info))
        info.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
        info.flags = flags
        self.pool.recording = True  # from before the call: a failed begin leaves nothing a reset would not clear
        begin_state(&self.pool.bound)  # (no call for this command buffer waits in the stream: see CommandPools.take)
        check(self.pools.begin(self.pool.command_buffer, &info), "vkBeginCommandBuffer")

    cpdef void end(self) except *:
        """vkEndCommandBuffer."""
        check(self.pools.end(self.pool.command_buffer), "vkEndCommandBuffer")
        self.pool.recording = False

    cdef void track(self) except *:
        self.tracked = self.pools.device.lifetime.track(self, self.pools.retire, self.pool)

    cpdef void mark_submitted(self) except *:
        """From now a queue may hold it: let go, its pool waits for the work submitted until then."""
        if self.submitted:
            return
        if self.released:
            raise DeviceError("a released Vulkan recording cannot be submitted")
        if self.tracked is None:
            self.track()
        self.submitted = True

    cpdef void release(self) except *:
        self.let_go(False)

    cdef void let_go(self, bint collecting) except *:
        """release(); `collecting`: from its finalizer (see CommandPools.give)."""
        if self.released or self.pool is None:  # (None: its making failed)
            return
        self.released = True
        if self.tracked is None:
            self.pools.give(self.pool, collecting)
        elif self.submitted:
            self.tracked()
        else:
            self.tracked.unused()

    def __del__(self):
        # A tracked recording never submitted goes back unused, unless the lifetime's weak reference was cleared first
        # (a reference cycle): then it waits for the queue, which costs only time.
        if not self.submitted:
            self.let_go(True)
