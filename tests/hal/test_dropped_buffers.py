"""A buffer dropped without release() refers to itself (its `whole` reference), so only Python's cycle collector
frees it: an allocation the device refuses for room collects such buffers and tries once more."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import hal


def always_full(self, nbytes, usage):
    raise hal.OutOfMemoryError("host: no room (a test)")


def test_an_allocation_refused_for_room_collects_dropped_buffers_and_tries_again(monkeypatch):
    dev = hal.create_device("host")
    allocate = type(dev)._allocate
    dropped = dev.upload(np.arange(4, dtype=np.uint32))
    alive = weakref.ref(dropped)
    calls = []

    def full_while_dropped_lives(self, nbytes, usage):  # a device whose memory the dropped buffer fills
        calls.append(nbytes)
        if alive() is not None:
            raise hal.OutOfMemoryError("host: no room (a test)")
        return allocate(self, nbytes, usage)

    gc.disable()
    try:
        del dropped
        assert alive() is not None  # held by its own reference until collected
        monkeypatch.setattr(type(dev), "_allocate", full_while_dropped_lives)
        fresh = dev.allocate(16)
        assert calls == [16, 16] and alive() is None and fresh.size == 16
        monkeypatch.setattr(type(dev), "_allocate", always_full)
        with pytest.raises(hal.OutOfMemoryError, match="no room"):  # nothing to collect: the refusal stands
            dev.allocate(16)
    finally:
        gc.enable()
        monkeypatch.undo()
        dev.close()
