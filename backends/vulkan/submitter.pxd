from libc.stdint cimport uint64_t, uintptr_t
from libcpp.vector cimport vector

from backends.vulkan.calls cimport DeviceCommands
from backends.vulkan.khronos cimport VkCommandBuffer, VkPipelineStageFlags, VkQueue, VkSemaphore


cdef class Submitter:
    cdef DeviceCommands fn
    cdef readonly uint64_t submitted
    cdef VkQueue queue
    cdef VkSemaphore timeline
    cdef vector[VkSemaphore] wait_semaphores, signal_semaphores
    cdef vector[uint64_t] wait_values, signal_values
    cdef vector[VkPipelineStageFlags] wait_stages
    cdef VkCommandBuffer cb

    cpdef uint64_t submit(self, uintptr_t command_buffer, tuple waits=*, tuple signals=*) except? 0
