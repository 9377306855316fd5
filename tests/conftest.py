"""Shared fixtures. A backend named in HAL_REQUIRE (comma list) fails instead of skipping when missing."""

from __future__ import annotations

import os

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
