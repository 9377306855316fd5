"""The exception hierarchy. Every failure hal reports is a HalError, so callers can catch one base."""

from __future__ import annotations

import builtins
import numbers


class HalError(Exception):
    """Base of every error hal raises."""


class ValidationError(HalError, ValueError):
    """Bad input or misuse of the API, caught before any device state changed."""


class CompileError(HalError):
    """A compiler or linker rejected a source; `log` holds what it printed."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(f"{message}\n{log}" if log else message)
        self.log = log


class UnsupportedError(HalError):
    """The device, driver or build cannot do what was asked (format, capability, driver)."""


class DeviceError(HalError):
    """The device or its driver failed while doing valid work."""


class OutOfMemoryError(DeviceError):
    """An allocation could not be satisfied."""


class DeviceLostError(DeviceError):
    """The device is unusable (fault, reset, driver loss); create a new one."""


class TimeoutError(HalError, builtins.TimeoutError):  # noqa: A001 - the public name DESIGN.md gives
    """A wait did not complete in the time given."""


def integer(value: object, what: str, minimum: int | None = None, maximum: int | None = None) -> int:
    """`value` as an int (Python or numpy integers, not bools), within [minimum, maximum]; else
    ValidationError naming `what`. Every module checks integer arguments through this."""
    if type(value) is not int:  # a plain int needs no further look; an abstract-class check costs microseconds
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValidationError(f"{what} must be an integer, got {type(value).__name__} {value!r}")
        value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValidationError(f"{what} must be {bounds}, got {value}")
    return value
