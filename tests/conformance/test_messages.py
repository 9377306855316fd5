"""Refusals name what the user called and every party involved (issue 44, item 4), the same on every backend:
queue transfers name the queue operation, not the command hal records for it; cross-device refusals name both
devices; two devices print apart; a zero size means the same to allocate and alloca."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.conftest import open_device


def test_queue_transfers_name_the_operation_the_user_called(dev):
    released, target = dev.allocate(64), dev.allocate(64)
    released.release()
    refusals = [
        (lambda: dev.queue_read(released, np.zeros(4, np.float32)), "queue_read: source is a released buffer"),
        (lambda: dev.queue_copy(released, target), "queue_copy: source is a released buffer"),
        (lambda: dev.queue_update(released, b"1234"), "queue_update: target is a released buffer"),
        (lambda: dev.queue_fill(target, b"123"), "queue_fill: pattern has 3 bytes"),
    ]
    for call, message in refusals:
        with pytest.raises(hal.ValidationError) as caught:
            call()
        assert str(caught.value).startswith(message), str(caught.value)
        assert "command 0" not in str(caught.value) and "copy_buffer" not in str(caught.value)
    dev.synchronize()  # nothing was queued


def test_devices_print_apart_and_cross_device_refusals_name_both(dev):
    other = open_device(dev.driver)
    try:
        assert repr(dev) != repr(other)
        assert f"{dev.driver}:{dev.index}" in repr(dev) and f"#{dev.serial}" in repr(dev)
        cb = other.create_command_buffer()
        cb.begin()
        cb.end()
        with pytest.raises(hal.ValidationError) as caught:
            dev.queue_execute(cb)
        assert repr(dev) in str(caught.value) and repr(other) in str(caught.value)
        mine = dev.create_command_buffer()
        mine.begin()
        with pytest.raises(hal.ValidationError) as caught:
            mine.fill_buffer(other.allocate(64), np.uint32(1))
        assert repr(dev) in str(caught.value) and repr(other) in str(caught.value)
        sem = other.create_semaphore()
        with pytest.raises(hal.ValidationError) as caught:
            dev.queue_host_call(lambda: None, signal=[(sem, 1)])
        assert repr(dev) in str(caught.value) and repr(other) in str(caught.value)
    finally:
        other.close()


def test_zero_bytes_mean_the_same_to_allocate_and_alloca(dev):
    """Both make a buffer no command can use (every command needs a non-empty range)."""
    empty = dev.allocate(0)
    assert empty.size == 0
    for strategy in ("deferred", "single_pass"):
        cb = dev.create_command_buffer(strategy=strategy)
        cb.begin()
        transient = cb.alloca(0)
        assert transient.nbytes == 0
        for buffer in (empty, transient):
            with pytest.raises(hal.ValidationError, match=r"target range \[0, 0\) is empty"):
                cb.fill_buffer(buffer, np.uint32(1))
        cb.end()
        dev.queue_execute(cb)
    dev.synchronize()
