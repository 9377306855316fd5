"""Fill, update, copy and dispatch on every backend, checked against numpy to the bit."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests import kernels
from tests.kernels import groups


def u32(values):
    return np.asarray(values, np.uint32)


def run(dev, record, **kwargs):
    cb = dev.create_command_buffer(**kwargs)
    with cb:
        record(cb)
    dev.queue_execute(cb)
    dev.synchronize()
    return cb


@pytest.mark.parametrize("pattern, word", [
    (b"\xab", 0xABABABAB),
    (np.uint16(0x1234), 0x12341234),
    (np.uint32(0xDEADBEEF), 0xDEADBEEF),
    (np.float32(1.0), 0x3F800000),
    (np.int8(-1), 0xFFFFFFFF),
])
def test_fill_patterns(dev, pattern, word):
    buf = dev.upload(np.full(16, 7, np.uint32))
    run(dev, lambda cb: cb.fill_buffer(hal.ref(buf, 8, 32), pattern))
    np.testing.assert_array_equal(buf.read(np.uint32), u32([7, 7] + [word] * 8 + [7] * 6))


def test_update_copies_the_data_at_record_time(dev):
    buf = dev.upload(np.full(8, 5, np.uint32))
    data = u32([1, 2, 3, 4])
    cb = dev.create_command_buffer()
    with cb:
        cb.update_buffer(hal.ref(buf, 4), data[:3])
    data[:] = 99
    dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), u32([5, 1, 2, 3, 5, 5, 5, 5]))


def test_update_of_64_kib(dev):
    data = np.random.default_rng(3).integers(0, 2**32, 16384, dtype=np.uint32)
    buf = dev.allocate(data.nbytes + 256)
    run(dev, lambda cb: cb.update_buffer(hal.ref(buf, 256), data))
    np.testing.assert_array_equal(buf.read(np.uint32, offset=256), data)


def test_copy_ranges(dev):
    src, dst = dev.upload(u32(range(8))), dev.allocate(32)
    run(dev, lambda cb: cb.fill_buffer(dst, np.uint32(0)))
    run(dev, lambda cb: cb.copy_buffer(hal.ref(src, 8, 12), hal.ref(dst, 16)))
    np.testing.assert_array_equal(dst.read(np.uint32), u32([0, 0, 0, 0, 2, 3, 4, 0]))


def test_copy_within_one_buffer_between_disjoint_ranges(dev):
    buf = dev.upload(u32(range(8)))
    run(dev, lambda cb: cb.copy_buffer(hal.ref(buf, 0, 8), hal.ref(buf, 24, 8)))
    np.testing.assert_array_equal(buf.read(np.uint32), u32([0, 1, 2, 3, 4, 5, 0, 1]))


def test_dispatch_kernels(dev, exe):
    n = 1000
    rng = np.random.default_rng(7)
    a_np, b_np = rng.integers(0, 2**32, n, dtype=np.uint32), rng.integers(0, 2**32, n, dtype=np.uint32)
    a, b, c, d = dev.upload(a_np), dev.upload(b_np), dev.allocate(4 * n), dev.allocate(4 * n)

    def record(cb):
        cb.dispatch(exe, "add", groups(n), (n,), (a, b, c))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", groups(n), (n, 0xDEADBEEF), (c,))
        cb.execution_barrier()
        cb.dispatch(exe, "xor_copy", groups(n), (n, -1), (c, d))  # -1 reaches the kernel as 0xFFFFFFFF

    run(dev, record)
    want_c = (a_np + b_np) * np.uint32(0xDEADBEEF)
    np.testing.assert_array_equal(c.read(np.uint32), want_c)
    np.testing.assert_array_equal(d.read(np.uint32), ~want_c)


def test_dispatch_on_sub_ranges(dev, exe):
    """Bindings with offsets see their range from element 0; bytes outside it are untouched."""
    align = max(256, dev.capabilities.storage_buffer_offset_alignment)
    x = dev.upload(np.full(3 * align // 4, 2, np.uint32))
    run(dev, lambda cb: cb.dispatch(exe, "scale", groups(8), (8, 5), (hal.ref(x, align, align),)))
    got = x.read(np.uint32)
    want = np.full(3 * align // 4, 2, np.uint32)
    want[align // 4:align // 4 + 8] = 10
    np.testing.assert_array_equal(got, want)


def test_a_million_elements(dev, exe):
    n = 1 << 20
    a_np = np.arange(n, dtype=np.uint32)
    a, out = dev.upload(a_np), dev.allocate(4 * n)
    run(dev, lambda cb: cb.dispatch(exe, "xor_copy", groups(n), (n, 0x5A5A5A5A), (a, out)))
    np.testing.assert_array_equal(out.read(np.uint32), a_np ^ np.uint32(0x5A5A5A5A))


@pytest.mark.parametrize("workgroups", [3, (3,), (3, 1), np.array([3, 1])])
def test_fewer_than_three_workgroup_counts_are_padded_with_ones(dev, exe, workgroups):
    """workgroups=(x,) or (x, y) means (x, 1, 1) or (x, y, 1), as CUDA's dim3 and Export's workgroup_size."""
    n = 3 * kernels.WORKGROUP
    x = dev.upload(u32(range(n + 8)))
    cb = run(dev, lambda cb: cb.dispatch(exe, "scale", workgroups, (n, 2), (x,)))
    assert cb.commands[0].workgroups == (3, 1, 1)
    np.testing.assert_array_equal(x.read(np.uint32), u32(list(range(0, 2 * n, 2)) + list(range(n, n + 8))))


@pytest.mark.parametrize("workgroups", [(), (1, 1, 1, 1), (2, 0), "3"])
def test_no_or_more_than_three_workgroup_counts_are_refused(dev, exe, workgroups):
    cb = dev.create_command_buffer()
    cb.begin()
    with pytest.raises(hal.ValidationError, match=r"command 0 \(dispatch scale\): workgroups"):
        cb.dispatch(exe, "scale", workgroups, (4, 2), (dev.allocate(16),))


def test_multidimensional_workgroups_cover_more_invocations(dev, exe):
    """(x, y, z) workgroups: the test kernels index by x only, so y and z repeat the same work."""
    n = 256
    x, y = dev.upload(np.ones(n, np.uint32)), dev.allocate(4 * n)
    run(dev, lambda cb: cb.dispatch(exe, "xor_copy", (groups(n)[0], 2, 3), (n, 6), (x, y)))
    np.testing.assert_array_equal(y.read(np.uint32), np.full(n, 7, np.uint32))


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
@pytest.mark.parametrize("dependencies", ["barriers", "hazards"])
def test_wide_segment_then_fan_in(dev, exe, strategy, dependencies):
    """200 independent dispatches in one segment (no cap per segment), then one reading them all."""
    width, n = 200, 64
    src = dev.upload(np.arange(n, dtype=np.uint32))
    outs = dev.allocate(4 * n * width)
    total = dev.allocate(4 * n)

    def record(cb):
        for i in range(width):
            cb.dispatch(exe, "xor_copy", groups(n), (n, i), (src, hal.ref(outs, 4 * n * i, 4 * n)))
        cb.execution_barrier()
        cb.copy_buffer(hal.ref(outs, 4 * n * (width - 1), 4 * n), total)

    run(dev, record, strategy=strategy, dependencies=dependencies)
    got = outs.read(np.uint32).reshape(width, n)
    want = np.arange(n, dtype=np.uint32)[None, :] ^ np.arange(width, dtype=np.uint32)[:, None]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(total.read(np.uint32), np.arange(n, dtype=np.uint32) ^ np.uint32(width - 1))


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
@pytest.mark.parametrize("dependencies", ["barriers", "hazards"])
def test_long_chain(dev, exe, strategy, dependencies):
    """300 dependent steps: x = x * 3 each time, each step after a barrier."""
    n, steps = 128, 300
    x = dev.upload(np.arange(n, dtype=np.uint32))

    def record(cb):
        for _ in range(steps):
            cb.dispatch(exe, "scale", groups(n), (n, 3), (x,))
            cb.execution_barrier()

    run(dev, record, strategy=strategy, dependencies=dependencies)
    np.testing.assert_array_equal(x.read(np.uint32), np.arange(n, dtype=np.uint32) * np.uint32(pow(3, steps, 1 << 32)))


def test_executable_loads_once_per_source_content(dev):
    exe = dev.load_executable(kernels.SOURCE)
    assert dev.load_executable(kernels.SOURCE) is exe
    again = hal.ExecutableSource.multi(host=kernels.HOST, cuda=kernels.CUDA, vulkan=kernels.VULKAN)
    assert dev.load_executable(again) is exe
    assert exe.device is dev and [e.name for e in exe.exports] == ["add", "scale", "xor_copy", "mark"]


def test_empty_command_buffer_runs(dev):
    run(dev, lambda cb: None)
    run(dev, lambda cb: (cb.execution_barrier(), cb.execution_barrier()))
