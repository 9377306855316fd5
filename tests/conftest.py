"""Shared fixtures. A backend named in HAL_REQUIRE (comma list) fails instead of skipping when missing."""

from __future__ import annotations

import importlib
import os
import sys

import pytest

import hal

REQUIRED = {name.strip() for name in os.environ.get("HAL_REQUIRE", "").split(",") if name.strip()}


def open_device(spec: str, **kwargs) -> hal.Device:
    """Create device `spec`, or skip (fail when its driver is in HAL_REQUIRE) if it is unavailable."""
    try:
        return hal.create_device(spec, **kwargs)
    except hal.UnsupportedError as e:
        if spec.partition(":")[0] in REQUIRED:
            pytest.fail(f"HAL_REQUIRE names {spec} but it is unavailable: {e}")
        pytest.skip(str(e))


def backend_or_skip(name: str, module: str) -> None:
    """At a test module's top: import backend `module`, or skip the module (fail it when HAL_REQUIRE names
    `name`) when its packages or driver libraries are missing."""
    try:
        importlib.import_module(module)
    except Exception as e:  # a missing package (ImportError) or driver library (OSError, ...)
        if name in REQUIRED:
            pytest.fail(f"HAL_REQUIRE names {name} but {module} cannot load: {type(e).__name__}: {e}",
                        pytrace=False)
        pytest.skip(f"{module} cannot load: {type(e).__name__}: {e}", allow_module_level=True)


@pytest.fixture
def host():
    dev = open_device("host")
    yield dev
    dev.close()


def pytest_collection_modifyitems(config, items):
    """Tests marked `cuda` skip without a CUDA device, unless HAL_REQUIRE names cuda."""
    if "cuda" in REQUIRED or "cuda" in hal.available_drivers():
        return
    skip = pytest.mark.skip(reason="no CUDA device here")
    for item in items:
        if "cuda" in item.keywords:
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
