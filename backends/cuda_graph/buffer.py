"""CUDA buffers: device memory from the device's stream-ordered pool, shared without copies.

Memory comes from cuMemAllocAsync on the device's stream and goes back with cuMemFreeAsync on it,
so a released buffer is freed exactly when the work submitted before the release is done, with no
host wait. `read`/`write` go through pinned staging. Buffers speak the CUDA Array Interface and
DLPack, so PyTorch, CuPy or JAX see the memory in place; `MemoryDevice.import_buffer` goes the other way.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from cuda.bindings import driver

from backends.cuda_graph.api import call
from hal.buffer import Buffer, BufferUsage
from hal.lifetime import Release

DLPACK_CUDA = 2  # kDLCUDA


class MemoryDevice(Protocol):
    """What buffers need of their CUDA device."""

    ordinal: int
    stream_handle: int

    def allocate_memory(self, nbytes: int) -> int: ...

    def track(self, owner: object, kind: str, handle: Any) -> Release: ...

    def collect(self) -> None: ...

    def staging_copy(self, address: int, host: np.ndarray, to_device: bool) -> None: ...

    def core_view(self, buffer: CudaBuffer) -> Any: ...

    def order_consumer(self, stream: Any) -> None: ...


class CudaBuffer(Buffer):
    """`address` is the device pointer (0 for an empty buffer); `owner` keeps imported memory alive."""

    __slots__ = ("address", "owner", "_core", "_finalizer")

    def __init__(self, device: MemoryDevice, size: int, usage: BufferUsage, address: int | None = None,
                 owner: Any = None) -> None:
        self._finalizer = None
        if address is None:
            address = device.allocate_memory(size) if size else 0
            if address:
                self._finalizer = device.track(self, "memory", address)
        elif owner is not None:  # released or collected: the owner is let go once hal's work is done
            self._finalizer = device.track(self, "owner", owner)
        self.address = address
        self.owner = owner  # imported: the object whose memory this is; never freed by hal
        self._core: Any = None  # a cuda.core view, made for the first DLPack export
        super().__init__(device, size, usage)
        self.handle = address  # what the compiled command_buffer module reads

    def own_host_memory(self, host: int) -> None:
        """The buffer is pinned host memory (host pointer `host`, allocated by host_alloc): free it with the
        buffer, once the work submitted until then is done."""
        self._finalizer = self.device.track(self, "host", host)

    @property
    def imported(self) -> bool:
        return self.owner is not None

    def _read(self, offset: int, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, np.uint8)
        if nbytes:
            self.device.staging_copy(self.address + offset, out, to_device=False)
        return out

    def _write(self, offset: int, data: memoryview) -> None:
        self.device.staging_copy(self.address + offset, np.frombuffer(data, np.uint8), to_device=True)

    def _free(self) -> None:
        self.owner = None  # the device keeps it until the work submitted so far is done
        self._core = None
        if self._finalizer is not None:
            self._finalizer()
            self.device.collect()

    # Sharing with other libraries.
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        self._check_live("__cuda_array_interface__")
        return {"shape": (self.size,), "typestr": "|u1", "data": (self.address, False), "version": 3,
                "strides": None, "stream": self.device.stream_handle}

    def __dlpack_device__(self) -> tuple[int, int]:
        return DLPACK_CUDA, self.device.ordinal

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        """A DLPack capsule of the bytes (uint8, one dimension), ready for work on the consumer's `stream`
        once what was submitted before is done."""
        self._check_live("__dlpack__")
        self.device.order_consumer(stream)
        if self._core is None:
            self._core = self.device.core_view(self)
        kwargs = {"stream": -1}  # ordering is done above
        if max_version is not None:
            kwargs["max_version"] = max_version
        if dl_device is not None:
            kwargs["dl_device"] = dl_device
        if copy is not None:
            kwargs["copy"] = copy
        return self._core.__dlpack__(**kwargs)


def host_alloc(nbytes: int) -> tuple[int, int, np.ndarray]:
    """Pinned host memory the GPU can address: (host pointer, device pointer, numpy view of the bytes)."""
    flags = driver.CU_MEMHOSTALLOC_DEVICEMAP | driver.CU_MEMHOSTALLOC_PORTABLE
    host = int(call(driver.cuMemHostAlloc, nbytes, flags))
    device = int(call(driver.cuMemHostGetDevicePointer, host, 0))
    view = np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * nbytes).from_address(host))
    return host, device, view
