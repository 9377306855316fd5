"""The driver registry and device selection, with a second real driver registered by hand."""

import pytest

import hal
from backends.host.device import HOST_CAPABILITIES, HostDevice, HostDriver
from hal.drivers import DeviceInfo, driver_status, get_driver


class TwinDriver(HostDriver):
    """The host backend under another name, claiming a GPU, to exercise selection."""

    name = "twin"

    def devices(self):
        return [DeviceInfo("twin", 3, "host twin", "gpu")]

    def create_device(self, index, capabilities):
        if index not in (None, 3):
            raise hal.UnsupportedError(f"twin has device 3 only, not {index}")
        dev = HostDevice(HOST_CAPABILITIES.with_overrides(capabilities))
        dev.driver = "twin"
        return dev


class BrokenDriver(hal.Driver):
    name = "broken"

    def __init__(self):
        raise RuntimeError("libbroken.so not found")


@pytest.fixture
def registry():
    hal.register_driver("twin", TwinDriver)
    hal.register_driver("broken", BrokenDriver)
    yield
    from hal import drivers as device
    device._load_registry().pop("twin")
    device._load_registry().pop("broken")
    device._drivers.pop("twin", None)
    device._problems.pop("broken", None)


def test_host_is_always_available():
    assert hal.available_drivers()[-1] == "host"
    assert isinstance(get_driver("host"), HostDriver)


def test_a_gpu_device_is_preferred_and_unusable_drivers_say_why(registry, monkeypatch):
    from hal import drivers as device
    status = driver_status()
    assert "libbroken.so not found" in status["broken"]
    assert list(status)[-2:] == ["broken", "twin"]  # drivers not in the preference list come last
    assert "twin" in hal.available_drivers() and "broken" not in hal.available_drivers()
    monkeypatch.setattr(device, "PREFERENCE", ("twin",) + device.PREFERENCE)
    assert hal.available_drivers()[0] == "twin"
    with hal.create_device() as dev:
        assert dev.driver == "twin"
    with hal.create_device("twin:3") as dev:
        assert dev.driver == "twin"
    with pytest.raises(hal.UnsupportedError, match="no twin device 0; the twin devices are 3: host twin"):
        hal.create_device("twin:0")
    with pytest.raises(hal.UnsupportedError, match="cannot load: RuntimeError: libbroken.so not found"):
        hal.create_device("broken")


def test_hal_device_environment_variable(registry, monkeypatch):
    monkeypatch.setenv("HAL_DEVICE", "host")
    with hal.create_device() as dev:
        assert dev.driver == "host"


@pytest.mark.parametrize("spec, error", [
    ("nonsense", hal.UnsupportedError), ("host:1", hal.UnsupportedError), ("host:x", hal.ValidationError),
    (3, hal.ValidationError),
])
def test_bad_device_names(spec, error):
    with pytest.raises(error):
        hal.create_device(spec)


def test_allocate_refuses_bad_sizes_and_usage(host):
    for nbytes in (-1, 1.5, "8", True):
        with pytest.raises(hal.ValidationError, match="nbytes"):
            host.allocate(nbytes)
    with pytest.raises(hal.ValidationError, match="usage"):
        host.allocate(8, usage=0)
    with pytest.raises(hal.ValidationError, match="usage"):
        host.allocate(8, usage=64)


def test_closed_device_refuses_everything():
    dev = hal.create_device("host")
    buf = dev.allocate(8)
    dev.close()
    dev.close()
    for call in (lambda: dev.allocate(8), lambda: dev.create_command_buffer(), lambda: dev.create_semaphore(),
                 lambda: dev.synchronize(), lambda: buf.read()):
        with pytest.raises(hal.ValidationError, match="closed"):
            call()
