"""The capabilities table of a physical device, and the features hal turns on when it creates one.

Everything comes from the device (limits, Vulkan 1.0/1.1/1.2 features, extensions); the user's
overrides then apply on top, so a test can pretend a device lacks float64 or push descriptors.
"""

from __future__ import annotations

import dataclasses
import os

from backends.vulkan.api import api_version, ffi, lib, vk
from backends.vulkan.instance import PhysicalDevice
from hal.capabilities import Capabilities

PUSH_DESCRIPTOR = "VK_KHR_push_descriptor"
CONDITIONAL_RENDERING = "VK_EXT_conditional_rendering"  # if_nonzero on the device (backends.vulkan.regions)


@dataclasses.dataclass(frozen=True)
class DeviceFeatures:
    """What the device really has (overrides cannot add to it) and its memory limits."""

    capabilities: Capabilities
    push_descriptor: bool
    max_memory_allocation_count: int
    max_memory_allocation_size: int
    max_timeline_difference: int
    maintenance4: bool
    max_push_descriptors: int  # 0 without the extension
    conditional_rendering: bool  # the extension and its feature, unless HAL_VULKAN_DISABLE_CONDITIONAL_RENDERING


class FeatureChain:
    """VkPhysicalDeviceFeatures2 -> Vulkan11Features -> Vulkan12Features (-> Vulkan13Features on 1.3
    devices) (-> ConditionalRenderingFeaturesEXT where the device has the extension), kept alive together: queried
    from the device, then passed (trimmed to what hal uses) to vkCreateDevice."""

    def __init__(self, vulkan13: bool, conditional: bool = False) -> None:
        self.conditional = ffi.new("VkPhysicalDeviceConditionalRenderingFeaturesEXT*", {
            "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_CONDITIONAL_RENDERING_FEATURES_EXT}) if conditional else None
        tail = self.conditional if conditional else ffi.NULL
        self.v13 = ffi.new("VkPhysicalDeviceVulkan13Features*",
                           {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES,
                            "pNext": tail}) if vulkan13 else None
        self.v12 = ffi.new("VkPhysicalDeviceVulkan12Features*",
                           {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
                            "pNext": self.v13 if vulkan13 else tail})
        self.v11 = ffi.new("VkPhysicalDeviceVulkan11Features*",
                           {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES, "pNext": self.v12})
        self.root = ffi.new("VkPhysicalDeviceFeatures2*",
                            {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, "pNext": self.v11})

    @classmethod
    def query(cls, device: PhysicalDevice) -> FeatureChain:
        chain = cls(device.api_version >= api_version(1, 3), CONDITIONAL_RENDERING in device.extensions)
        lib.vkGetPhysicalDeviceFeatures2(device.handle, chain.root)
        return chain

    @property
    def conditional_rendering(self) -> bool:
        """The device can gate dispatches on a word in a buffer (if_nonzero without a host round trip)."""
        return bool(self.conditional is not None and self.conditional.conditionalRendering and
                    not os.environ.get("HAL_VULKAN_DISABLE_CONDITIONAL_RENDERING"))

    @property
    def maintenance4(self) -> bool:
        """Needed for the LocalSizeId execution mode, which glslc emits for Vulkan 1.3 targets."""
        return bool(self.v13 is not None and self.v13.maintenance4)

    def enabled(self) -> FeatureChain:
        """A chain with just the features hal uses, where the device has them."""
        out = FeatureChain(self.v13 is not None, self.conditional_rendering)
        core, v11, v12 = self.root.features, self.v11, self.v12
        out.root.features.shaderFloat64 = core.shaderFloat64
        out.root.features.shaderInt64 = core.shaderInt64
        out.root.features.shaderInt16 = core.shaderInt16
        out.v11.storageBuffer16BitAccess = v11.storageBuffer16BitAccess
        out.v12.storageBuffer8BitAccess = v12.storageBuffer8BitAccess
        out.v12.shaderFloat16 = v12.shaderFloat16
        out.v12.shaderInt8 = v12.shaderInt8
        out.v12.shaderBufferInt64Atomics = v12.shaderBufferInt64Atomics
        out.v12.timelineSemaphore = v12.timelineSemaphore
        if out.v13 is not None:
            out.v13.maintenance4 = self.v13.maintenance4
        if out.conditional is not None:
            out.conditional.conditionalRendering = 1
        return out


def query(device: PhysicalDevice) -> DeviceFeatures:
    """The device's capabilities table and limits."""
    v12p = ffi.new("VkPhysicalDeviceVulkan12Properties*",
                   {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES})
    v11p = ffi.new("VkPhysicalDeviceVulkan11Properties*",
                   {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_PROPERTIES, "pNext": v12p})
    props = ffi.new("VkPhysicalDeviceProperties2*", {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                                     "pNext": v11p})
    push_descriptor = PUSH_DESCRIPTOR in device.extensions
    push_props = ffi.new("VkPhysicalDevicePushDescriptorPropertiesKHR*", {
        "sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PUSH_DESCRIPTOR_PROPERTIES_KHR, "pNext": props.pNext})
    if push_descriptor:
        props.pNext = push_props
    lib.vkGetPhysicalDeviceProperties2(device.handle, props)
    limits = props.properties.limits
    chain = FeatureChain.query(device)
    core, v11, v12 = chain.root.features, chain.v11, chain.v12
    in_compute = v11p.subgroupSupportedStages & vk.VK_SHADER_STAGE_COMPUTE_BIT
    subgroup_ops = v11p.subgroupSupportedOperations if in_compute else 0
    caps = Capabilities(
        supported_subgroup_operations=int(subgroup_ops),
        max_push_constants_size=limits.maxPushConstantsSize,
        max_uniform_buffer_range=limits.maxUniformBufferRange,
        max_storage_buffer_range=limits.maxStorageBufferRange,
        max_per_stage_descriptor_storage_buffer=limits.maxPerStageDescriptorStorageBuffers,
        supports_storage_buffer_storage_class=True,  # core since Vulkan 1.1
        supports_storage_buffer_8bit_access=bool(v12.storageBuffer8BitAccess),
        supports_storage_buffer_16bit_access=bool(v11.storageBuffer16BitAccess),
        supports_float16=bool(v12.shaderFloat16),
        supports_float64=bool(core.shaderFloat64),
        supports_int8=bool(v12.shaderInt8),
        supports_int16=bool(core.shaderInt16),
        supports_int64=bool(core.shaderInt64),
        supports_int64_atomics=bool(v12.shaderBufferInt64Atomics),
        supports_push_descriptor=push_descriptor and not os.environ.get("HAL_VULKAN_DISABLE_PUSH_DESCRIPTOR"),
        max_workgroup_count=tuple(limits.maxComputeWorkGroupCount),
        max_workgroup_size=tuple(limits.maxComputeWorkGroupSize),
        max_workgroup_invocations=limits.maxComputeWorkGroupInvocations,
        storage_buffer_offset_alignment=int(limits.minStorageBufferOffsetAlignment),
        fill_buffer_alignment=4,  # vkCmdFillBuffer: offset and size multiples of 4
        update_buffer_alignment=4,  # vkCmdUpdateBuffer: offset and size multiples of 4
        copy_buffer_alignment=1,
        supports_foreign_calls=True,
    )
    return DeviceFeatures(caps, push_descriptor, limits.maxMemoryAllocationCount, int(v11p.maxMemoryAllocationSize),
                          int(v12p.maxTimelineSemaphoreValueDifference), chain.maintenance4,
                          push_props.maxPushDescriptors if push_descriptor else 0, chain.conditional_rendering)
