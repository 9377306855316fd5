"""The Vulkan driver and device: selection, capabilities from the device, overrides, the queue."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import hal
from hal.drivers import get_driver
from tests.conftest import backend_or_skip

backend_or_skip("vulkan")

from backends.vulkan import capabilities, instance
from backends.vulkan.api import check
from backends.vulkan.api import vk as consts

pytestmark = pytest.mark.vulkan


def test_devices_are_ranked_and_described(vk):
    infos = get_driver("vulkan").devices()
    assert [d.index for d in infos] == list(range(len(infos)))
    kinds = [d.kind for d in infos]
    assert kinds == sorted(kinds, key=lambda k: k != "gpu")  # GPUs before CPU implementations
    assert infos[0].name == vk.name
    physical = instance.instance().devices[0]
    assert physical.api_version >= instance.MIN_API and physical.describe()


def test_a_cpu_vulkan_device_is_only_used_when_named(monkeypatch):
    monkeypatch.delenv("HAL_DEVICE", raising=False)
    vulkan = get_driver("vulkan").devices()
    if any(d.kind == "gpu" for d in vulkan) or "cuda" in hal.available_drivers():
        pytest.skip("a GPU is present: the default device is not the host")
    with hal.create_device() as dev:
        assert dev.driver == "host"


def test_unknown_index_refused():
    with pytest.raises(hal.UnsupportedError, match=r"no vulkan device 99"):
        hal.create_device("vulkan:99")


def test_capabilities_come_from_the_device(vk):
    caps = vk.capabilities
    assert caps.max_push_constants_size >= 128
    assert caps.max_storage_buffer_range >= 1 << 27
    assert caps.max_workgroup_invocations >= 128 and min(caps.max_workgroup_size) >= 64
    alignment = caps.storage_buffer_offset_alignment
    assert alignment & (alignment - 1) == 0
    assert caps.supports_storage_buffer_storage_class
    assert caps.fill_buffer_alignment == caps.update_buffer_alignment == 4
    disabled = bool(os.environ.get("HAL_VULKAN_DISABLE_PUSH_DESCRIPTOR"))
    assert caps.supports_push_descriptor == (vk.features.push_descriptor and not disabled)


@pytest.mark.parametrize("looser", [{"fill_buffer_alignment": 1}, {"update_buffer_alignment": 2},
                                    {"max_push_constants_size": 1 << 20}, {"max_workgroup_size": (1 << 20, 1, 1)},
                                    {"supported_subgroup_operations": 1 << 30}])
def test_overrides_may_not_claim_more_than_the_device_has(looser):
    with pytest.raises(hal.UnsupportedError, match=r"claims more than .* overrides can only make this device smaller"):
        hal.create_device("vulkan", capabilities=looser)


def test_overrides_apply_on_top_of_the_device(fresh):
    dev = fresh(max_push_constants_size=8, supports_push_descriptor=False)
    assert dev.capabilities.max_push_constants_size == 8
    assert not dev.push_descriptors
    with pytest.raises(hal.ValidationError, match=r"unknown capability"):
        hal.create_device("vulkan", capabilities={"warp_drive": True})


def test_push_descriptors_cannot_be_claimed_without_the_extension(monkeypatch):
    physical = instance.instance().devices[0]
    monkeypatch.setattr(physical, "extensions", physical.extensions - {capabilities.PUSH_DESCRIPTOR})
    with pytest.raises(hal.UnsupportedError, match=r"supports_push_descriptor=True claims more than"):
        hal.create_device("vulkan", capabilities={"supports_push_descriptor": True})
    with hal.create_device("vulkan") as dev:  # without it, descriptor sets
        assert not dev.capabilities.supports_push_descriptor


def test_info_lists_the_vulkan_device_and_its_capabilities(vk):
    out = subprocess.run([sys.executable, "-m", "hal", "info"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert vk.name in out.stdout and "max_storage_buffer_range" in out.stdout


def submit_fill(dev, value, wait, signal=()):
    """Queue a fill of a new 16-byte buffer with `value`, waiting and signalling as given; the buffer."""
    buf = dev.allocate(16)
    cb = dev.create_command_buffer()
    with cb:
        cb.fill_buffer(buf, np.uint32(value))
    dev.queue_execute(cb, wait=wait, signal=signal)
    return buf


def test_queue_waiting_for_a_host_signal_nobody_can_give_is_refused(fresh):
    dev = fresh()
    gate = dev.create_semaphore(0)
    buf = submit_fill(dev, 3, wait=[(gate, 1)])
    with pytest.raises(hal.ValidationError, match=r"no other thread can signal it"):
        dev.synchronize()
    gate.signal(1)
    np.testing.assert_array_equal(buf.read(np.uint32), np.full(4, 3, np.uint32))


def test_close_with_a_submission_still_waiting_does_not_hang(fresh):
    dev = fresh()
    gate, done = dev.create_semaphore(0), dev.create_semaphore(0)
    submit_fill(dev, 1, wait=[(gate, 5)], signal=[(done, 1)])
    waiter_error = []

    def wait():
        try:
            done.wait(1)
        except hal.HalError as e:
            waiter_error.append(e)

    thread = threading.Thread(target=wait)
    thread.start()
    time.sleep(0.05)
    start = time.monotonic()
    dev.close()
    thread.join(10)
    assert time.monotonic() - start < 5 and not thread.is_alive()
    assert waiter_error == [] or isinstance(waiter_error[0], hal.DeviceLostError)
    with pytest.raises(hal.DeviceLostError, match=r"closed"):
        done.query()


def test_host_signal_may_not_overtake_a_pending_queue_signal(fresh):
    dev = fresh()
    gate, sem = dev.create_semaphore(0), dev.create_semaphore(0)
    submit_fill(dev, 1, wait=[(gate, 1)], signal=[(sem, 5)])
    sem.signal(3)  # below what the queue will signal: fine
    with pytest.raises(hal.ValidationError, match=r"will still signal 5"):
        sem.signal(5)
    gate.signal(1)
    sem.wait(5, timeout=10)
    sem.signal(6)
    assert sem.query() == 6


def test_vulkan_results_become_hal_errors():
    with pytest.raises(hal.DeviceLostError, match=r"vkQueueSubmit failed: VK_ERROR_DEVICE_LOST"):
        check(consts.VK_ERROR_DEVICE_LOST, "vkQueueSubmit")
    with pytest.raises(hal.OutOfMemoryError, match=r"VK_ERROR_OUT_OF_DEVICE_MEMORY"):
        check(consts.VK_ERROR_OUT_OF_DEVICE_MEMORY, "vkAllocateMemory")
    with pytest.raises(hal.DeviceError, match=r"VK_ERROR_INITIALIZATION_FAILED"):
        check(consts.VK_ERROR_INITIALIZATION_FAILED, "vkCreateDevice")
    assert check(consts.VK_TIMEOUT, "vkWaitSemaphores") == consts.VK_TIMEOUT
    # A code an extension added, as the driver returns it (negative; the vulkan package's constant has lost its sign).
    with pytest.raises(hal.OutOfMemoryError, match=r"vkAllocateDescriptorSets failed: VK_ERROR_OUT_OF_POOL_MEMORY"):
        check(-1000069000, "vkAllocateDescriptorSets")


def test_timeline_steps_beyond_the_device_limit_refused(fresh, monkeypatch):
    dev = fresh()
    monkeypatch.setattr(dev, "features", dataclasses.replace(dev.features, max_timeline_difference=100))
    sem = dev.create_semaphore(0)
    with pytest.raises(hal.ValidationError, match=r"maxTimelineSemaphoreValueDifference 100"):
        sem.signal(101)
    with pytest.raises(hal.ValidationError, match=r"maxTimelineSemaphoreValueDifference 100"):
        submit_fill(dev, 1, wait=[], signal=[(sem, 500)])
    submit_fill(dev, 1, wait=[], signal=[(sem, 100)])
    sem.wait(100, timeout=10)


def test_close_ends_a_loop_waiting_for_a_semaphore_nobody_signals():
    """The QueueDriver's job waits on the GPU for the host; close() gives the signal itself (as for plain
    submissions), so the driver drains and close returns."""
    from tests import kernels
    dev = hal.create_device("vulkan")
    exe = dev.load_executable(kernels.SOURCE)
    out, flag = dev.upload(np.zeros(16, np.uint32)), dev.upload(kernels.u32([1]))
    cb = dev.create_command_buffer()
    with cb:
        with cb.if_nonzero(flag):
            cb.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
    gate, done = dev.create_semaphore(0), dev.create_semaphore(0)
    dev.queue_execute(cb, wait=[(gate, 5)], signal=[(done, 1)])
    with pytest.raises(hal.ValidationError, match="a submitted queue_execute will still signal 1"):
        done.signal(2)  # the queued job will signal 1: a host signal must stay below it
    started = time.monotonic()
    dev.close()
    assert time.monotonic() - started < 10
