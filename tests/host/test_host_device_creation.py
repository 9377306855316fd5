"""Creating host devices: driver specs, HAL_DEVICE, capability overrides and the driver list."""

from __future__ import annotations

import pytest

import hal
from hal import drivers as hal_drivers


def test_create_device_defaults_to_host_without_a_gpu(monkeypatch):
    monkeypatch.delenv("HAL_DEVICE", raising=False)
    status = hal_drivers.driver_status()
    if any(isinstance(d, list) and any(i.kind == "gpu" for i in d) for d in status.values()):
        pytest.skip("a GPU driver is available here")
    with hal.create_device() as dev:
        assert dev.driver == "host"
        assert isinstance(dev.capabilities, hal.Capabilities)


def test_hal_device_environment_variable(monkeypatch):
    monkeypatch.setenv("HAL_DEVICE", "host")
    with hal.create_device() as dev:
        assert dev.driver == "host"
    monkeypatch.setenv("HAL_DEVICE", "nonsense")
    with pytest.raises(hal.UnsupportedError, match=r"no driver named 'nonsense'"):
        hal.create_device()


def test_create_device_unknown_driver():
    with pytest.raises(hal.UnsupportedError, match=r"no driver named 'nonsense'; known: .*host"):
        hal.create_device("nonsense")


def test_create_device_host_index_1():
    with pytest.raises(hal.UnsupportedError, match=r"no host device 1"):
        hal.create_device("host:1")


def test_create_device_host_index_0():
    with hal.create_device("host:0") as dev:
        assert dev.driver == "host"


def test_create_device_bad_spec():
    with pytest.raises(hal.ValidationError, match=r"should be DRIVER or DRIVER:INDEX"):
        hal.create_device("host:x")


def test_unknown_capability_override():
    with pytest.raises(hal.ValidationError, match=r"unknown capability 'max_bananas'"):
        hal.create_device("host", capabilities={"max_bananas": 1})


def test_capability_override_applies():
    with hal.create_device("host", capabilities={"max_push_constants_size": 8}) as dev:
        assert dev.capabilities.max_push_constants_size == 8
    with hal.create_device("host") as dev:
        assert dev.capabilities.max_push_constants_size == 256


def test_available_drivers_contains_host():
    drivers = hal.available_drivers()
    assert "host" in drivers
    assert drivers == sorted(drivers, key=lambda n: ("cuda", "vulkan", "host").index(n)
                             if n in ("cuda", "vulkan", "host") else 3)
