"""if_nonzero on the device (issue 47, item 2): where the device has VK_EXT_conditional_rendering, an if_nonzero
region whose body holds only dispatches is encoded in the command buffer itself, gated on its flag, with no host
round trip; the flag may be written by the command buffer's own earlier commands, and bound through a slot. Every
other region, and every region with HAL_VULKAN_DISABLE_CONDITIONAL_RENDERING set, goes through the host (Steps)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import hal
from tests import kernels
from tests.conftest import backend_or_skip, open_device
from tests.kernels import u32

backend_or_skip("vulkan")

pytestmark = pytest.mark.vulkan


@pytest.fixture(params=["on the device", "through the host"])
def path(request, monkeypatch):
    if request.param == "through the host":
        monkeypatch.setenv("HAL_VULKAN_DISABLE_CONDITIONAL_RENDERING", "1")
    dev = open_device("vulkan")
    if request.param == "on the device" and not dev.features.conditional_rendering:
        dev.close()
        pytest.skip(f"{dev.name} has no VK_EXT_conditional_rendering")
    yield request.param, dev
    dev.close()


def flag_checks(dev, monkeypatch) -> list[int]:
    """A list that gets one entry for each check of a region's flag by the host: each wait of the thread that
    submits regions."""
    checks: list[int] = []
    wait = dev.wait_for_submission
    monkeypatch.setattr(dev, "wait_for_submission", lambda value, deadline=None: (
        threading.current_thread().name == "hal-vulkan-regions" and checks.append(value)) or wait(value, deadline))
    return checks


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_an_if_of_dispatches_runs_on_the_device_when_it_can(path, strategy):
    name, dev = path
    exe = dev.load_executable(kernels.SOURCE)
    out, flag, count, after = (dev.upload(np.zeros(4, np.uint32)) for _ in range(4))
    one = dev.upload(u32([1]))
    cb = dev.create_command_buffer(mode="reusable", strategy=strategy, binding_capacity=1)
    with cb:
        cb.dispatch(exe, "xor_copy", (1, 1, 1), (1, 0), (hal.slot(0), flag))  # the flag, from the table's word 0
        cb.execution_barrier()
        with cb.if_nonzero(flag):
            cb.dispatch(exe, "mark", (2, 1, 1), (1,), (out,))
            cb.execution_barrier()
            cb.dispatch(exe, "add", (1, 1, 1), (1,), (count, one, count))
        cb.dispatch(exe, "mark", (1, 1, 1), (100,), (after,))  # after the region: always
    assert cb.emitter.driven == (name == "through the host")
    for word in (5, 0, 9):
        dev.queue_execute(cb, binding_table=(dev.upload(u32([word])),))
    np.testing.assert_array_equal(out.read(np.uint32)[:2], [2, 2])
    assert count.read(np.uint32)[0] == 2 and after.read(np.uint32)[0] == 300


def test_fills_updates_and_word_copies_are_gated_as_dispatches(path):
    """Conditional rendering gates dispatches only: a fill, an update or a copy of whole 32-bit words inside a gated
    region runs as hal's own dispatch, gated with the rest; ranges at any 4-byte offset, across several
    workgroups."""
    name, dev = path
    exe = dev.load_executable(kernels.SOURCE)
    source = dev.upload(np.arange(300, dtype=np.uint32))
    target, flag = dev.upload(np.zeros(300, np.uint32)), dev.upload(u32([1]))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        with cb.if_nonzero(flag):
            cb.fill_buffer(hal.ref(target, 4, 400), np.uint32(7))  # words 1..100
            cb.copy_buffer(hal.ref(source, 404, 720), hal.ref(target, 412, 720))  # words 101..280 -> 103..282
            cb.update_buffer(hal.ref(target, 1140, 12), u32([11, 12, 13]))  # words 285..287
            cb.execution_barrier()
            cb.dispatch(exe, "mark", (1, 1, 1), (1000,), (hal.ref(target, 0, 16),))
    assert cb.emitter.driven == (name == "through the host")
    dev.queue_execute(cb)
    want = np.zeros(300, np.uint32)
    want[1:101] = 7
    want[103:283] = np.arange(101, 281)
    want[285:288] = [11, 12, 13]
    want[0] += 1000
    np.testing.assert_array_equal(target.read(np.uint32), want)
    flag.write(u32([0]))
    target.write(np.zeros(300, np.uint32))
    dev.queue_execute(cb)
    np.testing.assert_array_equal(target.read(np.uint32), np.zeros(300, np.uint32))


def test_other_regions_go_through_the_host(path):
    _, dev = path
    exe = dev.load_executable(kernels.SOURCE)
    out, flag = dev.upload(np.zeros(4, np.uint32)), dev.upload(u32([1]))
    out.write(u32([3, 3, 3, 3]))
    a_byte_copy = dev.create_command_buffer()  # not whole words
    with a_byte_copy:
        with a_byte_copy.if_nonzero(flag):
            a_byte_copy.copy_buffer(hal.ref(out, 1, 2), hal.ref(out, 8, 2))
    nested = dev.create_command_buffer()  # conditional rendering does not nest
    with nested:
        with nested.if_nonzero(flag):
            with nested.if_nonzero(flag):
                nested.dispatch(exe, "mark", (1, 1, 1), (10,), (out,))
    for cb in (a_byte_copy, nested):
        assert cb.emitter.driven
        dev.queue_execute(cb)
    np.testing.assert_array_equal(out.read(np.uint32), [13, 3, 0, 3])  # (bytes 8, 9: the zeros of word 0)


@pytest.mark.parametrize("iterations", [0, 1, 2, 5, 64, 130])
def test_a_loop_of_dispatches_checks_its_flag_once_a_chunk(path, iterations, monkeypatch):
    """A gated loop runs in chunks of 2, 4, ... 64 iterations, its flag checked by the host before the first and
    after each: about log2(n) round trips for n iterations, against n + 1 through the host."""
    name, dev = path
    exe = dev.load_executable(kernels.SOURCE)
    count, flag, minus_one = dev.upload(u32([0])), dev.upload(u32([iterations])), dev.upload(u32([0xFFFFFFFF]))
    one = dev.upload(u32([1]))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        with cb.while_nonzero(flag):
            cb.dispatch(exe, "add", (1, 1, 1), (1,), (count, one, count))
            cb.execution_barrier()
            cb.dispatch(exe, "add", (1, 1, 1), (1,), (flag, minus_one, flag))
    checks = flag_checks(dev, monkeypatch)
    dev.queue_execute(cb)
    dev.synchronize()
    assert count.read(np.uint32)[0] == iterations and flag.read(np.uint32)[0] == 0
    if name == "on the device":
        chunks = 0
        while sum((2, 4, 8, 16, 32, 64)[:chunks]) + 64 * max(0, chunks - 6) < iterations:
            chunks += 1
        assert len(checks) == chunks + 1
    else:
        assert len(checks) == iterations + 1


def test_gated_regions_guard_their_indirect_dispatches(path):
    """A dispatch_indirect inside a gated region needs the command buffer's guard, though no command outside uses
    one (found by the generated programs of tests/differential)."""
    _, dev = path
    exe = dev.load_executable(kernels.SOURCE)
    flag, counts, out = dev.upload(u32([1])), dev.upload(u32([1, 1, 1])), dev.upload(np.zeros(4, np.uint32))
    branch, loop = dev.create_command_buffer(mode="reusable"), dev.create_command_buffer(mode="reusable")
    with branch:
        with branch.if_nonzero(flag):
            branch.dispatch_indirect(exe, "mark", counts, (5,), (out,), dynamic=True)
    with loop:
        with loop.while_nonzero(flag):
            loop.dispatch_indirect(exe, "mark", counts, (5,), (out,), dynamic=True)
            loop.execution_barrier()
            loop.dispatch(exe, "xor_copy", (1, 1, 1), (1, 1), (flag, flag))  # 1 -> 0: one iteration
    dev.queue_execute(branch)
    dev.queue_execute(loop)
    assert out.read(np.uint32)[0] == 10 and flag.read(np.uint32)[0] == 0


def test_a_long_body_runs_in_smaller_chunks(path, monkeypatch):
    """Chunk sizes whose iterations would hold more than 4096 dispatches are left out: a body of 300 runs 2, 4, 8,
    then 8 again, so 30 iterations take 5 chunks (6 checks of the flag)."""
    name, dev = path
    exe = dev.load_executable(kernels.SOURCE)
    words = dev.upload(np.zeros(4 * 299, np.uint32))
    flag, minus_one = dev.upload(u32([30])), dev.upload(u32([0xFFFFFFFF]))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        with cb.while_nonzero(flag):
            for i in range(299):
                cb.dispatch(exe, "mark", (1, 1, 1), (1,), (hal.ref(words, 16 * i, 16),))
            cb.dispatch(exe, "add", (1, 1, 1), (1,), (flag, minus_one, flag))
    checks = flag_checks(dev, monkeypatch)
    dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(words.read(np.uint32)[::4], np.full(299, 30))
    assert len(checks) == (6 if name == "on the device" else 31)


def test_a_gated_fill_beyond_the_workgroup_limit_takes_several_dispatches():
    dev = open_device("vulkan", capabilities={"max_workgroup_count": (2, 65535, 65535)})  # 128 words a dispatch
    try:
        if not dev.features.conditional_rendering:
            pytest.skip(f"{dev.name} has no VK_EXT_conditional_rendering")
        target, flag = dev.upload(np.zeros(1000, np.uint32)), dev.upload(u32([1]))
        cb = dev.create_command_buffer()
        with cb:
            with cb.if_nonzero(flag):
                cb.fill_buffer(hal.ref(target, 8, 3000), np.uint32(5))  # 750 words: 6 dispatches
        assert not cb.emitter.driven
        dev.queue_execute(cb)
        want = np.zeros(1000, np.uint32)
        want[2:752] = 5
        np.testing.assert_array_equal(target.read(np.uint32), want)
    finally:
        dev.close()


def test_a_body_that_clears_its_flag_still_runs_to_its_end(path):
    """if_nonzero reads its flag once, when the region is reached, and a loop once an iteration: a body that clears
    the flag before its last dispatch still runs that dispatch (the flag is latched into a predicate of hal's own,
    which nothing else writes while conditional rendering reads it)."""
    _, dev = path
    exe = dev.load_executable(kernels.SOURCE)
    out, flag, minus_one = dev.upload(np.zeros(4, np.uint32)), dev.upload(u32([1])), dev.upload(u32([0xFFFFFFFF]))
    branch, loop = dev.create_command_buffer(mode="reusable"), dev.create_command_buffer(mode="reusable")
    with branch:
        with branch.if_nonzero(flag):
            branch.dispatch(exe, "xor_copy", (1, 1, 1), (1, 1), (flag, flag))  # 1 -> 0
            branch.execution_barrier()
            branch.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
    with loop:
        with loop.while_nonzero(flag):
            loop.dispatch(exe, "add", (1, 1, 1), (1,), (flag, minus_one, flag))
            loop.execution_barrier()
            loop.dispatch(exe, "mark", (1, 1, 1), (10,), (out,))
    dev.queue_execute(branch)
    flag.write(u32([3]))
    dev.queue_execute(loop)
    assert out.read(np.uint32)[0] == 31 and flag.read(np.uint32)[0] == 0


def test_a_gated_update_writes_its_data_again_after_a_reset(path):
    _, dev = path
    target, flag = dev.upload(np.zeros(4, np.uint32)), dev.upload(u32([1]))
    cb = dev.create_command_buffer(mode="reusable")
    for word in (5, 6):
        cb.reset()
        with cb:
            with cb.if_nonzero(flag):
                cb.update_buffer(target, u32([word] * 4))
        dev.queue_execute(cb)
        np.testing.assert_array_equal(target.read(np.uint32), [word] * 4)
