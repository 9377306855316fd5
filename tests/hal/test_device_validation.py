"""Closed devices refuse every use; capability overrides are checked when the device is created."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests import kernels
from tests.hal.validation_helpers import recording

# Closed devices.
USES = {
    "allocate": lambda dev, buf, ended, fresh, sem: dev.allocate(16),
    "upload": lambda dev, buf, ended, fresh, sem: dev.upload(np.zeros(4, np.uint32)),
    "load_executable": lambda dev, buf, ended, fresh, sem: dev.load_executable(kernels.SOURCE),
    "create_command_buffer": lambda dev, buf, ended, fresh, sem: dev.create_command_buffer(),
    "create_semaphore": lambda dev, buf, ended, fresh, sem: dev.create_semaphore(0),
    "synchronize": lambda dev, buf, ended, fresh, sem: dev.synchronize(),
    "queue_execute": lambda dev, buf, ended, fresh, sem: dev.queue_execute(ended),
    "begin": lambda dev, buf, ended, fresh, sem: fresh.begin(),
    "read": lambda dev, buf, ended, fresh, sem: buf.read(),
    "write": lambda dev, buf, ended, fresh, sem: buf.write(b"\x01"),
    "signal": lambda dev, buf, ended, fresh, sem: sem.signal(1),
}


@pytest.mark.parametrize("use", list(USES))
def test_closed_device_refuses_use(use):
    dev = hal.create_device("host")
    buf = dev.allocate(16)
    sem = dev.create_semaphore(0)
    ended = dev.create_command_buffer()
    with ended:
        ended.fill_buffer(buf, b"\x01")
    fresh = dev.create_command_buffer()
    dev.close()
    dev.close()  # idempotent
    with pytest.raises(hal.ValidationError, match=r"the host device .* is closed; create a new one"):
        USES[use](dev, buf, ended, fresh, sem)


def test_device_context_manager_closes(host):
    with hal.create_device("host") as dev:
        dev.allocate(4)
    with pytest.raises(hal.ValidationError, match="is closed"):
        dev.allocate(4)


# Capability overrides.
@pytest.mark.parametrize("name", ["update_buffer_alignment", "copy_buffer_alignment",
                                  "storage_buffer_offset_alignment"])
def test_zero_alignment_override_is_refused_or_harmless(name):
    """An alignment of 0 makes no sense; it must be refused when the device is created, or else recording
    must still work (not die with ZeroDivisionError)."""
    try:
        dev = hal.create_device("host", capabilities={name: 0})
    except hal.ValidationError:
        return
    try:
        buf = dev.allocate(16)
        cb = recording(dev)
        cb.update_buffer(hal.ref(buf, 0, 8), b"\x01" * 8)
        cb.execution_barrier()
        cb.copy_buffer(hal.ref(buf, 0, 8), hal.ref(buf, 8, 8))
        cb.execution_barrier()
        cb.dispatch(dev.load_executable(kernels.SOURCE), "scale", (1, 1, 1), (4, 1), (buf,))
        cb.end()
    finally:
        dev.close()


@pytest.mark.parametrize("overrides, shown", [
    ({"nope": 1}, r"unknown capability 'nope'"),
    ({"max_push_constants_size": -1}, r"capability max_push_constants_size must be >= 0, got -1"),
    ({"supports_float64": 1}, r"capability supports_float64 takes True or False"),
    ({"max_workgroup_count": (1, 2)}, r"capability max_workgroup_count takes three positive integers"),
])
def test_bad_capability_overrides(overrides, shown):
    with pytest.raises(hal.ValidationError, match=shown):
        hal.create_device("host", capabilities=overrides)
