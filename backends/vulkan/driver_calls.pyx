"""What every compiled Vulkan module needs of the driver (compiled): its own entry points, and its results as hal
errors."""

from backends.vulkan.khronos cimport (
    PFN_vkVoidFunction, VkDevice, VkResult, VK_SUCCESS, VK_ERROR_OUT_OF_HOST_MEMORY, VK_ERROR_OUT_OF_DEVICE_MEMORY,
    VK_ERROR_DEVICE_LOST, vkGetDeviceProcAddr
)

from hal.errors import DeviceError, DeviceLostError, OutOfMemoryError


cdef PFN_vkVoidFunction entry(VkDevice device, const char* name) except NULL:
    """The driver's own entry point `name` for `device` (no loader trampoline)."""
    cdef PFN_vkVoidFunction f = vkGetDeviceProcAddr(device, name)
    if f == NULL:
        raise DeviceError(f"vkGetDeviceProcAddr found no {name.decode()} on this device")
    return f


cdef void check(VkResult result, str call) except *:
    """Raise the hal error of a failed `call`."""
    if result == VK_SUCCESS:
        return
    message = f"{call} failed: VkResult {result}"
    if result in (VK_ERROR_OUT_OF_HOST_MEMORY, VK_ERROR_OUT_OF_DEVICE_MEMORY):
        raise OutOfMemoryError(message)
    if result == VK_ERROR_DEVICE_LOST:
        raise DeviceLostError(f"{message}; the device is lost: close it, then create a new device")
    raise DeviceError(message)
