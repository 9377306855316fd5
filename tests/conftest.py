"""Shared fixtures. A backend named in HAL_REQUIRE (comma list) fails instead of skipping when missing."""

from __future__ import annotations

import os
import sys

import pytest

import hal
from hal.drivers import driver_class, driver_status

REQUIRED = {name.strip() for name in os.environ.get("HAL_REQUIRE", "").split(",") if name.strip()}


def open_device(spec: str, **kwargs) -> hal.Device:
    """Create device `spec`, or skip (fail when its driver is in HAL_REQUIRE) if it is unavailable."""
    try:
        return hal.create_device(spec, **kwargs)
    except hal.UnsupportedError as e:
        if spec.partition(":")[0] in REQUIRED:
            pytest.fail(f"HAL_REQUIRE names {spec} but it is unavailable: {e}")
        pytest.skip(str(e))


def open_ranks(driver: str, size: int) -> list[hal.Device]:
    """The devices of a group of ranks: `size` host devices, or CUDA's first `size` GPUs (0: every GPU, skipped
    with fewer than two)."""
    if driver == "cuda" and size == 0:
        try:
            size = len(hal.drivers.get_driver("cuda").devices())
        except hal.UnsupportedError:
            size = 0
        if size < 2:
            pytest.skip(f"needs several GPUs; this machine has {size}")
    return [open_device(driver if driver == "host" else f"cuda:{i}") for i in range(size)]


def open_communicator(devices: list[hal.Device]) -> hal.Communicator:
    """A communicator of `devices`, or skip where this machine cannot make one (no NCCL, say), the devices closed."""
    try:
        return hal.create_communicator(devices)
    except hal.UnsupportedError as e:
        for d in devices:
            d.close()
        pytest.skip(str(e))


def backend_or_skip(name: str) -> None:
    """At a test module's top, before it imports backend `name`'s modules: skip the module when the backend
    cannot be imported here (a missing package such as cuda-python or vulkan, or the Vulkan loader; the
    reason says which), or fail it when HAL_REQUIRE names `name`. No device is needed."""
    try:
        driver_class(name)
    except hal.UnsupportedError as e:
        if name in REQUIRED:
            pytest.fail(f"HAL_REQUIRE names {name} but it cannot load: {e}", pytrace=False)
        pytest.skip(str(e), allow_module_level=True)


@pytest.fixture
def host():
    dev = open_device("host")
    yield dev
    dev.close()


def pytest_configure(config):
    """The markers are registered here, so the suite runs the same from a copy outside the source tree."""
    config.addinivalue_line("markers", "cuda: needs an NVIDIA GPU and the CUDA driver (skipped elsewhere)")
    config.addinivalue_line("markers", "vulkan: needs a Vulkan device (lavapipe counts)")
    config.addinivalue_line("markers", "multi_gpu: needs several NVIDIA GPUs (skipped with fewer than two)")


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` skip without a CUDA device (the reason says why), unless HAL_REQUIRE names cuda."""
    status = driver_status().get("cuda", "no driver named 'cuda' is registered")
    if "cuda" in REQUIRED or isinstance(status, list):
        return
    skip = pytest.mark.skip(reason=f"no CUDA device here: {status}")
    for item in items:
        if item.get_closest_marker("cuda"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def no_vulkan_validation_messages():
    """With HAL_VULKAN_ENABLE_VALIDATION_LAYERS set, any message of the Khronos validation layer fails the test."""
    instance = sys.modules.get("backends.vulkan.instance")
    before = len(instance.validation_messages) if instance else 0
    yield
    instance = sys.modules.get("backends.vulkan.instance")
    if instance and len(instance.validation_messages) > before:
        pytest.fail("the Vulkan validation layer reported:\n" + "\n".join(instance.validation_messages[before:]))
