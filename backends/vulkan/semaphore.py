"""Vulkan timeline semaphores: a VkSemaphore of type TIMELINE, waited on and signalled by the queue,
the host, or both (a submission may wait for a value the host signals later)."""

from __future__ import annotations

import contextlib
import time
from typing import Any, Protocol

from backends.vulkan.api import TIMEOUT, check, ffi, lib, vk
from hal.errors import DeviceLostError
from hal.lifetime import Lifetime
from hal.semaphore import Semaphore, check_host_signal, wait_timed_out

WAIT_SLICE_S = 0.1  # long waits are cut in slices, so that closing the device ends them


class TimelineDevice(Protocol):
    """What timeline semaphores need of their Vulkan device."""

    handle: Any
    fn: Any  # its device-level functions (vkWaitSemaphores, vkSignalSemaphore, vkGetSemaphoreCounterValue)
    features: Any  # backends.vulkan.capabilities' query
    lifetime: Lifetime
    driver: str

    @property
    def closed(self) -> bool: ...

    def address(self, cdata: Any) -> int: ...

    def count_objects(self, kind: str, delta: int) -> None: ...

    def check_open(self) -> None: ...

    def check_timeline_step(self, sem: VulkanSemaphore, value: int) -> None: ...

    def pending_signal(self, sem: Semaphore) -> int | None: ...

    def waiting(self) -> contextlib.AbstractContextManager[None]: ...


def create_timeline(device: TimelineDevice, initial: int) -> Any:
    kind = ffi.new("VkSemaphoreTypeCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                                  "semaphoreType": vk.VK_SEMAPHORE_TYPE_TIMELINE,
                                                  "initialValue": initial})
    info = ffi.new("VkSemaphoreCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, "pNext": kind})
    out = ffi.new("VkSemaphore*")
    check(lib.vkCreateSemaphore(device.handle, info, ffi.NULL, out), "vkCreateSemaphore")
    device.count_objects("VkSemaphore", 1)
    return out[0]


def destroy_timeline(device: TimelineDevice, handle: Any) -> None:
    lib.vkDestroySemaphore(device.handle, handle, ffi.NULL)
    device.count_objects("VkSemaphore", -1)


class VulkanSemaphore(Semaphore):
    __slots__ = ("handle", "address", "_value_out", "_finalizer")

    def __init__(self, device: TimelineDevice, initial: int) -> None:
        super().__init__(device)
        self.handle = create_timeline(device, initial)
        self.address = device.address(self.handle)  # what submissions take
        self._value_out = ffi.new("uint64_t*")
        self._finalizer = device.lifetime.track(self, destroy_timeline, device, self.handle)

    def _query(self) -> int:
        device = self.device
        if device.closed:
            raise DeviceLostError("semaphore query: the device was closed")
        check(device.fn.vkGetSemaphoreCounterValue(device.handle, self.handle, self._value_out),
              "vkGetSemaphoreCounterValue")
        return int(self._value_out[0])

    def _wait(self, value: int, timeout: float | None) -> None:
        device = self.device
        deadline = None if timeout is None else time.monotonic() + timeout
        handles, values = ffi.new("VkSemaphore[1]", [self.handle]), ffi.new("uint64_t[1]", [value])
        info = ffi.new("VkSemaphoreWaitInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, "semaphoreCount": 1,
                                                "pSemaphores": handles, "pValues": values})
        with device.waiting():
            while self.failure is None:  # a failure that writes no value is seen within a slice
                if device.closed:
                    raise DeviceLostError(f"semaphore wait: the device was closed while waiting for {value}")
                remaining = WAIT_SLICE_S if deadline is None else min(WAIT_SLICE_S, deadline - time.monotonic())
                result = check(device.fn.vkWaitSemaphores(device.handle, info, max(0, int(remaining * 1e9))),
                               "vkWaitSemaphores")
                if result != TIMEOUT:
                    return
                if deadline is not None and time.monotonic() >= deadline:
                    raise wait_timed_out(value, self._query(), timeout, device.pending_signal(self))

    def _signal(self, value: int) -> None:
        current = self._query()
        if self.device.features.max_timeline_difference < value - current:  # only a value above current
            self.device.check_timeline_step(self, value)
        check_host_signal(value, current, self.device.pending_signal(self),
                          "Vulkan needs every signal above the value before it, so ")
        self.host_signal(value)

    def host_signal(self, value: int) -> None:
        """vkSignalSemaphore, unchecked: for the device's own signals (a host call's gate, a stuck queue at close)."""
        info = ffi.new("VkSemaphoreSignalInfo*", {"sType": vk.VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO,
                                                  "semaphore": self.handle, "value": value})
        check(self.device.fn.vkSignalSemaphore(self.device.handle, info), "vkSignalSemaphore")

