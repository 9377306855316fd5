from libc.stdint cimport uint32_t
from libc.string cimport memcmp, memcpy, memset
from libcpp.vector cimport vector

from hal.commands cimport DispatchArguments, Range, argument_ranges, argument_words

from backends.vulkan.bound cimport Bound, begin_state, descriptors_differ

from backends.vulkan.khronos cimport (
    VkBuffer, VkBufferCopy, VkCommandBuffer, VkDescriptorBufferInfo, VkDescriptorSet, VkDeviceSize, VkMemoryBarrier,
    VkPipeline, VkPipelineLayout, VkPipelineStageFlags, VkWriteDescriptorSet, VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
    VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, VK_PIPELINE_BIND_POINT_COMPUTE, VK_SHADER_STAGE_COMPUTE_BIT,
    PFN_vkCmdBindPipeline, PFN_vkCmdPushDescriptorSetKHR, PFN_vkCmdBindDescriptorSets, PFN_vkCmdPushConstants,
    PFN_vkCmdDispatch, PFN_vkCmdDispatchIndirect, PFN_vkCmdFillBuffer, PFN_vkCmdUpdateBuffer, PFN_vkCmdCopyBuffer,
    PFN_vkCmdPipelineBarrier, PFN_vkQueueSubmit, PFN_vkCmdBeginConditionalRenderingEXT,
    PFN_vkCmdEndConditionalRenderingEXT
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
    cdef PFN_vkCmdBeginConditionalRenderingEXT begin_conditional  # NULL without VK_EXT_conditional_rendering
    cdef PFN_vkCmdEndConditionalRenderingEXT end_conditional
    cdef VkMemoryBarrier memory_barrier
    cdef VkMemoryBarrier indirect_barrier  # a guard's counts, written by a shader, then read as indirect counts
    cdef VkMemoryBarrier host_barrier  # a region's flag, copied, then read by the host
    cdef VkMemoryBarrier fault_barrier  # the guards' fault record, written by shaders, then read by the host
    cdef VkMemoryBarrier latch_barrier  # a region's flag, written by shaders or transfers, then copied by a shader
    cdef VkMemoryBarrier condition_barrier  # that shader's copy (the latched predicate), then read as the predicate


cdef class Calls:
    cdef DeviceCommands fn
    cdef VkCommandBuffer cb
    cdef Bound* bound  # its command pool's (backends.vulkan.recording.CommandPool)
    # The room `bound` has for descriptors and constants, read once: a worker thread writes `bound` at every dispatch,
    # and the recording thread reading it too would pull its cache line back and forth between their cores.
    cdef size_t most_bindings, most_words
    cdef VkWriteDescriptorSet write

    cdef int make_room(self, const DispatchArguments* arguments) except -1
    cdef int encode(self, VkPipeline pipeline, VkPipelineLayout layout, bint forget, bint dispatch,
                    const DispatchArguments* arguments) except -1
    cdef int bind_descriptor_set(self, VkPipelineLayout layout, VkDescriptorSet chosen) except -1
    cdef int dispatch_indirect(self, VkBuffer buffer, VkDeviceSize offset) except -1
    cdef int fill_buffer(self, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size, uint32_t word) except -1
    cdef int update_buffer(self, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size, const void* data) except -1
    cdef int copy_buffer(self, VkBuffer source, VkBuffer target, const VkBufferCopy* region) except -1
    cdef int pipeline_barrier(self, VkPipelineStageFlags source, VkPipelineStageFlags target,
                              const VkMemoryBarrier* barrier) except -1
    cdef int begin_conditional(self, VkBuffer buffer, VkDeviceSize offset) except -1
    cdef int end_conditional(self) except -1


# Each vkCmd* call with the arguments hal always passes (the compute bind point, set 0, one descriptor write, one
# region, one global barrier), in one place for both callers: `Calls` (in the recording thread) and the call
# stream's worker, which makes them without the GIL.

cdef inline void storage_buffer_write(VkWriteDescriptorSet* write) noexcept nogil:
    """Make `write` the one descriptor write of a push: storage buffers at binding 0 of set 0 (the count and
    descriptors set at each push)."""
    memset(write, 0, sizeof(VkWriteDescriptorSet))
    write.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
    write.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER


cdef inline void cmd_bind_pipeline(DeviceCommands fn, VkCommandBuffer cb, VkPipeline pipeline) noexcept nogil:
    fn.bind_pipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)


