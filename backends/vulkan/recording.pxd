from libc.stdint cimport uintptr_t

from backends.vulkan.bound cimport Bound
from backends.vulkan.khronos cimport (
    VkCommandBuffer, VkCommandPool, VkDevice, PFN_vkAllocateCommandBuffers, PFN_vkBeginCommandBuffer,
    PFN_vkCreateCommandPool, PFN_vkDestroyCommandPool, PFN_vkEndCommandBuffer, PFN_vkResetCommandPool
)


cdef class CommandPool:
    cdef VkCommandPool pool  # NULL once destroyed
    cdef VkCommandBuffer command_buffer
    cdef Bound bound  # what its command buffer holds (backends.vulkan.calls): outlives any call for it in the stream
    cdef public object arena
    cdef public bint recording


cdef class CommandPools:
    cdef object device
    cdef VkDevice handle
    cdef unsigned queue_family
    cdef size_t most_bindings, most_words  # the device's limits, for each pool's Bound
    cdef object stream  # the device's CallStream (backends.vulkan.call_stream)
    cdef PFN_vkCreateCommandPool create_pool
    cdef PFN_vkDestroyCommandPool destroy_pool
    cdef PFN_vkResetCommandPool reset_pool
    cdef PFN_vkAllocateCommandBuffers allocate
    cdef PFN_vkBeginCommandBuffer begin
    cdef PFN_vkEndCommandBuffer end
    cdef list free
    cdef set alive
    cdef bint closed

    cdef CommandPool take(self)
    cdef bint reset(self, CommandPool kept) except -1
    cdef void give(self, CommandPool kept, bint collecting=*) except *
    cdef void destroy(self, CommandPool kept) noexcept
    cdef CommandPool create(self)


cdef class Recording:
    cdef readonly CommandPool pool
    cdef CommandPools pools
    cdef object tracked
    cdef readonly bint submitted
    cdef bint released
    cdef object __weakref__

    cpdef void begin(self, unsigned flags) except *
    cpdef void end(self) except *
    cpdef void mark_submitted(self) except *
    cpdef void release(self) except *
    cdef void let_go(self, bint collecting) except *
    cdef void track(self) except *
