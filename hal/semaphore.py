"""Timeline semaphores: a 64-bit counter that only grows. Waits complete when it reaches a value.

Submissions wait on and signal (semaphore, value) pairs; the host can query, wait and signal too.
A semaphore whose signalling work failed (a kernel or a queue_host_call function raised, or the work waited on
a failed semaphore) is *failed*, for good: querying or waiting on it raises the failure (a DeviceError naming
the cause) instead of hanging, and work that waits on it fails the same way. Backends implement the `_` hooks
(their waits end once `failure` is set); argument checking lives here.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from hal.deadline import Deadline
from hal.errors import DeviceError, TimeoutError, ValidationError, integer

if TYPE_CHECKING:
    from hal.failures import Failures

MAX_VALUE = (1 << 64) - 1


class SemaphoreOwner(Protocol):
    """What a semaphore needs of its device (a hal.Device)."""

    driver: str

    def check_open(self) -> None: ...

    @property
    def failures(self) -> Failures: ...


class Semaphore(abc.ABC):
    """A timeline semaphore of one device: a 64-bit value that only grows, made by `Device.create_semaphore`.

    Queue operations wait for values (`wait=[(sem, v)]`) and signal them (`signal=[(sem, v)]`); the host waits with
    `wait()` and signals with `signal()`. `promised` is the highest value a submitted queue operation will signal (a
    later queue signal must exceed it, so queued signals never go backwards). `failure` is the error of the work
    that failed it, or None. `internal` marks one of hal's own timelines (host calls' gates, queue_read's), which
    never fails: the work a failure reaches fails through its own signals.

    Example:
        >>> sem = dev.create_semaphore(0)
        >>> dev.queue_fill(buf, np.uint32(1), wait=[(sem, 1)], signal=[(sem, 2)])
        >>> sem.signal(1)
        >>> sem.wait(2, timeout=10)
    """

    __slots__ = ("device", "promised", "failure", "internal", "__weakref__")

    def __init__(self, device: SemaphoreOwner) -> None:
        self.device = device
        self.promised = 0
        self.failure: BaseException | None = None
        self.internal = False

    def query(self) -> int:
        """The current value.

        Raises:
            DeviceError: The semaphore failed: the failure of the work that was to signal it (reported once: the
                device's synchronize() and reads do not raise it again).
        """
        if self.failure is not None:
            self.raise_failure()
        return self._query()

    def wait(self, value: int, timeout: float | None = None) -> None:
        """Block until the value is at least `value`.

        Args:
            value: The value to wait for (0 to 2**64 - 1).
            timeout: Seconds to wait at most (0 polls); None waits for as long as it takes.

        Raises:
            TimeoutError: The value was not reached in time.
            DeviceError: The semaphore failed (the failure of the work that was to signal it, reported once).
            DeviceLostError: The device was lost or closed while waiting.
            ValidationError: The value or timeout is not a number in range.
        """
        value = check_value(value, "wait")
        deadline = Deadline.of(timeout, "wait")
        if self.failure is None:
            self._wait(value, None if deadline is None else deadline.seconds)
        if self.failure is not None:
            self.raise_failure()

    def signal(self, value: int) -> None:
        """Set the value from the host, waking the work that waits for it. (A queued signal of a smaller value, run
        later, then leaves the value as it is.)

        Args:
            value: Larger than the current value (and than what submitted work still signals, where the backend
                needs that).

        Raises:
            ValidationError: The value does not exceed the current one, or the device is closed.
            DeviceError: The semaphore failed.
        """
        value = check_value(value, "signal")
        self.device.check_open()
        if self.failure is not None:
            self.raise_failure()
        self._signal(value)

    def fail(self, error: BaseException) -> None:
        """Mark the semaphore failed by `error` (the first failure stays) and wake its waiters."""
        if self.internal:
            return
        if self.failure is None:
            self.failure = error
        self._wake()

    def raise_failure(self) -> None:
        """Raise the failure (it is then reported: the device's synchronize() and reads do not raise it again)."""
        failure = self.failure
        self.device.failures.observed(failure)
        cls = type(failure) if isinstance(failure, DeviceError) else DeviceError
        raise cls(f"the semaphore failed: {failure}") from failure

    def check_queue_signal(self, value: int, what: str = "queue_execute") -> None:
        """Refuse a queue signal of `value` that does not exceed the current or promised value."""
        floor = max(self.query(), self.promised)
        if value <= floor:
            raise ValidationError(f"{what}: signal value {value} is not above {floor}, the semaphore's "
                                  f"current or already promised value; timeline values only grow")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} on {self.device.driver}>"

    # The backend contract (arguments checked; the failure checks are the public methods').
    @abc.abstractmethod
    def _query(self) -> int:
        """The current value."""

    @abc.abstractmethod
    def _wait(self, value: int, timeout: float | None) -> None:
        """Block until the value reaches `value` or `failure` is set (TimeoutError after `timeout` seconds; None:
        no limit); DeviceLostError if the device closes or is lost meanwhile."""

    @abc.abstractmethod
    def _signal(self, value: int) -> None:
        """Set the value from the host (above the current one and any queued signal: checked)."""

    def _wake(self) -> None:
        """Make waits in `_wait` see `failure` now (backends whose waits poll it need nothing: this default)."""
        return None


def check_value(value: Any, what: str) -> int:
    return integer(value, f"{what}: a semaphore value", 0, MAX_VALUE)


def check_host_signal(value: int, current: int, pending: int | None = None, why: str = "") -> None:
    """A host signal must exceed the current value, and stay below `pending`, the value submitted work
    will still signal (`why`: the backend's reason, opening the advice)."""
    if value <= current:
        raise ValidationError(f"signal: {value} is not above the current value {current}; timeline values only grow")
    if pending is not None and value >= pending:
        raise ValidationError(f"signal: a submitted queue_execute will still signal {pending}; {why}signal at most "
                              f"{pending - 1} from the host until that submission has run")


def wait_timed_out(value: int, current: int, timeout: float, due: int | None) -> TimeoutError:
    """The error of a semaphore wait that timed out, naming what would move it on: `due`, the smallest value queued
    work still signals (None: none does)."""
    what = ("no queued submission signals it, so only a host signal can" if due is None else
            f"queued work that signals it (next {due}) is still waiting or running")
    return TimeoutError(f"semaphore wait: the value is {current}, still below {value} after {timeout} s; {what}")


def queue_deadlock(value: int, current: int) -> ValidationError:
    """The error for waiting on submitted work that waits for a semaphore value only the host can give,
    when no other thread exists to give it: waiting would never end."""
    return ValidationError(f"the queue waits for a semaphore to reach {value} (it is at {current}) and no other "
                           f"thread can signal it, so waiting for submitted work would never end; signal it "
                           f"first (sem.signal({value})), then read, write or synchronize")


def waits_for_the_host(pending: Iterable[tuple[Any, tuple, tuple]],
                       current: Callable[[Semaphore], int]) -> Iterator[tuple[Semaphore, int]]:
    """In submission order, the waits of unfinished submissions ((key, waits, signals) entries) that
    neither the semaphore's current value nor an earlier submission's signal reaches: only a host signal
    can release them. Lazy: `current` is read at each wait, so a caller may signal as it goes."""
    promised: dict[Semaphore, int] = {}
    for _, waits, signals in pending:
        for sem, value in waits:
            if max(current(sem), promised.get(sem, 0)) < value:
                yield sem, value
        for sem, value in signals:
            promised[sem] = max(promised.get(sem, 0), value)


def semaphore_pairs(device: Any, pairs: Iterable[tuple[Semaphore, int]], role: str,
                    what: str = "queue_execute") -> tuple[tuple[Semaphore, int], ...]:
    """A queue operation's `wait` or `signal` (`role`) list, checked: (semaphore of `device`, value) pairs, a signal
    above the semaphore's current and promised value; ValidationError naming `what` otherwise."""
    if type(pairs) in (tuple, list) and not pairs:
        return ()
    result = []
    try:
        items = list(pairs)
    except TypeError:
        raise ValidationError(f"{what}: {role} must be a list of (semaphore, value) pairs") from None
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Semaphore)):
            raise ValidationError(f"{what}: {role} entries must be (semaphore, value) pairs, got {item!r}")
        sem, value = item
        if sem.device is not device:
            raise ValidationError(f"{what}: a {role} semaphore belongs to another device ({sem.device!r}), not "
                                  f"to this one ({device!r})")
        value = check_value(value, f"{what} {role}")
        if role == "signal":
            sem.check_queue_signal(value, what)
        result.append((sem, value))
    return tuple(result)
