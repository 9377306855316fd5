"""The Vulkan backend: hal's command buffers replayed into VkCommandBuffers, through the `vulkan` package.

This package imports without the `vulkan` package or the Vulkan loader: VulkanDriver and VulkanDevice
load on first use, and say what to install when either is missing."""

from typing import Any

from hal.drivers import import_backend
from hal.errors import UnsupportedError

__all__ = ["VulkanDevice", "VulkanDriver"]
PACKAGES = {"vulkan": "pip install 'hal-command-buffers[vulkan]'",
            "cffi": "pip install 'hal-command-buffers[vulkan]' (cffi)"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        device = import_backend("backends.vulkan.device", PACKAGES, "backends.vulkan.command_buffer",
                                "the Vulkan headers (Debian: apt-get install libvulkan-dev)")
    except OSError as e:  # the `vulkan` package found no loader library (libvulkan.so.1)
        raise UnsupportedError(f"the Vulkan loader is not installed ({e}); on Debian or Ubuntu: "
                               "apt-get install libvulkan1 mesa-vulkan-drivers") from e
    return getattr(device, name)
