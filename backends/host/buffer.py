"""Host buffers: a numpy byte array."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from hal.buffer import Buffer, BufferUsage
from hal.errors import OutOfMemoryError
from hal.lifetime import Lifetime


class MemoryDevice(Protocol):
    """What buffers need of their host device."""

    lifetime: Lifetime

    def count_memory(self, delta: int) -> None: ...


class HostBuffer(Buffer):
    __slots__ = ("data",)

    def __init__(self, device: MemoryDevice, size: int, usage: BufferUsage) -> None:
        try:
            self.data = np.zeros(size, np.uint8)
        except (MemoryError, ValueError) as e:
            raise OutOfMemoryError(f"host: cannot allocate {size} bytes: {e}") from e
        super().__init__(device, size, usage)
        device.count_memory(size)

    def _read(self, offset: int, nbytes: int) -> np.ndarray:
        return self.data[offset:offset + nbytes].copy()

    def _write(self, offset: int, data: memoryview) -> None:
        self.data[offset:offset + data.nbytes] = np.frombuffer(data, np.uint8)

    def _free(self) -> None:
        """Drop the memory once the work submitted so far, which may use it, is done."""
        self.device.lifetime.retire(_drop, self)
        self.device.lifetime.collect()


def _drop(buffer: HostBuffer) -> None:
    buffer.data = None
    buffer.device.count_memory(-buffer.size)
