"""The end in time of `synchronize(timeout=...)`: what the backends' waits check, and the error naming what still runs
when it passes (`Deadline.of` also checks a semaphore wait's timeout). A timeout loses nothing: the work keeps
running, a later synchronize() waits for it again, and what is queued after it runs once it ends (a device runs its
submissions in order; another device on the same GPU runs meanwhile)."""

from __future__ import annotations

import math
import time
from typing import Any

from hal.errors import TimeoutError, ValidationError


class Deadline:
    """`seconds` from now: `remaining()`, `passed()`, and `error(device, running)` to raise once it has passed."""

    __slots__ = ("seconds", "at")

    def __init__(self, seconds: float) -> None:  # (as given: an int prints as one)
        self.seconds = seconds
        self.at = time.monotonic() + seconds

    @classmethod
    def of(cls, timeout: Any, what: str) -> Deadline | None:
        """A Deadline for `timeout` seconds (None or infinity: none); ValidationError for anything else."""
        if timeout is None:
            return None
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
            raise ValidationError(f"{what}: timeout must be None or seconds >= 0, got {timeout!r}")
        return None if math.isinf(timeout) else cls(timeout)

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def error(self, device: Any, running: str) -> TimeoutError:
        return TimeoutError(f"synchronize(timeout={self.seconds:g}): {running} of {device!r} still running after "
                            f"{self.seconds:g} s; the device is not lost: a later synchronize() waits for it again, "
                            f"and the work queued after it runs once it ends (another device on the GPU runs "
                            f"meanwhile)")
