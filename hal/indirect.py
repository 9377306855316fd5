"""What the GPU backends share about dispatch_indirect: the guard's limits and its fault record.

A GPU reads the workgroup counts of a dispatch_indirect itself, so no host check can stand between a count
above the device's max_workgroup_count and the driver (on Vulkan that is undefined behaviour; on CUDA an
error that would fail the whole graph). Each backend runs a small guard just before such a dispatch (a
compute shader on Vulkan, a kernel node setting a device-updatable node on CUDA): it passes counts within
the limits, turns zero counts into no work, and for counts above the limits runs nothing and writes the
first such event into the device's fault record, which the next synchronize() raises as a DeviceError.
"""

from __future__ import annotations

import numpy as np

from hal.errors import DeviceError

FAULT_WORDS = 8  # flag (0: none), command index, x, y, z, three words spare
FAULT_BYTES = 4 * FAULT_WORDS


def raise_fault(words: np.ndarray, limit: tuple[int, int, int]) -> None:
    """Raise the DeviceError a fault record holds (uint32 words, cleared here), if any."""
    if not words[0]:
        return
    command, x, y, z = (int(w) for w in words[1:5])
    words[:] = 0
    raise DeviceError(f"a dispatch_indirect (command {command} of its command buffer) read workgroup counts "
                      f"({x}, {y}, {z}), above the device's max_workgroup_count {limit}; it ran nothing. Keep the "
                      f"counts within the limit")
