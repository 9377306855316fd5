from libc.stdint cimport uint32_t

from backends.vulkan.khronos cimport (
    VkBuffer, VkBufferCopy, VkCommandBuffer, VkDescriptorBufferInfo, VkDescriptorSet, VkDeviceSize, VkMemoryBarrier,
    VkPipeline, VkPipelineLayout, VkPipelineStageFlags, VkWriteDescriptorSet,
    PFN_vkCmdBindPipeline, PFN_vkCmdPushDescriptorSetKHR, PFN_vkCmdBindDescriptorSets, PFN_vkCmdPushConstants,
    PFN_vkCmdDispatch, PFN_vkCmdDispatchIndirect, PFN_vkCmdFillBuffer, PFN_vkCmdUpdateBuffer, PFN_vkCmdCopyBuffer,
    PFN_vkCmdPipelineBarrier, PFN_vkQueueSubmit
)


cdef class DeviceCommands:
    cdef PFN_vkCmdBindPipeline bind_pipeline
    cdef PFN_vkCmdPushDescriptorSetKHR push_descriptor_set
    cdef PFN_vkCmdBindDescriptorSets bind_descriptor_sets
    cdef PFN_vkCmdPushConstants push_constants
    cdef PFN_vkCmdDispatch dispatch
    cdef PFN_vkCmdDispatchIndirect dispatch_indirect
    cdef PFN_vkCmdFillBuffer fill_buffer
    cdef PFN_vkCmdUpdateBuffer update_buffer
    cdef PFN_vkCmdCopyBuffer copy_buffer
    cdef PFN_vkCmdPipelineBarrier pipeline_barrier
    cdef PFN_vkQueueSubmit queue_submit
    cdef VkMemoryBarrier memory_barrier
    cdef VkMemoryBarrier indirect_barrier  # a guard's counts, written by a shader, then read as indirect counts
    cdef VkMemoryBarrier host_barrier  # a region's flag, copied, then read by the host
    cdef VkMemoryBarrier fault_barrier  # the guards' fault record, written by shaders, then read by the host


cdef class Calls:
    cdef DeviceCommands fn
    cdef VkCommandBuffer cb
    cdef VkWriteDescriptorSet write

    cdef int bind_pipeline(self, VkPipeline pipeline) except -1
    cdef int push_descriptor_set(self, VkPipelineLayout layout, uint32_t count,
                                 const VkDescriptorBufferInfo* infos) except -1
    cdef int bind_descriptor_set(self, VkPipelineLayout layout, VkDescriptorSet chosen) except -1
    cdef int push_constants(self, VkPipelineLayout layout, uint32_t count, const uint32_t* words) except -1
    cdef int dispatch(self, uint32_t x, uint32_t y, uint32_t z) except -1
    cdef int dispatch_indirect(self, VkBuffer buffer, VkDeviceSize offset) except -1
    cdef int fill_buffer(self, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size, uint32_t word) except -1
    cdef int update_buffer(self, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size, const void* data) except -1
    cdef int copy_buffer(self, VkBuffer source, VkBuffer target, const VkBufferCopy* region) except -1
    cdef int pipeline_barrier(self, VkPipelineStageFlags source, VkPipelineStageFlags target,
                              const VkMemoryBarrier* barrier) except -1
