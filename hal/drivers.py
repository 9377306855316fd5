"""The driver registry: which backends there are, their devices, and create_device().

A driver (one per backend) enumerates devices and creates them. Drivers register under the entry-point group
`hal.drivers`; the in-tree backends are also found by module name, so the project works from a source tree
(`PYTHONPATH=.`) without being installed. `hal/` never imports a backend.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import threading
from collections.abc import Iterable, Mapping
from importlib import metadata
from types import ModuleType
from typing import Any, ClassVar

from hal.device import Device
from hal.errors import HalError, UnsupportedError, ValidationError

ENTRY_POINT_GROUP = "hal.drivers"
# Best first. Drivers not named here come after, alphabetically.
PREFERENCE = ("cuda", "vulkan", "host")
# In-tree backends, found by module path when the package's entry points are not installed.
IN_TREE = {
    "cuda": "backends.cuda_graph:CudaDriver",
    "vulkan": "backends.vulkan:VulkanDriver",
    "host": "backends.host:HostDriver",
}


@dataclasses.dataclass(frozen=True)
class DeviceInfo:
    """A device a driver found: its driver's name, its index there, its name and its kind ("gpu" or "cpu")."""

    driver: str
    index: int
    name: str
    kind: str  # "gpu" or "cpu"


class Driver:
    """One backend: enumerates its devices (best first) and creates them. A backend subclasses it and registers it
    (`register_driver`, or the entry-point group `hal.drivers`)."""

    name: ClassVar[str] = ""

    def devices(self) -> list[DeviceInfo]:
        """The usable devices, best first; raise UnsupportedError saying why when there are none."""
        raise NotImplementedError

    def create_device(self, index: int | None, capabilities: Mapping[str, Any] | None) -> Device:
        raise NotImplementedError


# The registry.
_lock = threading.Lock()
_classes: dict[str, Any] | None = None  # name -> Driver class, or "module:attr" not yet imported
_drivers: dict[str, Driver] = {}
_problems: dict[str, str] = {}


def register_driver(name: str, driver_class: type[Driver]) -> None:
    """Register a driver by hand (installed backends register under the entry-point group `hal.drivers`).

    Args:
        name: The name `create_device` takes ("name" or "name:index").
        driver_class: A `hal.Driver` subclass; it is created when first used.
    """
    with _lock:
        _load_registry()[name] = driver_class
        _drivers.pop(name, None)
        _problems.pop(name, None)


def _load_registry() -> dict[str, Any]:
    global _classes
    if _classes is None:
        classes: dict[str, Any] = dict(IN_TREE)
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            classes[ep.name] = ep
        _classes = classes
    return _classes


def _ranked(names: Iterable[str]) -> list[str]:
    return sorted(names, key=lambda n: (PREFERENCE.index(n) if n in PREFERENCE else len(PREFERENCE), n))


def get_driver(name: str) -> Driver:
    """The driver called `name`; UnsupportedError saying why if it is unknown or cannot load."""
    with _lock:
        driver = _drivers.get(name)
        if driver is not None:
            return driver
        target = _registered(name)
        if name not in _problems:
            try:
                driver = _drivers[name] = _driver_class(target)()
                return driver
            except Exception as e:
                _problems[name] = _unavailable(name, e)
        raise UnsupportedError(_problems[name])


def driver_class(name: str) -> type[Driver]:
    """The class of driver `name`, imported but not started (no device is touched); UnsupportedError
    saying why when its backend cannot be imported, e.g. which package to install."""
    with _lock:
        target = _registered(name)
        try:
            return _driver_class(target)
        except Exception as e:
            raise UnsupportedError(_unavailable(name, e)) from e


def _registered(name: str) -> Any:
    """What the registry holds for driver `name` (a class, an entry point or "module:attr")."""
    classes = _load_registry()
    if name not in classes:
        raise UnsupportedError(f"no driver named {name!r}; known: {', '.join(_ranked(classes))}")
    return classes[name]


