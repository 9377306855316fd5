"""A clock in the CUDA stream (hal.tracing's queue clock): each mark is an event recorded on the device's stream,
read back as seconds from the first once the stream passed it."""

from __future__ import annotations

import contextlib
from typing import Any

from cuda.bindings import driver

from backends.cuda_graph.api import call
from hal.errors import HalError


class EventClock:
    what = ("CUDA events between the commands, each command run alone on the stream (a stream launch; a graph for "
            "a dispatch_indirect or a region)")
    capacity = None

    def __init__(self, device: Any) -> None:
        self.device = device
        self.events: list[Any] = []

    def mark(self) -> None:
        self.device.activate()
        event = call(driver.cuEventCreate, driver.CUevent_flags.CU_EVENT_DEFAULT)
        self.events.append(event)
        call(driver.cuEventRecord, event, self.device.stream)

    def seconds(self) -> list[float]:
        """The marks' times (after a synchronize), from the first."""
        return [call(driver.cuEventElapsedTime, self.events[0], e) / 1e3 for e in self.events]

    def close(self) -> None:
        """Destroy the events (nothing to do once the device is closed: its context went with them)."""
        events, self.events = self.events, []
        if self.device.closed:
            return
        with contextlib.suppress(HalError):  # a lost device: the failure that got here is the one to report
            self.device.activate()
            for event in events:
                driver.cuEventDestroy(event)
