"""Timeline semaphores: a 64-bit counter that only grows. Waits complete when it reaches a value.

Submissions wait on and signal (semaphore, value) pairs; the host can query, wait and signal too.
A semaphore whose signalling work failed is *failed*: waiting on it raises the failure instead of
hanging. Backends implement the four `_` hooks; argument checking lives here.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from hal.errors import ValidationError

if TYPE_CHECKING:
    from hal.device import Device

MAX_VALUE = (1 << 64) - 1


class Semaphore:
    __slots__ = ("device", "__weakref__")

    def __init__(self, device: Device) -> None:
        self.device = device

    def query(self) -> int:
        """The current value (raises the failure if the semaphore failed)."""
        return self._query()

    def wait(self, value: int, timeout: float | None = None) -> None:
        """Block until the value is >= `value`; hal.TimeoutError after `timeout` seconds (0 polls)."""
        value = check_value(value, "wait")
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0 \
                    or math.isnan(timeout):
                raise ValidationError(f"wait: timeout must be None or seconds >= 0, got {timeout!r}")
        self._wait(value, timeout)

    def signal(self, value: int) -> None:
        """Set the value from the host; it must be larger than the current one."""
        value = check_value(value, "signal")
        self.device._check_open()
        self._signal(value)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} on {self.device.driver}>"

    # Backend hooks.
    def _query(self) -> int:
        raise NotImplementedError

    def _wait(self, value: int, timeout: float | None) -> None:
        raise NotImplementedError

    def _signal(self, value: int) -> None:
        raise NotImplementedError


def check_value(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_VALUE:
        raise ValidationError(f"{what}: a semaphore value is an integer in [0, 2**64), got {value!r}")
    return value
