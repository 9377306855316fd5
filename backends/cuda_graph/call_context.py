"""What a call's function gets on CUDA (CommandBuffer.call; hal.calls): the stream to queue its work on (captured
into a child graph node of the command buffer's graph), per binding its device address and size, its constants'
values, and each binding as an array any CUDA library takes (`__cuda_array_interface__`: torch.as_tensor,
cupy.asarray, numba).

A capture forbids what would wait for the captured work: synchronizing the stream, its events or the device, blocking
copies on it, querying it (hal captures in relaxed mode: a library may allocate and initialise itself meanwhile).
Work queued on another stream is not captured: it runs once, now (torch's current stream outside
`with torch.cuda.stream(torch.cuda.ExternalStream(ctx.stream))`). Memory a library allocates during the capture and
frees afterwards is used again by its next owner while the graph still writes it: write into the bindings (torch:
`out=`), or keep what the library allocated for as long as the command buffer lives."""

from __future__ import annotations

from typing import Any

import numpy as np

from hal.errors import DeviceError, ValidationError

# CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900) to CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD (908): what a function did
# that a capture forbids.
CAPTURE_ERRORS = range(900, 909)
FORBIDDEN = ("synchronizing ctx.stream, an event recorded on it or the device, a blocking copy, querying the stream, "
             "or work on another stream that waits for ctx.stream and is not joined back to it")


class CallFailed(DeviceError):
    """A call's function failed while its work was captured: it raised, or it did what a capture forbids. The
    command buffer is left as before (end() or the submission raised; nothing was built or submitted)."""

    @classmethod
    def of(cls, command: int, raised: BaseException | None, result: int) -> CallFailed:
        if result in CAPTURE_ERRORS:
            from cuda.bindings import driver
            said = f"; it raised {raised!r}" if raised is not None else ""
            error = cls(f"command {command} (call): its function did what CUDA forbids while a stream is captured "
                        f"({driver.CUresult(result).name}{said}): {FORBIDDEN}. Queue only asynchronous work on "
                        f"ctx.stream, into the bindings (hal.calls)")
        else:
            error = cls(f"command {command} (call): its function raised {raised!r} while its work was captured")
        error.__cause__ = raised
        return error


class CudaArray:
    """Binding i of a call as a one-dimensional device array of `dtype`: `__cuda_array_interface__` (version 3, no
    stream to synchronize with: hal orders the call), `pointer`, `shape`, `dtype`."""

    __slots__ = ("pointer", "shape", "dtype")

    def __init__(self, pointer: int, nbytes: int, dtype: Any) -> None:
        self.dtype = np.dtype(dtype)
        if nbytes % self.dtype.itemsize:
            raise ValidationError(f"a binding of {nbytes} bytes is not a whole number of {self.dtype} elements")
        self.pointer = pointer
        self.shape = (nbytes // self.dtype.itemsize,)

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.pointer, False), "version": 3,
                "strides": None, "stream": None}


class CudaCallContext:
    """`stream`: the CUstream to queue the work on, as an integer (torch: `torch.cuda.ExternalStream(ctx.stream)`;
    cuda-bindings: `driver.CUstream(ctx.stream)`); `device`: the CUDA device ordinal; `pointer(i)`, `size(i)`:
    binding i's device address and length in bytes; `binding(i, dtype)`: binding i as a CudaArray; `constants`:
    the values of the call's constants for this capture."""

    __slots__ = ("stream", "device", "_buffers", "constants")

    def __init__(self, stream: int, device: int, buffers: tuple[tuple[int, int], ...], constants: tuple) -> None:
        self.stream = stream
        self.device = device
        self._buffers = buffers
        self.constants = constants

    def _buffer(self, index: int) -> tuple[int, int]:
        if not 0 <= index < len(self._buffers):
            raise ValidationError(f"binding {index}: the call has {len(self._buffers)} bindings")
        return self._buffers[index]

    def pointer(self, index: int) -> int:
        return self._buffer(index)[0]

    def size(self, index: int) -> int:
        return self._buffer(index)[1]

    def binding(self, index: int, dtype: Any = np.uint8) -> CudaArray:
        return CudaArray(*self._buffer(index), dtype)
