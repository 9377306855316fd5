"""queue_read's staging: host-visible buffers copies write and the host reads, a few kept for reuse (on a GPU,
allocating host-visible memory costs more than a small copy)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np

from hal.buffer import Buffer

SMALLEST_BYTES, KEPT_BYTES, KEPT = 64 << 10, 16 << 20, 4  # the smallest made; the largest kept, and how many


class Readbacks:
    """Staging buffers made by `make(nbytes)` (the backend's: a buffer and the numpy view of its bytes)."""

    def __init__(self, make: Callable[[int], tuple[Buffer, np.ndarray]]) -> None:
        self.make = make
        self.kept: list[tuple[Buffer, np.ndarray]] = []
        self.closed = False
        # A lock of its own: a read's host call gives its staging back while another read, holding the device's
        # read lock, may wait on a driver call for the queue, which waits for that host call.
        self.lock = threading.Lock()

    def take(self, nbytes: int) -> tuple[Buffer, np.ndarray]:
        """A kept one that fits, else a new one (a power of two from SMALLEST_BYTES)."""
        with self.lock:
            for i, (buffer, _) in enumerate(self.kept):
                if buffer.size >= nbytes:
                    return self.kept.pop(i)
        return self.make(max(SMALLEST_BYTES, 1 << (nbytes - 1).bit_length()))

    def give(self, buffer: Buffer, view: np.ndarray) -> None:
        """Keep `buffer` for the next read (a few, and not huge ones), or release it."""
        with self.lock:
            if buffer.size <= KEPT_BYTES and len(self.kept) < KEPT and not self.closed:
                self.kept.append((buffer, view))
                return
        buffer.release()

    def close(self) -> None:
        """Forget the kept ones (freed with the device)."""
        with self.lock:
            self.closed = True
            self.kept.clear()
