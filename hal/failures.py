"""Failures of a device's queued work, reported once, at the first place that observes them.

A failure delivered to a signal semaphore is raised by that semaphore's wait or query (which marks it `observed`),
and not again; synchronize(), a buffer's read() and write(), and a wait on queue_read's signal raise each failure
of earlier work that nothing has raised yet, once. So a read never returns bytes silently after earlier work failed.
"""

from __future__ import annotations

import threading

from hal.errors import DeviceError


class Failures:
    """One device's failures of queued work that nothing has raised yet, oldest first."""

    def __init__(self) -> None:
        self.unreported: list[BaseException] = []
        self.lock = threading.Lock()

    def note(self, error: BaseException) -> None:
        """Queued work failed with `error` (noted once, however many semaphores it fails)."""
        with self.lock:
            if not any(e is error for e in self.unreported):
                self.unreported.append(error)

    def observed(self, error: BaseException) -> None:
        """A semaphore's wait or query raised `error`: it is reported, and raised nowhere else again."""
        with self.lock:
            self.unreported = [e for e in self.unreported if e is not error]

    def take_oldest(self) -> BaseException | None:
        """The oldest failure nothing has raised yet, now reported by the caller (None: there is none)."""
        with self.lock:
            return self.unreported.pop(0) if self.unreported else None

    def raise_unreported(self, what: str) -> None:
        """Raise the failures nothing has raised yet, as one DeviceError (`what`: where they surface)."""
        with self.lock:
            failures, self.unreported = self.unreported, []
        if failures:
            more = f" (and {len(failures) - 1} later failure(s) of queued work)" if len(failures) > 1 else ""
            raise DeviceError(f"{what}: {failures[0]}{more}") from failures[0]
