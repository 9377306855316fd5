"""bench.vulkan's compiled reference: the vkCmd* calls hal's Vulkan encoder makes for a run of dispatches of one
pipeline (bind it once, push the constants once, push each dispatch's descriptors, a barrier where the Program
puts one), and the vkQueueSubmit of a recorded command buffer, through the driver's entry points with nothing of
hal's in between. The floor of what hal's Vulkan backend does at end() and at a resubmission. For bench.nested, the
same run recorded into a secondary command buffer, and a primary one that executes secondaries (the alternative
to encoding a nested command buffer's commands inline)."""

from libc.stdint cimport uint32_t, uint64_t, uintptr_t
from libc.string cimport memset
from libcpp.vector cimport vector

from backends.vulkan.khronos cimport (
    PFN_vkBeginCommandBuffer, PFN_vkCmdBindPipeline, PFN_vkCmdDispatch, PFN_vkCmdPipelineBarrier,
    PFN_vkCmdExecuteCommands, PFN_vkCmdPushConstants, PFN_vkCmdPushDescriptorSetKHR, PFN_vkEndCommandBuffer,
    PFN_vkQueueSubmit,
    VK_ACCESS_SHADER_READ_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_ACCESS_TRANSFER_READ_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
    VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, VK_PIPELINE_BIND_POINT_COMPUTE,
    VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
    VK_SHADER_STAGE_COMPUTE_BIT, VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
    VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO, VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    VK_STRUCTURE_TYPE_SUBMIT_INFO, VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
    VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, VK_SUCCESS, VkBuffer, VkCommandBuffer, VkCommandBufferBeginInfo,
    VkCommandBufferInheritanceInfo, VkDescriptorBufferInfo, VkDevice, VkMemoryBarrier, VkPipeline, VkPipelineLayout, VkPipelineStageFlags, VkQueue,
    VkResult, VkSemaphore, VkSubmitInfo, VkTimelineSemaphoreSubmitInfo, VkWriteDescriptorSet, vkGetDeviceProcAddr)

STAGES = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT


cdef void _check(VkResult result, str what) except *:
    if result != VK_SUCCESS:
        raise RuntimeError(f"{what} failed: VkResult {result}")


