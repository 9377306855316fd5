"""Where an encoder's vkCmd* calls go (compiled): `Calls` makes them in the driver at once, through the driver's own
entry points (`DeviceCommands`: vkGetDeviceProcAddr, no loader trampoline); backends.vulkan.call_stream's
`StreamedCalls` hands them to a worker thread instead. The encoder (backends.vulkan.command_buffer) writes each
command the same way to either; for a dispatch, its arguments as C data (hal.commands.DispatchArguments). Which of
the calls that set state a dispatch needs is decided where the calls are made, by `encode_dispatch` (calls.pxd), on
the command pool's `Bound`: what its VkCommandBuffer holds."""

from libc.stdint cimport uint32_t, uintptr_t
from libc.string cimport memset

from backends.vulkan.driver_calls cimport entry
from backends.vulkan.khronos cimport (
    VkAccessFlags, VkConditionalRenderingBeginInfoEXT, VkDevice, VkFence, VkMemoryBarrier, VkQueue, VkResult,
    VkSubmitInfo, VK_ERROR_DEVICE_LOST, VK_STRUCTURE_TYPE_MEMORY_BARRIER,
    VK_STRUCTURE_TYPE_CONDITIONAL_RENDERING_BEGIN_INFO_EXT, VK_ACCESS_SHADER_READ_BIT, VK_ACCESS_SHADER_WRITE_BIT,
    VK_ACCESS_TRANSFER_READ_BIT, VK_ACCESS_TRANSFER_WRITE_BIT, VK_ACCESS_INDIRECT_COMMAND_READ_BIT,
    VK_ACCESS_HOST_READ_BIT, VK_ACCESS_CONDITIONAL_RENDERING_READ_BIT_EXT
)
from backends.vulkan.recording cimport CommandPool

from hal.errors import ValidationError


cdef class DeviceCommands:
    """The driver's own entry points (no loader trampoline) of the calls on the hot paths, for one VkDevice."""

    def __init__(self, uintptr_t device, bint push_descriptors, bint conditional_rendering):
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
        self.begin_conditional = NULL
        self.end_conditional = NULL
        if conditional_rendering:
            self.begin_conditional = <PFN_vkCmdBeginConditionalRenderingEXT>entry(
                handle, b"vkCmdBeginConditionalRenderingEXT")
            self.end_conditional = <PFN_vkCmdEndConditionalRenderingEXT>entry(handle, b"vkCmdEndConditionalRenderingEXT")
        _global_barrier(&self.memory_barrier, VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                        VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                        VK_ACCESS_TRANSFER_WRITE_BIT)
        _global_barrier(&self.indirect_barrier, VK_ACCESS_SHADER_WRITE_BIT, VK_ACCESS_INDIRECT_COMMAND_READ_BIT)
        _global_barrier(&self.host_barrier, VK_ACCESS_TRANSFER_WRITE_BIT, VK_ACCESS_HOST_READ_BIT)
        _global_barrier(&self.fault_barrier, VK_ACCESS_SHADER_WRITE_BIT, VK_ACCESS_HOST_READ_BIT)
        _global_barrier(&self.latch_barrier, VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                        VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT)
        _global_barrier(&self.condition_barrier, VK_ACCESS_SHADER_WRITE_BIT,
                        VK_ACCESS_CONDITIONAL_RENDERING_READ_BIT_EXT)


    def lose(self) -> None:
        """A test hook (VulkanDevice.inject_device_lost): every later vkQueueSubmit reports VK_ERROR_DEVICE_LOST."""
        self.queue_submit = _lost_queue_submit


cdef VkResult _lost_queue_submit(VkQueue queue, uint32_t count, const VkSubmitInfo* submits,
                                  VkFence fence) noexcept nogil:
    return VK_ERROR_DEVICE_LOST


cdef void _global_barrier(VkMemoryBarrier* barrier, VkAccessFlags source, VkAccessFlags target) noexcept:
    memset(barrier, 0, sizeof(VkMemoryBarrier))
    barrier.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER
    barrier.srcAccessMask = source
    barrier.dstAccessMask = target


cdef class Calls:
    """The vkCmd* calls of one encoding into `pool`'s VkCommandBuffer, made in the driver at once."""

    def __init__(self, DeviceCommands fn, CommandPool pool):
        self.fn = fn
        self.cb = pool.command_buffer
        self.bound = &pool.bound
        self.most_bindings, self.most_words = pool.bound.descriptors.size(), pool.bound.words.size()
        storage_buffer_write(&self.write)

    cdef int make_room(self, const DispatchArguments* arguments) except -1:
        """Make room on the Bound for the descriptors and constants of `arguments`. With push descriptors it was made
        with room for the device's limits (CommandPools.create); without, it grows here, in the thread encoding."""
        if arguments.bindings > self.most_bindings or arguments.words > self.most_words:
            self.bound.descriptors.resize(max(arguments.bindings, self.most_bindings))
            self.bound.words.resize(max(arguments.words, self.most_words))
            self.most_bindings, self.most_words = self.bound.descriptors.size(), self.bound.words.size()
        return 0

    cdef int encode(self, VkPipeline pipeline, VkPipelineLayout layout, bint forget, bint dispatch,
                    const DispatchArguments* arguments) except -1:
        """A dispatch (backends.vulkan.calls.encode_dispatch)."""
        self.make_room(arguments)
        encode_dispatch(self.fn, self.cb, &self.write, self.bound, pipeline, layout, forget, dispatch, arguments)

    cdef int bind_descriptor_set(self, VkPipelineLayout layout, VkDescriptorSet chosen) except -1:
        cmd_bind_descriptor_set(self.fn, self.cb, layout, chosen)

    cdef int dispatch_indirect(self, VkBuffer buffer, VkDeviceSize offset) except -1:
        self.fn.dispatch_indirect(self.cb, buffer, offset)

    cdef int fill_buffer(self, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size, uint32_t word) except -1:
        self.fn.fill_buffer(self.cb, buffer, offset, size, word)

    cdef int update_buffer(self, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size, const void* data) except -1:
        self.fn.update_buffer(self.cb, buffer, offset, size, data)

    cdef int copy_buffer(self, VkBuffer source, VkBuffer target, const VkBufferCopy* region) except -1:
        cmd_copy_buffer(self.fn, self.cb, source, target, region)

    cdef int pipeline_barrier(self, VkPipelineStageFlags source, VkPipelineStageFlags target,
                              const VkMemoryBarrier* barrier) except -1:
        cmd_pipeline_barrier(self.fn, self.cb, source, target, barrier)

    cdef int begin_conditional(self, VkBuffer buffer, VkDeviceSize offset) except -1:
        """The dispatches until end_conditional run only if the uint32 at `offset` of `buffer` is non-zero."""
        cdef VkConditionalRenderingBeginInfoEXT info
        memset(&info, 0, sizeof(info))
        info.sType = VK_STRUCTURE_TYPE_CONDITIONAL_RENDERING_BEGIN_INFO_EXT
        info.buffer = buffer
        info.offset = offset
        self.fn.begin_conditional(self.cb, &info)

    cdef int end_conditional(self) except -1:
        self.fn.end_conditional(self.cb)
