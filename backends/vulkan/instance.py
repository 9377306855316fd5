"""The process-wide VkInstance, the Khronos validation layer, and the physical devices worth using.

One instance serves every hal device (instances are heavy and the loader scans drivers once). With
HAL_VULKAN_ENABLE_VALIDATION_LAYERS set when it is created, the validation layer runs and every
warning or error it reports is kept in `validation_messages` (and logged), so tests can fail on any.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
from typing import Any

from backends.vulkan.api import api_version, check, ffi, instance_function, lib, text, version_text, vk
from hal.errors import UnsupportedError

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
MIN_API = api_version(1, 2)  # timeline semaphores are core from 1.2
log = logging.getLogger("hal.vulkan")

# Best first: discrete, integrated, virtual GPUs, then CPU implementations (lavapipe).
_TYPE_RANK = {vk.VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: 0, vk.VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: 1,
              vk.VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: 2, vk.VK_PHYSICAL_DEVICE_TYPE_CPU: 3}
_TYPE_NAME = {0: "discrete GPU", 1: "integrated GPU", 2: "virtual GPU", 3: "CPU"}

validation_messages: list[str] = []


@dataclasses.dataclass
class PhysicalDevice:
    """One usable physical device, in the order hal ranks them (index = position)."""

    handle: Any
    name: str
    kind: str  # "gpu" or "cpu"
    type_name: str
    api_version: int
    driver: str
    queue_family: int
    extensions: frozenset[str]

    def describe(self) -> str:
        return f"{self.name} ({self.type_name}, Vulkan {version_text(self.api_version)}, {self.driver})"


class Instance:
    """The VkInstance and the physical devices found on it."""

    def __init__(self) -> None:
        self.validation = bool(os.environ.get("HAL_VULKAN_ENABLE_VALIDATION_LAYERS"))
        self._messenger = None
        self._callback = None
        layers, extensions = [], []
        if self.validation:
            layer_list = _enumerate("VkLayerProperties", lambda n, p: lib.vkEnumerateInstanceLayerProperties(n, p))
            available = {text(p.layerName) for p in layer_list}
            if VALIDATION_LAYER not in available:
                raise UnsupportedError(f"HAL_VULKAN_ENABLE_VALIDATION_LAYERS is set but {VALIDATION_LAYER} is not "
                                       f"installed (Debian: apt-get install vulkan-validationlayers)")
            layers.append(VALIDATION_LAYER)
            extensions.append("VK_EXT_debug_utils")
        version = ffi.new("uint32_t*")
        check(lib.vkEnumerateInstanceVersion(version), "vkEnumerateInstanceVersion")
        if version[0] < MIN_API:
            raise UnsupportedError(f"the Vulkan loader is version {version_text(version[0])}; hal needs 1.2 or newer")
        keep = [ffi.new("char[]", s.encode()) for s in layers + extensions]
        app = ffi.new("VkApplicationInfo*", {"sType": vk.VK_STRUCTURE_TYPE_APPLICATION_INFO,
                                             "pApplicationName": ffi.new("char[]", b"hal"),
                                             "pEngineName": ffi.new("char[]", b"hal"),
                                             "apiVersion": min(version[0], api_version(1, 3))})
        names = ffi.new("char*[]", keep)
        info = ffi.new("VkInstanceCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, "pApplicationInfo": app,
            "enabledLayerCount": len(layers), "ppEnabledLayerNames": names,
            "enabledExtensionCount": len(extensions), "ppEnabledExtensionNames": names + len(layers)})
        out = ffi.new("VkInstance*")
        result = lib.vkCreateInstance(info, ffi.NULL, out)
        if result == lib.VK_ERROR_INCOMPATIBLE_DRIVER:
            raise UnsupportedError("no Vulkan driver is installed (Debian: apt-get install mesa-vulkan-drivers "
                                   "for lavapipe, or the GPU vendor's driver)")
        check(result, "vkCreateInstance")
        self.handle = out[0]
        if self.validation:
            self._install_messenger()
        self.devices, self.rejected = self._physical_devices()

    def _install_messenger(self) -> None:
        @ffi.callback("PFN_vkDebugUtilsMessengerCallbackEXT")
        def callback(severity: int, types: int, data: Any, user: Any) -> int:
            try:
                message = ffi.string(data.pMessage).decode("utf-8", "replace")
                validation_messages.append(message)
                log.error("Vulkan validation: %s", message)
            except Exception:  # a callback must never raise into the driver
                pass
            return 0

        severity = vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT
        types = (vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
                 | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT)
        info = ffi.new("VkDebugUtilsMessengerCreateInfoEXT*", {
            "sType": vk.VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT, "messageSeverity": severity,
            "messageType": types, "pfnUserCallback": callback})
        create = instance_function(self.handle, "vkCreateDebugUtilsMessengerEXT")
        out = ffi.new("VkDebugUtilsMessengerEXT*")
        check(create(self.handle, info, ffi.NULL, out), "vkCreateDebugUtilsMessengerEXT")
        self._messenger, self._callback = out[0], callback  # the callback must outlive the messenger

    def _physical_devices(self) -> tuple[list[PhysicalDevice], list[str]]:
        found, rejected = [], []
        for handle in _enumerate("VkPhysicalDevice", lambda n, p: lib.vkEnumeratePhysicalDevices(self.handle, n, p)):
            props = ffi.new("VkPhysicalDeviceProperties*")
            lib.vkGetPhysicalDeviceProperties(handle, props)
            name = text(props.deviceName)
            rank = _TYPE_RANK.get(props.deviceType, 4)
            if props.apiVersion < MIN_API:
                rejected.append(f"{name}: Vulkan {version_text(props.apiVersion)}, hal needs 1.2")
                continue
            family = _compute_family(handle)
            if family is None:
                rejected.append(f"{name}: no compute queue")
                continue
            listed = _enumerate("VkExtensionProperties",
                                lambda n, p, h=handle: lib.vkEnumerateDeviceExtensionProperties(h, ffi.NULL, n, p))
            extensions = frozenset(text(e.extensionName) for e in listed)
            found.append((rank, PhysicalDevice(handle, name, "cpu" if rank == 3 else "gpu",
                                               _TYPE_NAME.get(rank, "other"), props.apiVersion, _driver_text(handle),
                                               family, extensions)))
        found.sort(key=lambda item: item[0])  # stable: the loader's order breaks ties
        return [d for _, d in found], rejected

    def close(self) -> None:
        if self._messenger is not None:
            instance_function(self.handle, "vkDestroyDebugUtilsMessengerEXT")(self.handle, self._messenger, ffi.NULL)
            self._messenger = None
        lib.vkDestroyInstance(self.handle, ffi.NULL)


def _enumerate(ctype: str, call: Any) -> list[Any]:
    """The two-call enumeration idiom: ask for the count, then the items."""
    count = ffi.new("uint32_t*")
    check(call(count, ffi.NULL), f"enumerate {ctype}")
    items = ffi.new(f"{ctype}[]", count[0])
    check(call(count, items), f"enumerate {ctype}")
    return [items[i] for i in range(count[0])]


def _compute_family(handle: Any) -> int | None:
    """A queue family with compute: one without graphics first (a dedicated compute queue)."""
    count = ffi.new("uint32_t*")
    lib.vkGetPhysicalDeviceQueueFamilyProperties(handle, count, ffi.NULL)
    families = ffi.new("VkQueueFamilyProperties[]", count[0])
    lib.vkGetPhysicalDeviceQueueFamilyProperties(handle, count, families)
    compute = [i for i in range(count[0]) if families[i].queueFlags & vk.VK_QUEUE_COMPUTE_BIT]
    dedicated = [i for i in compute if not families[i].queueFlags & vk.VK_QUEUE_GRAPHICS_BIT]
    return (dedicated or compute or [None])[0]


def _driver_text(handle: Any) -> str:
    driver = ffi.new("VkPhysicalDeviceDriverProperties*",
                     {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES})
    props2 = ffi.new("VkPhysicalDeviceProperties2*", {"sType": vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                                       "pNext": driver})
    lib.vkGetPhysicalDeviceProperties2(handle, props2)
    return f"{text(driver.driverName)} {text(driver.driverInfo)}".strip()


_instance: Instance | None = None
_lock = threading.Lock()


def instance() -> Instance:
    """The process-wide instance, created on first use."""
    global _instance
    with _lock:
        if _instance is None:
            _instance = Instance()
        return _instance
