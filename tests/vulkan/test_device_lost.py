"""A lost Vulkan device (issue 49, item 4), forced on any driver by VulkanDevice.inject_device_lost (every call that
reports on the device then returns VK_ERROR_DEVICE_LOST): DeviceLostError where the loss is met and at every later
use, naming the call that met it; close() returns; a new device (a new VkDevice) runs a kernel and gets the right
result; twenty times in a row in one process, the memory flat."""

from __future__ import annotations

import os

import numpy as np
import pytest

import hal
from tests import kernels
from tests.conftest import backend_or_skip, open_device

backend_or_skip("vulkan")
pytestmark = pytest.mark.vulkan
WORDS = 64


def resident_bytes() -> int:
    with open(f"/proc/{os.getpid()}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def scaled(dev: hal.Device) -> tuple[hal.Buffer, hal.CommandBuffer]:
    """x = 0..WORDS-1 and a reusable command buffer that multiplies it by 3."""
    exe = dev.load_executable(kernels.SOURCE)
    x = dev.upload(np.arange(WORDS, dtype=np.uint32))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), (WORDS, 3), (x,))
    return x, cb


def lose(where: str) -> None:
    """A device that works, then is lost where `where` says; every later use raises DeviceLostError naming the
    first; close() returns."""
    dev = open_device("vulkan")
    x, cb = scaled(dev)
    dev.queue_execute(cb)
    np.testing.assert_array_equal(x.read(np.uint32), np.arange(WORDS) * 3)
    first = "vkQueueSubmit" if where == "submission" else "vkWaitSemaphores"
    if where == "submission":
        dev.inject_device_lost()
        with pytest.raises(hal.DeviceLostError, match="vkQueueSubmit failed: VK_ERROR_DEVICE_LOST|VkResult -4"):
            dev.queue_execute(cb)
    else:
        dev.queue_execute(cb)
        dev.inject_device_lost()
        with pytest.raises(hal.DeviceLostError, match="vkWaitSemaphores failed: VK_ERROR_DEVICE_LOST"):
            dev.synchronize()
    for use in (lambda: x.read(np.uint32), lambda: dev.queue_execute(cb), dev.synchronize,
                lambda: dev.upload(np.zeros(4, np.uint32))):
        with pytest.raises(hal.DeviceLostError, match=f"is lost .*{first}.*close it, then create a new device"):
            use()
    dev.close()


@pytest.mark.parametrize("where", ["submission", "synchronize"])
def test_a_lost_device_says_so_everywhere_and_a_new_one_works(where):
    lose(where)
    with open_device("vulkan") as dev:
        x, cb = scaled(dev)
        dev.queue_execute(cb)
        np.testing.assert_array_equal(x.read(np.uint32), np.arange(WORDS) * 3)


def test_twenty_losses_in_a_row_keep_the_memory_flat():
    lose("submission")  # (the first loads what the process keeps: the driver, the compiled shaders)
    before = resident_bytes()
    for i in range(20):
        lose("submission" if i % 2 else "synchronize")
    grown = resident_bytes() - before
    assert grown < 32 << 20, f"the process grew by {grown >> 20} MiB over 20 lost devices"
