"""hal.lifetime: device objects are destroyed only once the queue is past the work submitted before their
release, nothing is lost on a failing path, and close() destroys the rest."""

from __future__ import annotations

import gc

import pytest

from hal.errors import DeviceError, DeviceLostError
from hal.lifetime import Lifetime


class Queue:
    """A stand-in for a device's queue: marks are submission counts, `done` how many have run."""

    def __init__(self) -> None:
        self.submitted = self.done = 0
        self.failing_mark = False
        self.notified = 0

    def mark(self) -> int:
        if self.failing_mark:
            raise DeviceError("cannot record a mark")
        return self.submitted

    def finished(self, mark: int) -> bool:
        return mark <= self.done

    def lifetime(self) -> Lifetime:
        return Lifetime(self.mark, self.finished, on_release=self.notify)

    def notify(self) -> None:
        self.notified += 1


class Owner:
    pass


def test_a_release_waits_for_the_work_submitted_before_it():
    queue, destroyed = Queue(), []
    life = queue.lifetime()
    owner = Owner()
    release = life.track(owner, destroyed.append, "memory")
    queue.submitted = 3
    release()
    assert life.pending and queue.notified == 1
    life.collect()
    assert destroyed == [] and life.pending  # the queue has not run submission 3
    queue.submitted, queue.done = 5, 3  # later work does not hold it back: its mark was 3
    life.collect()
    assert destroyed == ["memory"] and not life.pending
    release()  # releasing twice destroys once
    life.collect()
    assert destroyed == ["memory"]


def test_a_collected_owner_is_released_and_an_ordered_destroy_needs_no_mark():
    queue, destroyed = Queue(), []
    life = queue.lifetime()
    owner = Owner()
    life.track(owner, destroyed.append, "stream-ordered", ordered=True)
    queue.submitted = 1
    del owner
    gc.collect()
    life.collect()
    assert destroyed == ["stream-ordered"] and not life.pending


def test_a_failing_mark_loses_nothing():
    queue, destroyed = Queue(), []
    life = queue.lifetime()
    life.retire(destroyed.append, "module")
    queue.failing_mark = True
    with pytest.raises(DeviceError, match="mark"):
        life.collect()
    assert life.pending and destroyed == []
    queue.failing_mark = False
    life.collect()
    assert destroyed == ["module"]


def test_a_failing_destroy_still_destroys_the_others_and_reports():
    queue, destroyed = Queue(), []
    life = queue.lifetime()

    def refuse(_: str) -> None:
        raise DeviceError("the driver refused")

    life.retire(refuse, "a")
    life.retire(destroyed.append, "b")
    with pytest.raises(DeviceError, match="refused"):
        life.collect()
    assert destroyed == ["b"] and not life.pending


def test_close_destroys_what_is_held_and_what_waits_and_never_raises():
    queue, destroyed = Queue(), []
    life = queue.lifetime()
    owner = Owner()
    life.track(owner, destroyed.append, "held")
    life.retire(destroyed.append, "waiting")
    queue.submitted = 1
    life.collect()  # "waiting" now waits on mark 1, which never runs

    def lost(_: str) -> None:
        raise DeviceLostError("lost")

    life.retire(lost, "lost")
    life.close()
    assert sorted(destroyed) == ["held", "waiting"] and life.closed
    life.collect()  # a no-op once closed
    life.close()


def test_an_owner_collected_in_a_cycle_with_its_release_is_still_released():
    queue, destroyed = Queue(), []
    life = queue.lifetime()
    owner = Owner()
    owner.release = life.track(owner, destroyed.append, "in a cycle")  # owner -> release -> its weak reference
    owner.itself = owner
    del owner
    gc.collect()
    life.collect()
    assert destroyed == ["in a cycle"] and not life.pending


def test_a_release_outliving_many_others_still_releases_only_its_own():
    queue, destroyed = Queue(), []
    life = queue.lifetime()
    keep = Owner()
    release = life.track(keep, destroyed.append, "kept")
    for i in range(1000):  # owners come and go: their keys must never become the kept one's
        life.track(Owner(), destroyed.append, i)
    life.collect()
    assert destroyed == list(range(1000))
    release()
    release()
    life.collect()
    assert destroyed == [*range(1000), "kept"]
