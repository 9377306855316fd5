"""Submission to a Vulkan queue (compiled): the one vkQueueSubmit that every submission of a device makes, on the
device's timeline."""

from libc.stdint cimport uint32_t, uint64_t, uintptr_t
from libc.string cimport memset

from backends.vulkan.calls cimport DeviceCommands
from backends.vulkan.driver_calls cimport check
from backends.vulkan.khronos cimport (
    VkCommandBuffer, VkQueue, VkSemaphore, VkSubmitInfo, VkTimelineSemaphoreSubmitInfo,
    VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_STRUCTURE_TYPE_SUBMIT_INFO, VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO
)


cdef class Submitter:
    """vkQueueSubmit of one command buffer that waits for the queue's timeline at the value of the submission
    before and the given (semaphore handle, value) pairs, and signals the timeline at the next value and the
    given pairs; `submitted` is the last value. From reading the count to the submission and the new count the
    GIL is held (nothing here releases it), so no other thread's submission comes between."""

    def __init__(self, DeviceCommands fn, uintptr_t queue, uintptr_t timeline):
        self.fn = fn
        self.queue = <VkQueue>queue
        self.timeline = <VkSemaphore>timeline

    cpdef uint64_t submit(self, uintptr_t command_buffer, tuple waits=(), tuple signals=()) except? 0:
        """Submit; waits and signals are (semaphore handle, value) pairs. Returns the submission's timeline
        value; raises the hal error of a failure."""
        cdef uint64_t value = self.submitted + 1
        cdef VkSubmitInfo info
        cdef VkTimelineSemaphoreSubmitInfo timeline
        self.wait_semaphores.clear()
        self.wait_values.clear()
        self.signal_semaphores.clear()
        self.signal_values.clear()
        self.wait_semaphores.push_back(self.timeline)
        self.wait_values.push_back(value - 1)
        self.signal_semaphores.push_back(self.timeline)
        self.signal_values.push_back(value)
        for handle, v in waits:
            self.wait_semaphores.push_back(<VkSemaphore><uintptr_t>handle)
            self.wait_values.push_back(v)
        for handle, v in signals:
            self.signal_semaphores.push_back(<VkSemaphore><uintptr_t>handle)
            self.signal_values.push_back(v)
        self.wait_stages.assign(self.wait_semaphores.size(), VK_PIPELINE_STAGE_ALL_COMMANDS_BIT)
        self.cb = <VkCommandBuffer>command_buffer
        memset(&timeline, 0, sizeof(timeline))
        timeline.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO
        timeline.waitSemaphoreValueCount = <uint32_t>self.wait_values.size()
        timeline.pWaitSemaphoreValues = self.wait_values.data()
        timeline.signalSemaphoreValueCount = <uint32_t>self.signal_values.size()
        timeline.pSignalSemaphoreValues = self.signal_values.data()
        memset(&info, 0, sizeof(info))
        info.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO
        info.pNext = &timeline
        info.waitSemaphoreCount = <uint32_t>self.wait_semaphores.size()
        info.pWaitSemaphores = self.wait_semaphores.data()
        info.pWaitDstStageMask = self.wait_stages.data()
        info.commandBufferCount = 1
        info.pCommandBuffers = &self.cb
        info.signalSemaphoreCount = <uint32_t>self.signal_semaphores.size()
        info.pSignalSemaphores = self.signal_semaphores.data()
        check(self.fn.queue_submit(self.queue, 1, &info, NULL), "vkQueueSubmit")
        self.submitted = value
        return value
