"""The CUDA driver API through cuda-python (cuda.bindings), and CUresult -> hal errors.

Every call returns (CUresult, values...); `call` unpacks it and turns a failure into the hal error
naming the call and the code. Faults inside kernels (an illegal address, a trap) are sticky: the
context is unusable from then on, so they become DeviceLostError.
"""

from __future__ import annotations

from typing import Any

from cuda.bindings import driver

from hal.errors import DeviceError, DeviceLostError, OutOfMemoryError

R = driver.CUresult
SUCCESS = R.CUDA_SUCCESS
NOT_READY = R.CUDA_ERROR_NOT_READY
_OUT_OF_MEMORY = {R.CUDA_ERROR_OUT_OF_MEMORY}
_LOST = {R.CUDA_ERROR_ILLEGAL_ADDRESS, R.CUDA_ERROR_LAUNCH_TIMEOUT, R.CUDA_ERROR_ASSERT,
         R.CUDA_ERROR_HARDWARE_STACK_ERROR, R.CUDA_ERROR_ILLEGAL_INSTRUCTION, R.CUDA_ERROR_MISALIGNED_ADDRESS,
         R.CUDA_ERROR_INVALID_ADDRESS_SPACE, R.CUDA_ERROR_INVALID_PC, R.CUDA_ERROR_LAUNCH_FAILED,
         R.CUDA_ERROR_ECC_UNCORRECTABLE, R.CUDA_ERROR_CONTEXT_IS_DESTROYED}
LOST_CODES = frozenset(int(r) for r in _LOST)


def error_name(result: Any) -> str:
    code = int(result)
    try:
        err, name = driver.cuGetErrorName(R(code))
        if err == SUCCESS and name:
            return f"{name.decode()} ({code})"
    except ValueError:  # a code this binding does not know
        pass
    return f"CUresult {code}"


def fail(result: Any, what: str) -> DeviceError:
    """The hal error for a failing CUresult of call `what`."""
    message = f"{what} failed: {error_name(result)}"
    code = int(result)
    if code in LOST_CODES:
        return DeviceLostError(f"{message}; a kernel faulted, and CUDA keeps such a fault until the process ends: "
                               f"close this device and restart the process to use CUDA again (run GPU work in a "
                               f"child process to keep the rest alive); Vulkan devices are not affected")
    if any(code == int(r) for r in _OUT_OF_MEMORY):
        return OutOfMemoryError(message)
    return DeviceError(message)


def call(function: Any, *args: Any) -> Any:
    """function(*args) -> its value (None, one value, or a tuple of values); raises the hal error."""
    result = function(*args)
    err = result[0]
    if err != SUCCESS:
        raise fail(err, function.__name__)
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]