def _driver_class(target: Any) -> type[Driver]:
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        return getattr(importlib.import_module(module), attr)
    if isinstance(target, metadata.EntryPoint):
        return target.load()
    return target


def _unavailable(name: str, error: Exception) -> str:
    if isinstance(error, HalError):
        return f"the {name} driver is unavailable: {error}"
    # A library or device the backend needs is missing or broken: say which.
    return f"the {name} driver cannot load: {type(error).__name__}: {error}"


def import_backend(module: str, packages: Mapping[str, str], compiled: str, headers: str) -> ModuleType:
    """Import a backend's implementation `module`. A missing package among `packages` (top-level import
    name -> how to install it) becomes UnsupportedError saying what to install, and so does a missing
    `compiled` module (the backend's compiled part, left out when its `headers` were missing at install
    time): backend packages call this on first use, so that they import, and the registry, `python -m hal
    info` and the tests can tell a user what is missing."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name == compiled:
            raise UnsupportedError(f"hal was installed without its compiled module {compiled}: {headers} were "
                                   f"missing at install time; install them and reinstall hal") from e
        top = (e.name or "").partition(".")[0]
        if top not in packages:
            raise
        raise UnsupportedError(f"the Python package {top!r} is not installed: {packages[top]}") from e


def driver_status() -> dict[str, list[DeviceInfo] | str]:
    """For every known driver, best first: its devices, or why it has none."""
    status: dict[str, list[DeviceInfo] | str] = {}
    for name in _ranked(_load_registry()):
        try:
            status[name] = get_driver(name).devices()
        except HalError as e:
            status[name] = str(e)
    return status


def available_drivers() -> list[str]:
    """The drivers that have at least one device here, best first.

    Returns:
        Their names, e.g. ["cuda", "vulkan", "host"]. `python -m hal info` says why the others have none.
    """
    return [name for name, devices in driver_status().items() if isinstance(devices, list) and devices]


def create_device(spec: str | None = None, *, capabilities: Mapping[str, Any] | None = None) -> Device:
    """Create a device.

    Args:
        spec: "host", "vulkan", "vulkan:1", "cuda:0", ...; None: $HAL_DEVICE if set, else the best device there is:
            a CUDA GPU, then a Vulkan GPU, then the host (Vulkan's CPU implementations, such as lavapipe, only when
            named).
        capabilities: Capabilities to narrow (`hal.Capabilities` field names; a value beyond what the device has is
            refused), so that a program can be checked against a weaker device.

    Returns:
        The `hal.Device`; close it (or use it in a `with` block) to free it.

    Raises:
        ValidationError: The spec is not DRIVER or DRIVER:INDEX, or a capability override is not valid.
        UnsupportedError: No such driver or device here (the message says why: a package to install, no driver).

    Example:
        >>> with hal.create_device("host") as host:
        ...     host.driver
        'host'
    """
    if spec is None:
        spec = os.environ.get("HAL_DEVICE") or None
    if spec is None:
        for name, devices in driver_status().items():
            if isinstance(devices, list):
                for info in devices:
                    if info.kind == "gpu":
                        return get_driver(name).create_device(info.index, capabilities)
        return get_driver("host").create_device(None, capabilities)
    if not isinstance(spec, str):
        raise ValidationError(f"create_device: expected a device name such as 'host' or 'vulkan:1', got {spec!r}")
    name, sep, index_text = spec.partition(":")
    index = None
    if sep:
        if not index_text.isdigit():
            raise ValidationError(f"create_device: {spec!r} should be DRIVER or DRIVER:INDEX, e.g. 'vulkan:1'")
        index = int(index_text)
    driver = get_driver(name)
    devices = driver.devices()
    if index is not None and index not in {d.index for d in devices}:
        raise UnsupportedError(f"no {name} device {index}; the {name} devices are "
                               f"{', '.join(f'{d.index}: {d.name}' for d in devices) or 'none'}")
    return driver.create_device(index, capabilities)
