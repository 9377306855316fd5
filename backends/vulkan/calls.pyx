"""Where an encoder's vkCmd* calls go (compiled): `Calls` makes them in the driver at once, through the driver's own
entry points (`DeviceCommands`: vkGetDeviceProcAddr, no loader trampoline); backends.vulkan.call_stream's
`StreamedCalls` hands them to a worker thread instead. The encoder (backends.vulkan.command_buffer) decides which
calls to make and writes them the same way to either."""

from libc.stdint cimport uint32_t, uintptr_t
from libc.string cimport memset

from backends.vulkan.driver_calls cimport entry
from backends.vulkan.khronos cimport (
    VkDevice, VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET, VK_STRUCTURE_TYPE_MEMORY_BARRIER, VK_PIPELINE_BIND_POINT_COMPUTE,
    VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, VK_SHADER_STAGE_COMPUTE_BIT, VK_ACCESS_SHADER_READ_BIT,
    VK_ACCESS_SHADER_WRITE_BIT, VK_ACCESS_TRANSFER_READ_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
    VK_ACCESS_INDIRECT_COMMAND_READ_BIT, VK_ACCESS_HOST_READ_BIT
)


cdef class DeviceCommands:
    """The driver's own entry points (no loader trampoline) of the calls on the hot paths, for one VkDevice."""

    def __init__(self, uintptr_t device, bint push_descriptors):
        cdef VkDevice handle = <VkDevice>device
        self.bind_pipeline = <PFN_vkCmdBindPipeline>entry(handle, b"vkCmdBindPipeline")
        self.bind_descriptor_sets = <PFN_vkCmdBindDescriptorSets>entry(handle, b"vkCmdBindDescriptorSets")
        self.push_constants = <PFN_vkCmdPushConstants>entry(handle, b"vkCmdPushConstants")
        self.dispatch = <PFN_vkCmdDispatch>entry(handle, b"vkCmdDispatch")
        self.dispatch_indirect = <PFN_vkCmdDispatchIndirect>entry(handle, b"vkCmdDispatchIndirect")
        self.fill_buffer = <PFN_vkCmdFillBuffer>entry(handle, b"vkCmdFillBuffer")
        self.update_buffer = <PFN_vkCmdUpdateBuffer>entry(handle, b"vkCmdUpdateBuffer")
        self.copy_buffer = <PFN_vkCmdCopyBuffer>entry(handle, b"vkCmdCopyBuffer")
        self.pipeline_barrier = <PFN_vkCmdPipelineBarrier>entry(handle, b"vkCmdPipelineBarrier")
        self.queue_submit = <PFN_vkQueueSubmit>entry(handle, b"vkQueueSubmit")
        self.push_descriptor_set = NULL
        if push_descriptors:
            self.push_descriptor_set = <PFN_vkCmdPushDescriptorSetKHR>entry(handle, b"vkCmdPushDescriptorSetKHR")
        memset(&self.memory_barrier, 0, sizeof(VkMemoryBarrier))
        self.memory_barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER
        self.memory_barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT
        self.memory_barrier.dstAccessMask = (VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                             VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT)
        memset(&self.indirect_barrier, 0, sizeof(VkMemoryBarrier))
        self.indirect_barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER
        self.indirect_barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT
        self.indirect_barrier.dstAccessMask = VK_ACCESS_INDIRECT_COMMAND_READ_BIT
        memset(&self.host_barrier, 0, sizeof(VkMemoryBarrier))
        self.host_barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER
        self.host_barrier.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT
        self.host_barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT
        memset(&self.fault_barrier, 0, sizeof(VkMemoryBarrier))
        self.fault_barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER
        self.fault_barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT
        self.fault_barrier.dstAccessMask = VK_ACCESS_HOST_READ_BIT


cdef class Calls:
    """The vkCmd* calls of one encoding into VkCommandBuffer `cb`, made in the driver at once."""

    def __init__(self, DeviceCommands fn, uintptr_t cb):
        self.fn = fn
        self.cb = <VkCommandBuffer>cb
        memset(&self.write, 0, sizeof(VkWriteDescriptorSet))
        self.write.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
        self.write.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER

    cdef int bind_pipeline(self, VkPipeline pipeline) except -1:
        self.fn.bind_pipeline(self.cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)

    cdef int push_descriptor_set(self, VkPipelineLayout layout, uint32_t count,
                                 const VkDescriptorBufferInfo* infos) except -1:
        self.write.descriptorCount = count
        self.write.pBufferInfo = infos
        self.fn.push_descriptor_set(self.cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &self.write)

    cdef int bind_descriptor_set(self, VkPipelineLayout layout, VkDescriptorSet chosen) except -1:
        self.fn.bind_descriptor_sets(self.cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &chosen, 0, NULL)

    cdef int push_constants(self, VkPipelineLayout layout, uint32_t count, const uint32_t* words) except -1:
        self.fn.push_constants(self.cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4 * count, words)

    cdef int dispatch(self, uint32_t x, uint32_t y, uint32_t z) except -1:
        self.fn.dispatch(self.cb, x, y, z)

    cdef int dispatch_indirect(self, VkBuffer buffer, VkDeviceSize offset) except -1:
        self.fn.dispatch_indirect(self.cb, buffer, offset)

    cdef int fill_buffer(self, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size, uint32_t word) except -1:
        self.fn.fill_buffer(self.cb, buffer, offset, size, word)

    cdef int update_buffer(self, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size, const void* data) except -1:
        self.fn.update_buffer(self.cb, buffer, offset, size, data)

    cdef int copy_buffer(self, VkBuffer source, VkBuffer target, const VkBufferCopy* region) except -1:
        self.fn.copy_buffer(self.cb, source, target, 1, region)

    cdef int pipeline_barrier(self, VkPipelineStageFlags source, VkPipelineStageFlags target,
                              const VkMemoryBarrier* barrier) except -1:
        self.fn.pipeline_barrier(self.cb, source, target, 0, 1, barrier, 0, NULL, 0, NULL)
