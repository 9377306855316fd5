# The declarations of the Khronos Vulkan header (vulkan/vulkan.h) that hal's compiled modules use: Cython needs
# them spelled out, and the C++ compiler takes the types and layouts from the header itself.

from libc.stdint cimport uint32_t, uint64_t

cdef extern from "vulkan/vulkan.h" nogil:
    ctypedef int VkResult
    ctypedef uint32_t VkFlags
    ctypedef uint32_t VkBool32
    ctypedef uint64_t VkDeviceSize
    ctypedef VkFlags VkPipelineStageFlags
    ctypedef VkFlags VkAccessFlags
    ctypedef VkFlags VkShaderStageFlags
    ctypedef VkFlags VkCommandBufferUsageFlags
    ctypedef VkFlags VkDependencyFlags
    ctypedef void* VkDevice
    ctypedef void* VkQueue
    ctypedef void* VkCommandBuffer
    ctypedef void* VkBuffer
    ctypedef void* VkPipeline
    ctypedef void* VkPipelineLayout
    ctypedef void* VkDescriptorSet
    ctypedef void* VkSemaphore
    ctypedef void* VkFence
    ctypedef void* VkCommandPool
    ctypedef VkFlags VkCommandPoolCreateFlags
    ctypedef VkFlags VkCommandPoolResetFlags

    ctypedef enum VkStructureType:
        VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
        VK_STRUCTURE_TYPE_MEMORY_BARRIER
        VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO
        VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO
        VK_STRUCTURE_TYPE_SUBMIT_INFO
        VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO
        VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO
        VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO
        VK_STRUCTURE_TYPE_CONDITIONAL_RENDERING_BEGIN_INFO_EXT
    ctypedef enum VkCommandBufferLevel:
        VK_COMMAND_BUFFER_LEVEL_PRIMARY
    ctypedef enum VkPipelineBindPoint:
        VK_PIPELINE_BIND_POINT_COMPUTE
    ctypedef enum VkDescriptorType:
        VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
    enum:
        VK_SUCCESS
        VK_ERROR_OUT_OF_HOST_MEMORY
        VK_ERROR_OUT_OF_DEVICE_MEMORY
        VK_ERROR_DEVICE_LOST
        VK_SHADER_STAGE_COMPUTE_BIT
        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
        VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT
        VK_PIPELINE_STAGE_HOST_BIT
        VK_PIPELINE_STAGE_TRANSFER_BIT
        VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
        VK_ACCESS_SHADER_READ_BIT
        VK_ACCESS_SHADER_WRITE_BIT
        VK_ACCESS_TRANSFER_READ_BIT
        VK_ACCESS_TRANSFER_WRITE_BIT
        VK_ACCESS_INDIRECT_COMMAND_READ_BIT
        VK_ACCESS_HOST_READ_BIT
        VK_PIPELINE_STAGE_CONDITIONAL_RENDERING_BIT_EXT
        VK_ACCESS_CONDITIONAL_RENDERING_READ_BIT_EXT
        VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT
        VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT
        VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT

    ctypedef struct VkDescriptorBufferInfo:
        VkBuffer buffer
        VkDeviceSize offset
        VkDeviceSize range
    ctypedef struct VkWriteDescriptorSet:
        VkStructureType sType
        const void* pNext
        VkDescriptorSet dstSet
        uint32_t dstBinding
        uint32_t dstArrayElement
        uint32_t descriptorCount
        VkDescriptorType descriptorType
        const VkDescriptorBufferInfo* pBufferInfo
    ctypedef struct VkBufferCopy:
        VkDeviceSize srcOffset
        VkDeviceSize dstOffset
        VkDeviceSize size
    ctypedef struct VkMemoryBarrier:
        VkStructureType sType
        const void* pNext
        VkAccessFlags srcAccessMask
        VkAccessFlags dstAccessMask
    ctypedef struct VkCommandBufferInheritanceInfo:
        VkStructureType sType
        const void* pNext
    ctypedef struct VkCommandBufferBeginInfo:
        VkStructureType sType
        const void* pNext
        VkCommandBufferUsageFlags flags
        const VkCommandBufferInheritanceInfo* pInheritanceInfo
    ctypedef struct VkSubmitInfo:
        VkStructureType sType
        const void* pNext
        uint32_t waitSemaphoreCount
        const VkSemaphore* pWaitSemaphores
        const VkPipelineStageFlags* pWaitDstStageMask
        uint32_t commandBufferCount
        const VkCommandBuffer* pCommandBuffers
        uint32_t signalSemaphoreCount
        const VkSemaphore* pSignalSemaphores
    ctypedef struct VkTimelineSemaphoreSubmitInfo:
        VkStructureType sType
        const void* pNext
        uint32_t waitSemaphoreValueCount
        const uint64_t* pWaitSemaphoreValues
        uint32_t signalSemaphoreValueCount
        const uint64_t* pSignalSemaphoreValues

    ctypedef struct VkConditionalRenderingBeginInfoEXT:
        VkStructureType sType
        const void* pNext
        VkBuffer buffer
        VkDeviceSize offset
        VkFlags flags

    ctypedef struct VkCommandPoolCreateInfo:
        VkStructureType sType
        const void* pNext
        VkCommandPoolCreateFlags flags
        uint32_t queueFamilyIndex
    ctypedef struct VkCommandBufferAllocateInfo:
        VkStructureType sType
        const void* pNext
        VkCommandPool commandPool
        VkCommandBufferLevel level
        uint32_t commandBufferCount

    ctypedef void (*PFN_vkVoidFunction)()
    ctypedef VkResult (*PFN_vkCreateCommandPool)(VkDevice, const VkCommandPoolCreateInfo*, const void*, VkCommandPool*)
    ctypedef void (*PFN_vkDestroyCommandPool)(VkDevice, VkCommandPool, const void*)
    ctypedef VkResult (*PFN_vkResetCommandPool)(VkDevice, VkCommandPool, VkCommandPoolResetFlags)
    ctypedef VkResult (*PFN_vkAllocateCommandBuffers)(VkDevice, const VkCommandBufferAllocateInfo*, VkCommandBuffer*)
    ctypedef void (*PFN_vkCmdBindPipeline)(VkCommandBuffer, VkPipelineBindPoint, VkPipeline)
    ctypedef void (*PFN_vkCmdPushDescriptorSetKHR)(VkCommandBuffer, VkPipelineBindPoint, VkPipelineLayout, uint32_t,
                                                   uint32_t, const VkWriteDescriptorSet*)
    ctypedef void (*PFN_vkCmdBindDescriptorSets)(VkCommandBuffer, VkPipelineBindPoint, VkPipelineLayout, uint32_t,
                                                 uint32_t, const VkDescriptorSet*, uint32_t, const uint32_t*)
    ctypedef void (*PFN_vkCmdPushConstants)(VkCommandBuffer, VkPipelineLayout, VkShaderStageFlags, uint32_t,
                                            uint32_t, const void*)
    ctypedef void (*PFN_vkCmdDispatch)(VkCommandBuffer, uint32_t, uint32_t, uint32_t)
    ctypedef void (*PFN_vkCmdExecuteCommands)(VkCommandBuffer, uint32_t, const VkCommandBuffer*)
    ctypedef void (*PFN_vkCmdDispatchIndirect)(VkCommandBuffer, VkBuffer, VkDeviceSize)
    ctypedef void (*PFN_vkCmdFillBuffer)(VkCommandBuffer, VkBuffer, VkDeviceSize, VkDeviceSize, uint32_t)
    ctypedef void (*PFN_vkCmdUpdateBuffer)(VkCommandBuffer, VkBuffer, VkDeviceSize, VkDeviceSize, const void*)
    ctypedef void (*PFN_vkCmdCopyBuffer)(VkCommandBuffer, VkBuffer, VkBuffer, uint32_t, const VkBufferCopy*)
    ctypedef void (*PFN_vkCmdPipelineBarrier)(VkCommandBuffer, VkPipelineStageFlags, VkPipelineStageFlags,
                                              VkDependencyFlags, uint32_t, const VkMemoryBarrier*, uint32_t,
                                              const void*, uint32_t, const void*)
    ctypedef void (*PFN_vkCmdBeginConditionalRenderingEXT)(VkCommandBuffer, const VkConditionalRenderingBeginInfoEXT*)
    ctypedef void (*PFN_vkCmdEndConditionalRenderingEXT)(VkCommandBuffer)
    ctypedef VkResult (*PFN_vkBeginCommandBuffer)(VkCommandBuffer, const VkCommandBufferBeginInfo*)
    ctypedef VkResult (*PFN_vkEndCommandBuffer)(VkCommandBuffer)
    ctypedef VkResult (*PFN_vkQueueSubmit)(VkQueue, uint32_t, const VkSubmitInfo*, VkFence)

    PFN_vkVoidFunction vkGetDeviceProcAddr(VkDevice device, const char* name)
