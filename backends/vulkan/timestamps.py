"""A clock in the Vulkan queue (hal.tracing's queue clock): each mark is a tiny submission writing a timestamp
(vkCmdWriteTimestamp after all earlier work), read back in seconds once the queue passed it. The query pool goes
through the device's lifetime: destroyed after the work using it, or when the device closes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from backends.vulkan.api import check, ffi, lib, vk
from backends.vulkan.instance import PhysicalDevice
from hal.errors import UnsupportedError
from hal.lifetime import Lifetime

if TYPE_CHECKING:
    from backends.vulkan.recording import Recording


CAPACITY = 1 << 14  # marks a clock holds


class ClockDevice(Protocol):
    """What the timestamp clock needs of its Vulkan device."""

    handle: Any
    name: str
    physical: PhysicalDevice
    lifetime: Lifetime

    def queue_recording(self, record: Callable[[Any], None]) -> Recording: ...


def destroy_pool(device: ClockDevice, pool: Any) -> None:
    lib.vkDestroyQueryPool(device.handle, pool, ffi.NULL)


class TimestampClock:
    what = "Vulkan timestamps between the commands, each command submitted alone"
    capacity = CAPACITY

    def __init__(self, device: ClockDevice) -> None:
        physical = device.physical.handle
        props = ffi.new("VkPhysicalDeviceProperties*")
        lib.vkGetPhysicalDeviceProperties(physical, props)
        count = ffi.new("uint32_t*")
        lib.vkGetPhysicalDeviceQueueFamilyProperties(physical, count, ffi.NULL)
        families = ffi.new("VkQueueFamilyProperties[]", count[0])
        lib.vkGetPhysicalDeviceQueueFamilyProperties(physical, count, families)
        self.valid_bits = families[device.physical.queue_family].timestampValidBits
        if not self.valid_bits:
            raise UnsupportedError(f"{device.name}: its compute queue writes no timestamps")
        self.period_ns = props.limits.timestampPeriod
        self.device = device
        info = ffi.new("VkQueryPoolCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                                  "queryType": vk.VK_QUERY_TYPE_TIMESTAMP, "queryCount": CAPACITY})
        pool = ffi.new("VkQueryPool*")
        check(lib.vkCreateQueryPool(device.handle, info, ffi.NULL, pool), "vkCreateQueryPool")
        self.pool = pool[0]
        self.close = device.lifetime.track(self, destroy_pool, device, self.pool)
        self.recordings: list[Recording] = []  # kept until the clock goes: the queue may still run them
        self.count = 0
        self._queue(lambda handle: lib.vkCmdResetQueryPool(handle, self.pool, 0, CAPACITY))

    def _queue(self, record: Any) -> None:
        self.recordings.append(self.device.queue_recording(record))

    def mark(self) -> None:
        if self.count == CAPACITY:
            raise UnsupportedError(f"a Vulkan trace holds at most {CAPACITY - 1} commands")
        index = self.count
        self.count += 1
        self._queue(lambda handle: lib.vkCmdWriteTimestamp(handle, vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT,
                                                            self.pool, index))

    def seconds(self) -> list[float]:
        """The marks' times (after a synchronize), from the first."""
        if not self.count:
            return []
        data = ffi.new("uint64_t[]", self.count)
        check(lib.vkGetQueryPoolResults(self.device.handle, self.pool, 0, self.count, 8 * self.count, data, 8,
                                        vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WAIT_BIT),
              "vkGetQueryPoolResults")
        mask = (1 << self.valid_bits) - 1 if self.valid_bits < 64 else (1 << 64) - 1
        ticks = [(data[i] - data[0]) & mask for i in range(self.count)]
        return [t * self.period_ns * 1e-9 for t in ticks]
