"""Pinned host memory holding a command buffer's update data, where the GPU copies it from (a memcpy node reads
it at each run, so the data stays as long as the command buffer's graph)."""

from __future__ import annotations

from typing import Any, Protocol

from backends.cuda_graph.buffer import host_alloc
from hal.lifetime import Release

ARENA_BYTES = 1 << 20


class ArenaDevice(Protocol):
    """What the arena needs of its CUDA device."""

    def track(self, owner: object, kind: str, handle: Any) -> Release: ...


class PinnedArena:
    """Pinned host memory holding a command buffer's update data, where the GPU copies it from."""

    __slots__ = ("device", "chunks", "used", "finalizers", "__weakref__")

    def __init__(self, device: ArenaDevice) -> None:
        self.device = device
        self.chunks = []
        self.used = 0
        self.finalizers = []

    def put(self, data: bytes) -> int:
        """Copy `data` in; its device address."""
        n = len(data)
        if not self.chunks or self.used + n > len(self.chunks[-1][2]):
            chunk = host_alloc(max(ARENA_BYTES, n))
            self.chunks.append(chunk)
            self.finalizers.append(self.device.track(self, "host", chunk[0]))
            self.used = 0
        _, device_address, view = self.chunks[-1]
        view[self.used:self.used + n] = memoryview(data)
        address = device_address + self.used
        self.used += -(-n // 16) * 16
        return address

    def release(self) -> None:
        """Free the chunks once the work submitted so far is done."""
        for finalizer in self.finalizers:
            finalizer()
