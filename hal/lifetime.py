"""Deferred release of device objects, shared by every backend.

What a device may still use when its owner lets it go (a buffer's memory, a module, a graph, a command
pool) is destroyed only once the work submitted before that moment has finished: IREE's HAL retires
resources the same way, with the semaphore value of their last use. Owners are often let go by the
garbage collector, in any thread, so a release is only noted; the backend calls `collect()` at its safe
points (a submission, an allocation, a wait), which stamps what was noted with a *mark* of the work
queued so far and destroys what the queue has got past.

A backend gives `mark()`, which stands for the work queued so far (Vulkan: the last submitted timeline
value; CUDA: an event recorded on the stream; host: the number of submissions queued), `finished(mark)`,
which says whether the queue has got past it, and optionally `forget(mark)` to free a mark. Marks are
taken in queue order, so the first unfinished one means every later one is unfinished too.
"""

from __future__ import annotations

import collections
import threading
import weakref
from collections.abc import Callable
from typing import Any

from hal.errors import HalError

Destroy = tuple[Callable[..., None], tuple]  # destroy(*args)


class Lifetime:
    """The objects one device holds for their owners, and those waiting for the queue to be done with them.

    `on_release()`, if given, is called whenever something is left to destroy (the GPU backends use it to
    stop resubmissions that skip `collect()`). `settle()`, if given, is called before anything is destroyed: a
    backend whose own thread may still be using the objects waits for it there (Vulkan's call stream).
    """

    def __init__(self, mark: Callable[[], Any], finished: Callable[[Any], bool],
                 forget: Callable[[Any], None] | None = None, on_release: Callable[[], None] | None = None,
                 settle: Callable[[], None] | None = None) -> None:
        self._mark, self._finished, self._forget = mark, finished, forget
        self._on_release, self._settle = on_release, settle
        self._lock = threading.RLock()  # reentrant: a finalizer may run inside the collector, anywhere
        self._live: dict[int, tuple[Destroy, bool, weakref.ref]] = {}  # what owners hold: (destroy, ordered,
        # the owner's weak reference), by the reference's id
        self._released: list[tuple[Destroy, bool]] = []  # let go, not yet stamped with a mark
        self._graves: collections.deque[tuple[Any, list[Destroy]]] = collections.deque()  # (mark, what waits on it)
        self.closed = False

    def track(self, owner: object, destroy: Callable[..., None], *args: Any, ordered: bool = False) -> Release:
        """Run destroy(*args) once `owner` is released (call the returned Release) or collected and the work
        submitted until then has finished, or at close(). `ordered`: destroy() is itself ordered after the
        work queued so far (a stream-ordered free), so it runs at the next collect() without a mark."""
        # The weak reference lives in the table, not in the owner: one the owner alone held would die with it in
        # a collected cycle, and its callback with it.
        ref = weakref.ref(owner, self._collected)
        with self._lock:
            self._live[id(ref)] = ((destroy, args), ordered, ref)
        return Release(self, ref)

    def retire(self, destroy: Callable[..., None], *args: Any) -> None:
        """Run destroy(*args) once the work submitted so far has finished (at the next collect() that sees it)."""
        with self._lock:
            self._notify()  # before it is pending: no resubmission may pass the check in between
            self._released.append(((destroy, args), False))

    @property
    def pending(self) -> bool:
        """Is anything let go but not yet destroyed?"""
        return bool(self._released or self._graves)

    def collect(self) -> None:
        """Stamp what was let go with a mark of the work queued now, then destroy what the queue has finished
        with, oldest first. A no-op once closed."""
        if self.closed or not (self._released or self._graves):
            return
        with self._lock:
            released, self._released = self._released, []
        waiting = [item for item, ordered in released if not ordered]
        if waiting:
            try:
                mark = self._mark()
            except BaseException:  # nothing is lost: collected again later, or destroyed at close
                with self._lock:
                    self._released[:0] = released
                raise
            with self._lock:
                self._graves.append((mark, waiting))
        try:
            self._destroy([item for item, ordered in released if ordered])
            self._bury()
        finally:
            if self._graves:
                self._notify()  # a submission may have seen nothing pending meanwhile

    def _bury(self) -> None:
        """Destroy what waits on marks the queue has got past, oldest first. `finished` is asked outside the
        lock, which a finalizer may wait for while holding a lock of the backend's."""
        while self._graves:  # (read without the lock: nothing to bury is the common case, the lock costs more)
            with self._lock:
                if not self._graves:
                    return
                mark = self._graves[0][0]
            if not self._finished(mark):
                return
            with self._lock:
                if not self._graves or self._graves[0][0] is not mark:
                    continue  # another thread took it
                _, items = self._graves.popleft()
            try:
                self._destroy(items)
            finally:
                if self._forget is not None:
                    self._forget(mark)

    def close(self) -> None:
        """Destroy everything now, held or waiting (the device has waited for its queue). Idempotent; a device
        error on the way (a lost device refusing a free) is ignored: closing never raises."""
        if self.closed:
            return
        self.closed = True
        with self._lock:
            graves, self._graves = list(self._graves), collections.deque()
            items = [item for item, _ in self._released] + [item for _, batch in graves for item in batch]
            items += [item for item, _, _ in self._live.values()]
            self._released, self._live = [], {}
        for item in items:
            try:
                self._destroy([item])
            except HalError:
                pass
        if self._forget is not None:
            for mark, _ in graves:
                try:
                    self._forget(mark)
                except HalError:
                    pass

    def _collected(self, ref: weakref.ref) -> None:
        if id(ref) not in self._live:  # let go already (a Release called): nothing to take, and no lock
            return
        with self._lock:
            entry = self._live.pop(id(ref), None)
            if entry is not None:
                self._notify()  # before it is pending: no resubmission may pass the check in between
                self._released.append(entry[:2])

    def _unused(self, ref: weakref.ref) -> None:
        with self._lock:
            entry = self._live.pop(id(ref), None)
            if entry is not None:
                self._released.append((entry[0], True))  # no submitted work to wait for: no mark

    def _notify(self) -> None:
        if self._on_release is not None:
            self._on_release()

    def _destroy(self, items: list[Destroy]) -> None:
        """Run every destroy(*args), once settled, also after one raised; then raise the first error."""
        if not items:
            return
        if self._settle is not None:
            self._settle()
        error = None
        for destroy, args in items:
            try:
                destroy(*args)
            except Exception as e:
                error = error or e
        if error is not None:
            raise error


class Release:
    """What Lifetime.track returns: calling it lets the owner's object go now, as if the owner were collected
    (its destroy still waits for the work submitted until then); later calls, or the owner's collection, do
    nothing more."""

    __slots__ = ("lifetime", "ref")

    def __init__(self, lifetime: Lifetime, ref: weakref.ref) -> None:
        self.lifetime, self.ref = lifetime, ref  # holding the reference keeps its id, the key, its own

    def __call__(self) -> None:
        self.lifetime._collected(self.ref)

    def unused(self) -> None:
        """Let the owner's object go, as one that no submitted work uses (a recording never submitted): destroyed at
        the next collect(), without waiting for the queue. Later calls, or the owner's collection, do nothing more."""
        self.lifetime._unused(self.ref)