cdef inline void cmd_push_descriptor_set(DeviceCommands fn, VkCommandBuffer cb, VkWriteDescriptorSet* write,
                                         VkPipelineLayout layout, uint32_t count,
                                         const VkDescriptorBufferInfo* infos) noexcept nogil:
    """`write`: the caller's storage-buffer write (its type set once), given `count` descriptors at `infos`."""
    write.descriptorCount = count
    write.pBufferInfo = infos
    fn.push_descriptor_set(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, write)


cdef inline void cmd_bind_descriptor_set(DeviceCommands fn, VkCommandBuffer cb, VkPipelineLayout layout,
                                         VkDescriptorSet chosen) noexcept nogil:
    fn.bind_descriptor_sets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &chosen, 0, NULL)


cdef inline void cmd_push_constants(DeviceCommands fn, VkCommandBuffer cb, VkPipelineLayout layout, uint32_t count,
                                    const void* words) noexcept nogil:
    fn.push_constants(cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4 * count, words)


cdef inline void cmd_copy_buffer(DeviceCommands fn, VkCommandBuffer cb, VkBuffer source, VkBuffer target,
                                 const VkBufferCopy* region) noexcept nogil:
    fn.copy_buffer(cb, source, target, 1, region)


cdef inline void cmd_pipeline_barrier(DeviceCommands fn, VkCommandBuffer cb, VkPipelineStageFlags source,
                                      VkPipelineStageFlags target, const VkMemoryBarrier* barrier) noexcept nogil:
    fn.pipeline_barrier(cb, source, target, 0, 1, barrier, 0, NULL, 0, NULL)


# The state Vulkan keeps across dispatches is set only when it changes: Calls (in the recording thread) and the call
# stream's worker both encode a dispatch with these, on the command pool's Bound (backends.vulkan.bound).

cdef inline void encode_dispatch(DeviceCommands fn, VkCommandBuffer cb, VkWriteDescriptorSet* write, Bound* bound,
                                 VkPipeline pipeline, VkPipelineLayout layout, bint forget, bint dispatch,
                                 const DispatchArguments* arguments) noexcept nogil:
    """Set what a dispatch of `pipeline` (`layout`) with `arguments` needs that `bound` does not hold, then make the
    dispatch (`dispatch`; else the caller makes it: a dispatch_indirect). `forget`: the layout is of another kind
    than the last one's, so the descriptors and constants set may be disturbed (VulkanExecutable.compatible)."""
    cdef uint32_t count = arguments.words
    cdef const uint32_t* words = argument_words(<DispatchArguments*>arguments)
    if forget:
        bound.descriptors_set = bound.words_set = False
    if pipeline != bound.pipeline:
        cmd_bind_pipeline(fn, cb, pipeline)
        bound.pipeline = pipeline
        bound.counts.pipelines += 1
    if arguments.bindings and descriptors_differ(bound, argument_ranges(<DispatchArguments*>arguments),
                                                 arguments.bindings):
        cmd_push_descriptor_set(fn, cb, write, layout, arguments.bindings, bound.descriptors.data())
        bound.counts.descriptor_sets += 1
    if count and not (bound.words_set and bound.word_count == count and
                      memcmp(bound.words.data(), words, 4 * count) == 0):
        memcpy(bound.words.data(), words, 4 * count)
        bound.word_count = count
        bound.words_set = True
        cmd_push_constants(fn, cb, layout, count, words)
        bound.counts.constant_pushes += 1
    if dispatch:
        fn.dispatch(cb, arguments.groups[0], arguments.groups[1], arguments.groups[2])
    bound.counts.dispatches += 1
