"""A CUDA device's context, and the rule after a fault.

hal runs on the GPU's primary context, the one the CUDA runtime (torch, CuPy) shares in the process. A kernel fault
(an illegal address, a trap, a device-side assert) is sticky for the whole process, not only for its context: on an
H200 with driver 580, after one, cuDevicePrimaryCtxReset returns CUDA_SUCCESS and the next cuDevicePrimaryCtxRetain
still returns CUDA_ERROR_ILLEGAL_ADDRESS, as does cuCtxCreate for a new context (bench/results/
nvidia-h200-2026-11-29-device-lost.md); CUDA documents these errors as leaving "the process in an inconsistent
state": "to continue using CUDA, the process must be terminated and relaunched". So once a hal device sees one,
hal refuses new CUDA devices in the process at once, saying so (instead of failing at the first call), and a runtime
that must go on runs its GPU work in a process it can restart (docs/backends/cuda.md, "After a fault"). Vulkan devices
and other processes are not touched.
"""

from __future__ import annotations

import threading
from typing import Any

from cuda.bindings import driver

from backends.cuda_graph.api import call
from hal.errors import DeviceLostError

_lock = threading.Lock()
_fault: str | None = None  # the first fault a hal device of this process saw


def acquire(cu_device: Any, ordinal: int) -> Any:
    """The primary context of GPU `ordinal`, retained and current in this thread; DeviceLostError once a fault has
    made CUDA unusable in this process."""
    with _lock:
        if _fault is not None:
            raise DeviceLostError(f"CUDA cannot be used in this process any more: a kernel faulted ({_fault}), and "
                                  f"CUDA keeps such a fault until the process ends; restart the process (run GPU "
                                  f"work in a child process to keep the rest alive); Vulkan devices and other "
                                  f"processes are not affected")
    handle = call(driver.cuDevicePrimaryCtxRetain, cu_device)
    call(driver.cuCtxSetCurrent, handle)
    return handle


def lost(fault: str) -> None:
    """A hal device saw a fault: no CUDA device is created in this process from now on."""
    global _fault
    with _lock:
        if _fault is None:
            _fault = fault


def release(cu_device: Any) -> None:
    """A device closes: give the primary context back. Never raises."""
    driver.cuDevicePrimaryCtxRelease(cu_device)