cdef class Reference:
    """The entry points of one VkDevice (which must have push descriptors)."""

    cdef PFN_vkBeginCommandBuffer begin
    cdef PFN_vkEndCommandBuffer end
    cdef PFN_vkCmdBindPipeline bind_pipeline
    cdef PFN_vkCmdPushConstants push_constants
    cdef PFN_vkCmdPushDescriptorSetKHR push_descriptor_set
    cdef PFN_vkCmdDispatch dispatch
    cdef PFN_vkCmdPipelineBarrier pipeline_barrier
    cdef PFN_vkQueueSubmit queue_submit
    cdef PFN_vkCmdExecuteCommands execute_commands
    cdef VkMemoryBarrier barrier

    def __init__(self, uintptr_t device):
        cdef VkDevice d = <VkDevice>device
        self.begin = <PFN_vkBeginCommandBuffer>vkGetDeviceProcAddr(d, b"vkBeginCommandBuffer")
        self.end = <PFN_vkEndCommandBuffer>vkGetDeviceProcAddr(d, b"vkEndCommandBuffer")
        self.bind_pipeline = <PFN_vkCmdBindPipeline>vkGetDeviceProcAddr(d, b"vkCmdBindPipeline")
        self.push_constants = <PFN_vkCmdPushConstants>vkGetDeviceProcAddr(d, b"vkCmdPushConstants")
        self.push_descriptor_set = <PFN_vkCmdPushDescriptorSetKHR>vkGetDeviceProcAddr(d, b"vkCmdPushDescriptorSetKHR")
        self.dispatch = <PFN_vkCmdDispatch>vkGetDeviceProcAddr(d, b"vkCmdDispatch")
        self.pipeline_barrier = <PFN_vkCmdPipelineBarrier>vkGetDeviceProcAddr(d, b"vkCmdPipelineBarrier")
        self.queue_submit = <PFN_vkQueueSubmit>vkGetDeviceProcAddr(d, b"vkQueueSubmit")
        self.execute_commands = <PFN_vkCmdExecuteCommands>vkGetDeviceProcAddr(d, b"vkCmdExecuteCommands")
        if self.push_descriptor_set == NULL:
            raise RuntimeError("the device has no vkCmdPushDescriptorSetKHR")
        memset(&self.barrier, 0, sizeof(self.barrier))
        self.barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER
        self.barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT
        self.barrier.dstAccessMask = (VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                      VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT)

    def record(self, uintptr_t command_buffer, uintptr_t pipeline, uintptr_t layout, const uint64_t[:] infos,
               Py_ssize_t bindings, const unsigned char[:] barriers, uint32_t constant, tuple groups,
               bint secondary=False) -> None:
        """Dispatch i pushes the `bindings` descriptors infos[3 * bindings * i:] ((VkBuffer, offset, range) each),
        after a barrier if barriers[i]; one constant, the same workgroup counts for all. `secondary`: the command
        buffer is a secondary one (it inherits nothing)."""
        cdef VkCommandBuffer cb = <VkCommandBuffer>command_buffer
        cdef VkPipelineLayout pipeline_layout = <VkPipelineLayout>layout
        cdef VkCommandBufferInheritanceInfo inheritance
        cdef VkCommandBufferBeginInfo begin
        cdef VkWriteDescriptorSet write
        cdef vector[VkDescriptorBufferInfo] descriptors
        cdef uint32_t x, y, z
        x, y, z = groups
        cdef Py_ssize_t i, j, n = barriers.shape[0]
        descriptors.resize(bindings)
        memset(&begin, 0, sizeof(begin))
        begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
        begin.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT
        memset(&inheritance, 0, sizeof(inheritance))
        inheritance.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO
        if secondary:
            begin.pInheritanceInfo = &inheritance
        memset(&write, 0, sizeof(write))
        write.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
        write.descriptorCount = <uint32_t>bindings
        write.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
        write.pBufferInfo = descriptors.data()
        _check(self.begin(cb, &begin), "vkBeginCommandBuffer")
        self.bind_pipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, <VkPipeline>pipeline)
        self.push_constants(cb, pipeline_layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, &constant)
        for i in range(n):
            if barriers[i]:
                self.pipeline_barrier(cb, STAGES, STAGES, 0, 1, &self.barrier, 0, NULL, 0, NULL)
            for j in range(bindings):
                descriptors[j].buffer = <VkBuffer>infos[3 * (bindings * i + j)]
                descriptors[j].offset = infos[3 * (bindings * i + j) + 1]
                descriptors[j].range = infos[3 * (bindings * i + j) + 2]
            self.push_descriptor_set(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline_layout, 0, 1, &write)
            self.dispatch(cb, x, y, z)
        _check(self.end(cb), "vkEndCommandBuffer")

    def execute(self, uintptr_t command_buffer, const uint64_t[:] secondaries) -> None:
        """Record a primary command buffer that executes `secondaries` (VkCommandBuffers), a barrier before each
        (a nested command buffer sits between execution barriers)."""
        cdef VkCommandBuffer cb = <VkCommandBuffer>command_buffer
        cdef VkCommandBuffer secondary
        cdef VkCommandBufferBeginInfo begin
        cdef Py_ssize_t i
        memset(&begin, 0, sizeof(begin))
        begin.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
        begin.flags = VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT
        _check(self.begin(cb, &begin), "vkBeginCommandBuffer")
        for i in range(secondaries.shape[0]):
            if i:
                self.pipeline_barrier(cb, STAGES, STAGES, 0, 1, &self.barrier, 0, NULL, 0, NULL)
            secondary = <VkCommandBuffer>secondaries[i]
            self.execute_commands(cb, 1, &secondary)
        _check(self.end(cb), "vkEndCommandBuffer")

    def submit(self, uintptr_t queue, uintptr_t command_buffer, uintptr_t timeline, uint64_t value) -> None:
        """vkQueueSubmit of one command buffer that waits for `timeline` at value - 1 and signals it at value:
        the least a submission needs to be ordered after the one before and to tell when it is done."""
        cdef VkCommandBuffer cb = <VkCommandBuffer>command_buffer
        cdef VkSemaphore semaphore = <VkSemaphore>timeline
        cdef uint64_t wait_value = value - 1
        cdef VkPipelineStageFlags stage = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
        cdef VkTimelineSemaphoreSubmitInfo values
        cdef VkSubmitInfo info
        memset(&values, 0, sizeof(values))
        values.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO
        values.waitSemaphoreValueCount = 1
        values.pWaitSemaphoreValues = &wait_value
        values.signalSemaphoreValueCount = 1
        values.pSignalSemaphoreValues = &value
        memset(&info, 0, sizeof(info))
        info.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO
        info.pNext = &values
        info.waitSemaphoreCount = 1
        info.pWaitSemaphores = &semaphore
        info.pWaitDstStageMask = &stage
        info.commandBufferCount = 1
        info.pCommandBuffers = &cb
        info.signalSemaphoreCount = 1
        info.pSignalSemaphores = &semaphore
        _check(self.queue_submit(<VkQueue>queue, 1, &info, NULL), "vkQueueSubmit")
