"""The raw Vulkan API: the `vulkan` package's cffi `ffi` and `lib`, and VkResult -> hal errors.

The package's own wrappers re-convert every argument on every call (bench.vulkan's naive rows); the
backend calls `lib` (or device-level function pointers) with structs it builds once, and turns each
failing VkResult into a hal error naming the call.
"""

from __future__ import annotations

from typing import Any

import vulkan as vk
from vulkan import ffi, lib

from hal.errors import DeviceError, DeviceLostError, OutOfMemoryError

__all__ = ["ffi", "lib", "vk", "SUCCESS", "TIMEOUT", "OUT_OF_POOL_MEMORY", "FRAGMENTED_POOL", "check", "result_name",
           "api_version", "version_text", "device_function", "instance_function", "text"]

# VkResult codes are read from `lib`, the Khronos headers as cffi parsed them: the vulkan package's Python constants
# give the codes added by extensions a positive sign (VK_ERROR_OUT_OF_POOL_MEMORY is 1000069000 there).
SUCCESS = lib.VK_SUCCESS
TIMEOUT = lib.VK_TIMEOUT
OUT_OF_POOL_MEMORY = lib.VK_ERROR_OUT_OF_POOL_MEMORY
FRAGMENTED_POOL = lib.VK_ERROR_FRAGMENTED_POOL
_OUT_OF_MEMORY = {lib.VK_ERROR_OUT_OF_HOST_MEMORY, lib.VK_ERROR_OUT_OF_DEVICE_MEMORY, lib.VK_ERROR_FRAGMENTED_POOL,
                  lib.VK_ERROR_OUT_OF_POOL_MEMORY, lib.VK_ERROR_FRAGMENTATION, lib.VK_ERROR_TOO_MANY_OBJECTS}
_NAMES: dict[int, str] = {}
for _name in dir(lib):
    if _name.startswith(("VK_ERROR_", "VK_SUCCESS", "VK_NOT_READY", "VK_TIMEOUT", "VK_INCOMPLETE")) \
            and not _name.endswith(("_KHR", "_EXT")) and isinstance(getattr(lib, _name), int):
        _NAMES.setdefault(getattr(lib, _name), _name)


def result_name(result: int) -> str:
    return _NAMES.get(result, f"VkResult {result}")


def check(result: int, call: str) -> int:
    """`result` if it is not an error; else the hal error for it, naming `call`."""
    if result >= 0:
        return result
    message = f"{call} failed: {result_name(result)}"
    if result in _OUT_OF_MEMORY:
        raise OutOfMemoryError(message)
    if result == lib.VK_ERROR_DEVICE_LOST:
        raise DeviceLostError(f"{message}; the device is lost: close it, then create a new device")
    raise DeviceError(message)


def api_version(major: int, minor: int) -> int:
    return (major << 22) | (minor << 12)


def version_text(version: int) -> str:
    return f"{version >> 22 & 0x7F}.{version >> 12 & 0x3FF}.{version & 0xFFF}"


def text(chars: Any) -> str:
    """A fixed-size char array of a Vulkan struct as a str."""
    return ffi.string(chars).decode("utf-8", "replace")


def device_function(device: Any, name: str) -> Any:
    """The driver's own entry point for `name` (no loader trampoline), typed; None if it has none."""
    ptr = lib.vkGetDeviceProcAddr(device, name.encode())
    return None if ptr == ffi.NULL else ffi.cast(f"PFN_{name}", ptr)


def instance_function(instance: Any, name: str) -> Any:
    ptr = lib.vkGetInstanceProcAddr(instance, name.encode())
    return None if ptr == ffi.NULL else ffi.cast(f"PFN_{name}", ptr)
