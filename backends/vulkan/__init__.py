"""The Vulkan backend: hal's command buffers replayed into VkCommandBuffers, through the `vulkan` package."""

from backends.vulkan.device import VulkanDevice, VulkanDriver

__all__ = ["VulkanDevice", "VulkanDriver"]
