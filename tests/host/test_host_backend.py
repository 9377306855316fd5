"""The numpy host backend: buffers, executables, the host kernel ABI, binding tables, reuse, execution order,
and device creation."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest

import hal
from hal import device as hal_device
from tests import kernels
from tests.kernels import groups

N = 64  # uint32 elements per program buffer


def u32(values):
    return np.asarray(values, np.uint32)


def logger(dev, log, bindings=0):
    """An executable whose kernel appends constants[0] to `log`: shows the order the host runs dispatches."""
    def kernel(ctx):
        log.append(ctx.constants[0])

    source = hal.ExecutableSource.python({"log": kernel}, [hal.Export("log", bindings=bindings, constants=1)])
    return dev.load_executable(source)


# Buffers.
def test_allocate_is_zeroed(host):
    buf = host.allocate(32)
    assert buf.size == 32
    assert buf.usage == hal.BufferUsage.DEFAULT
    assert buf.device is host
    np.testing.assert_array_equal(buf.read(), np.zeros(32, np.uint8))


def test_allocate_keeps_usage(host):
    buf = host.allocate(8, usage=hal.BufferUsage.TRANSFER_SOURCE)
    assert buf.usage == hal.BufferUsage.TRANSFER_SOURCE


@pytest.mark.parametrize("nbytes, usage", [(-1, hal.BufferUsage.DEFAULT), (1.5, hal.BufferUsage.DEFAULT),
                                           (8, 0), (8, 8)])
def test_allocate_bad_arguments(host, nbytes, usage):
    with pytest.raises(hal.ValidationError, match=r"allocate: "):
        host.allocate(nbytes, usage=usage)


def test_upload_round_trip(host):
    data = np.arange(10, dtype=np.uint32) * 0x01010101
    buf = host.upload(data)
    assert buf.size == 40
    np.testing.assert_array_equal(buf.read(np.uint32), data)


def test_upload_non_contiguous_array(host):
    data = np.arange(20, dtype=np.uint32)[::2]
    np.testing.assert_array_equal(host.upload(data).read(np.uint32), data)


def test_read_with_dtype_offset_count(host):
    buf = host.upload(np.arange(8, dtype=np.uint32))
    np.testing.assert_array_equal(buf.read(np.uint32, offset=8, count=3), u32([2, 3, 4]))
    np.testing.assert_array_equal(buf.read(np.uint16, offset=4, count=2), np.array([1, 0], np.uint16))
    np.testing.assert_array_equal(buf.read(np.uint32, offset=24), u32([6, 7]))
    assert buf.read(np.uint32, offset=32).size == 0
    assert buf.read(offset=5, count=1)[0] == 0 and buf.read(offset=4, count=1)[0] == 1


@pytest.mark.parametrize("kwargs", [{"offset": 33}, {"offset": 28, "count": 2}, {"count": 9}, {"offset": -4}])
def test_read_beyond_the_buffer_refused(host, kwargs):
    buf = host.allocate(32)
    with pytest.raises(hal.ValidationError, match=r"read: |offset must be >= 0"):
        buf.read(np.uint32, **kwargs)


def test_read_returns_a_copy(host):
    buf = host.upload(u32([1, 2]))
    out = buf.read(np.uint32)
    out[:] = 9
    np.testing.assert_array_equal(buf.read(np.uint32), u32([1, 2]))


def test_write_bytes_and_ndarray(host):
    buf = host.allocate(16)
    buf.write(b"\x01\x02", offset=3)
    buf.write(u32([5, 6]), offset=8)
    buf.write(bytearray(b"\x07"))
    np.testing.assert_array_equal(buf.read(), np.array([7, 0, 0, 1, 2, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0], np.uint8))


def test_write_beyond_the_buffer_refused(host):
    buf = host.allocate(8)
    with pytest.raises(hal.ValidationError, match=r"write: 8 bytes at offset 4 end at 12; the buffer has 8"):
        buf.write(u32([1, 2]), offset=4)
    with pytest.raises(hal.ValidationError, match=r"write: expected bytes-like data"):
        buf.write([1, 2])
    assert not buf.read().any()


def test_release_and_context_manager(host):
    with host.allocate(16) as buf:
        buf.write(b"\x01")
        assert not buf.released
    assert buf.released
    buf.release()  # idempotent
    assert buf.released


def test_reading_or_writing_a_released_buffer_raises(host):
    buf = host.upload(u32([1, 2]))
    buf.release()
    with pytest.raises(hal.ValidationError, match=r"read: the buffer was released"):
        buf.read()
    with pytest.raises(hal.ValidationError, match=r"write: the buffer was released"):
        buf.write(b"\x00")


def test_absurd_allocation_is_out_of_memory(host):
    with pytest.raises(hal.OutOfMemoryError, match=r"host: cannot allocate"):
        host.allocate(1 << 62)
    assert issubclass(hal.OutOfMemoryError, hal.DeviceError)
    host.allocate(16)  # the device is still fine


# Executables.
def test_load_executable_is_cached_by_content(host):
    exe = host.load_executable(kernels.HOST)
    assert host.load_executable(kernels.HOST) is exe
    same = hal.ExecutableSource.python(dict(kernels.HOST.payload), kernels.EXPORTS)  # another object, same content
    assert host.load_executable(same) is exe
    assert host.load_executable(kernels.SOURCE) is exe  # multi: the host part is the same source
    assert exe.device is host


def test_load_executable_ignores_mapping_order(host):
    exe = host.load_executable(kernels.HOST)
    reordered = hal.ExecutableSource.python(dict(reversed(list(kernels.HOST.payload.items()))), kernels.EXPORTS)
    assert reordered.payload == kernels.HOST.payload
    assert host.load_executable(reordered) is exe


def test_executables_are_per_device(host):
    other = hal.create_device("host")
    try:
        assert other.load_executable(kernels.SOURCE) is not host.load_executable(kernels.SOURCE)
    finally:
        other.close()


def test_different_functions_are_different_executables(host):
    a = logger(host, [])
    b = logger(host, [])
    assert a is not b


def test_multi_source_runs_its_host_part(host):
    exe = host.load_executable(hal.ExecutableSource.multi(host=kernels.HOST))
    assert [e.name for e in exe.exports] == ["add", "scale", "xor_copy"]
    assert exe.export("xor_copy").readonly == (0,)
    src, dst = host.upload(u32(range(8))), host.allocate(32)
    cb = host.create_command_buffer()
    with cb:
        cb.dispatch(exe, "xor_copy", groups(8), constants=(8, 0xF0), bindings=(src, dst))
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(dst.read(np.uint32), u32(range(8)) ^ np.uint32(0xF0))


def test_export_lookup(host):
    exe = host.load_executable(kernels.SOURCE)
    assert exe.export("add").bindings == 3
    with pytest.raises(hal.ValidationError, match=r"no export 'nope'"):
        exe.export("nope")


# The host kernel ABI.
def test_kernel_sees_bindings_constants_workgroups_and_workgroup_size(host):
    seen = {}

    def probe(ctx):
        seen["in"] = ctx.binding(0, np.uint32).copy()
        seen["out_u16"] = ctx.binding(1, np.uint16).shape
        seen["constants"] = tuple(ctx.constants)
        seen["workgroups"] = ctx.workgroups
        seen["workgroup_size"] = ctx.workgroup_size
        seen["invocations"] = ctx.invocations
        ctx.binding(1, np.uint32)[:] = ctx.binding(0, np.uint32) + np.uint32(ctx.constants[0])

    export = hal.Export("probe", bindings=2, constants=2, workgroup_size=(4, 2), readonly=(0,))
    exe = host.load_executable(hal.ExecutableSource.python({"probe": probe}, [export]))
    src, dst = host.upload(u32(range(8))), host.allocate(32)
    cb = host.create_command_buffer()
    with cb:
        cb.dispatch(exe, "probe", (3, 2, 1), constants=(100, 7), bindings=(hal.ref(src, 16, 16), hal.ref(dst, 8, 16)))
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(seen["in"], u32([4, 5, 6, 7]))
    assert seen["out_u16"] == (8,)
    assert seen["constants"] == (100, 7)
    assert seen["workgroups"] == (3, 2, 1)
    assert seen["workgroup_size"] == (4, 2, 1)
    assert seen["invocations"] == 48
    np.testing.assert_array_equal(dst.read(np.uint32), u32([0, 0, 104, 105, 106, 107, 0, 0]))


def test_kernel_writing_a_readonly_binding_fails_at_synchronize(host):
    def bad(ctx):
        ctx.binding(0, np.uint32)[:] = 1

    exe = host.load_executable(hal.ExecutableSource.python(
        {"bad": bad}, [hal.Export("bad", bindings=1, readonly=(0,))]))
    buf = host.upload(u32([5, 6]))
    cb = host.create_command_buffer()
    with cb:
        cb.dispatch(exe, "bad", (1, 1, 1), bindings=(buf,))
    host.queue_execute(cb)
    with pytest.raises(hal.DeviceError, match=r"command 0 \(dispatch bad\) failed: ValueError"):
        host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), u32([5, 6]))


def test_writable_binding_is_writable(host):
    def ok(ctx):
        ctx.binding(0, np.uint32)[:] += 1

    exe = host.load_executable(hal.ExecutableSource.python({"ok": ok}, [hal.Export("ok", bindings=1)]))
    buf = host.upload(u32([5, 6]))
    cb = host.create_command_buffer()
    with cb:
        cb.dispatch(exe, "ok", (1, 1, 1), bindings=(buf,))
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), u32([6, 7]))


# Transfer commands.
@pytest.mark.parametrize("pattern, expected", [
    (b"\xab", [0xABABABAB] * 4),
    (np.uint16(0x1234), [0x12341234] * 4),
    (np.uint32(0xDEADBEEF), [0xDEADBEEF] * 4),
    (np.float32(1.0), [0x3F800000] * 4),
])
def test_fill_patterns(host, pattern, expected):
    buf = host.allocate(16)
    cb = host.create_command_buffer()
    with cb:
        cb.fill_buffer(buf, pattern)
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), u32(expected))


def test_update_data_is_copied_at_record_time(host):
    buf = host.allocate(16)
    data = u32([1, 2, 3, 4])
    cb = host.create_command_buffer()
    with cb:
        cb.update_buffer(hal.ref(buf, 4), data[:3])
    data[:] = 99
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(buf.read(np.uint32), u32([0, 1, 2, 3]))


def test_copy_ranges(host):
    src, dst = host.upload(u32(range(8))), host.allocate(32)
    cb = host.create_command_buffer()
    with cb:
        cb.copy_buffer(hal.ref(src, 8, 12), hal.ref(dst, 16))
    host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(dst.read(np.uint32), u32([0, 0, 0, 0, 2, 3, 4, 0]))


# Binding tables and reuse.
def test_one_recording_against_two_binding_tables(host):
    exe = host.load_executable(kernels.SOURCE)
    n = 16
    cb = host.create_command_buffer(mode="reusable", binding_capacity=3)
    with cb:
        cb.dispatch(exe, "add", groups(n), constants=(n,), bindings=(hal.slot(0), hal.slot(1), hal.slot(2)))
    a, b, out1 = host.upload(u32(range(n))), host.upload(u32([100] * n)), host.allocate(4 * n)
    c, d, out2 = host.upload(u32(range(0, 2 * n, 2))), host.upload(u32([7] * n)), host.allocate(4 * n)
    host.queue_execute(cb, binding_table=(a, b, out1))
    host.queue_execute(cb, binding_table=[c, d, out2])
    host.synchronize()
    np.testing.assert_array_equal(out1.read(np.uint32), u32(range(n)) + 100)
    np.testing.assert_array_equal(out2.read(np.uint32), u32(range(0, 2 * n, 2)) + 7)
    a.write(u32([1] * n))  # same table again sees the new contents
    host.queue_execute(cb, binding_table=(a, b, out1))
    host.synchronize()
    np.testing.assert_array_equal(out1.read(np.uint32), u32([101] * n))


def test_slot_with_offset_and_length(host):
    cb = host.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        cb.copy_buffer(hal.slot(0, 4, 8), hal.slot(1, 8))
    src, dst = host.upload(u32(range(4))), host.allocate(16)
    host.queue_execute(cb, binding_table=(src, dst))
    host.synchronize()
    np.testing.assert_array_equal(dst.read(np.uint32), u32([0, 0, 1, 2]))


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_reusable_resubmitted_accumulates(host, strategy):
    exe = host.load_executable(kernels.SOURCE)
    x = host.upload(u32([1, 2, 3, 0xFFFFFFFF]))
    cb = host.create_command_buffer(mode="reusable", strategy=strategy)
    with cb:
        cb.dispatch(exe, "scale", (1, 1, 1), constants=(4, 3), bindings=(x,))
    for _ in range(5):
        host.queue_execute(cb)
    host.synchronize()
    np.testing.assert_array_equal(x.read(np.uint32), u32([1, 2, 3, 0xFFFFFFFF]) * np.uint32(243))


# A program with every command kind and hazards of every kind across barriers.
def _program_buffers(dev):
    return {
        "a": dev.upload(np.arange(N, dtype=np.uint32)),
        "b": dev.upload(np.arange(N, dtype=np.uint32) * 3 + 1),
        "c": dev.allocate(4 * N),
        "d": dev.allocate(4 * N),
    }


def _record_program(cb, exe, bufs):
    a, b, c, d = bufs["a"], bufs["b"], bufs["c"], bufs["d"]
    cb.update_buffer(hal.ref(a, 0, 16), u32([100, 101, 102, 103]))
    cb.fill_buffer(d, np.uint32(7))
    cb.execution_barrier()
    cb.dispatch(exe, "add", groups(N), constants=(N,), bindings=(a, b, c))  # reads a (RAW on the update)
    cb.dispatch(exe, "scale", groups(N), constants=(N, 3), bindings=(d,))
    cb.execution_barrier()
    cb.dispatch(exe, "xor_copy", groups(N), constants=(N, 0xFF), bindings=(c, b))  # writes b (WAR)
    cb.copy_buffer(hal.ref(d, 0, 64), hal.ref(a, 64, 64))  # writes a (WAR)
    cb.execution_barrier()
    cb.dispatch(exe, "add", groups(N), constants=(N,), bindings=(b, a, d))  # writes d (WAR on the copy)
    cb.fill_buffer(hal.ref(c, 128, 128), np.uint32(0xAAAAAAAA))  # writes c (WAR on xor_copy)


def _program_reference():
    a = np.arange(N, dtype=np.uint32)
    b = np.arange(N, dtype=np.uint32) * 3 + 1
    a[:4] = [100, 101, 102, 103]
    d = np.full(N, 7, np.uint32)
    c = a + b
    d = d * np.uint32(3)
    b = c ^ np.uint32(0xFF)
    a[16:32] = d[:16]
    d = b + a
    c[32:] = 0xAAAAAAAA
    return {"a": a, "b": b, "c": c, "d": d}


def _run_program(dev, strategy, dependencies):
    exe = dev.load_executable(kernels.SOURCE)
    bufs = _program_buffers(dev)
    cb = dev.create_command_buffer(strategy=strategy, dependencies=dependencies)
    with cb:
        _record_program(cb, exe, bufs)
    dev.queue_execute(cb)
    dev.synchronize()
    return {k: v.read(np.uint32) for k, v in bufs.items()}


@pytest.mark.parametrize("strategy, dependencies",
                         list(itertools.product(["deferred", "single_pass"], ["barriers", "hazards"])))
def test_program_matches_reference(host, strategy, dependencies):
    result = _run_program(host, strategy, dependencies)
    expected = _program_reference()
    for name in "abcd":
        np.testing.assert_array_equal(result[name], expected[name], err_msg=name)


def test_single_pass_and_deferred_give_the_same_bytes(host):
    for dependencies in ("barriers", "hazards"):
        deferred = _run_program(host, "deferred", dependencies)
        single = _run_program(host, "single_pass", dependencies)
        for name in "abcd":
            assert deferred[name].tobytes() == single[name].tobytes(), (dependencies, name)


def test_hazards_and_barriers_give_the_same_bytes(host):
    for strategy in ("deferred", "single_pass"):
        barriers = _run_program(host, strategy, "barriers")
        hazards = _run_program(host, strategy, "hazards")
        for name in "abcd":
            assert barriers[name].tobytes() == hazards[name].tobytes(), (strategy, name)


def test_hazards_has_fewer_edges_than_barriers(host):
    exe = host.load_executable(kernels.SOURCE)
    graphs = {}
    for dependencies in ("barriers", "hazards"):
        cb = host.create_command_buffer(dependencies=dependencies)
        with cb:
            _record_program(cb, exe, _program_buffers(host))
        graphs[dependencies] = cb.dependency_graph()
    assert graphs["hazards"].number_of_edges() < graphs["barriers"].number_of_edges()
    # Every hazard edge is an ordering the barriers imply too.
    assert set(graphs["hazards"].edges) <= set(nx.transitive_closure_dag(graphs["barriers"]).edges)


# Execution order.
@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_independent_commands_run_out_of_recording_order(host, strategy):
    log = []
    exe = logger(host, log)
    cb = host.create_command_buffer(strategy=strategy)
    with cb:
        for i in range(3):
            cb.dispatch(exe, "log", (1, 1, 1), constants=(i,))
    host.queue_execute(cb)
    host.synchronize()
    assert log == [2, 1, 0]


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_barriers_order_segments(host, strategy):
    log = []
    exe = logger(host, log)
    cb = host.create_command_buffer(strategy=strategy)
    with cb:
        cb.dispatch(exe, "log", (1, 1, 1), constants=(0,))
        cb.dispatch(exe, "log", (1, 1, 1), constants=(1,))
        cb.execution_barrier()
        cb.execution_barrier()  # an empty segment changes nothing
        cb.dispatch(exe, "log", (1, 1, 1), constants=(2,))
        cb.dispatch(exe, "log", (1, 1, 1), constants=(3,))
        cb.execution_barrier()
        cb.dispatch(exe, "log", (1, 1, 1), constants=(4,))
    host.queue_execute(cb)
    host.synchronize()
    assert log == [1, 0, 3, 2, 4]


def test_hazards_mode_runs_an_independent_later_command_first(host):
    log = []
    exe = logger(host, log, bindings=1)
    a, b = host.allocate(16), host.allocate(16)
    order = {}
    for dependencies in ("barriers", "hazards"):
        log.clear()
        cb = host.create_command_buffer(dependencies=dependencies)
        with cb:
            cb.dispatch(exe, "log", (1, 1, 1), constants=(0,), bindings=(a,))
            cb.execution_barrier()
            cb.dispatch(exe, "log", (1, 1, 1), constants=(1,), bindings=(b,))  # touches nothing of command 0
            cb.execution_barrier()
            cb.dispatch(exe, "log", (1, 1, 1), constants=(2,), bindings=(a,))  # must follow command 0
        host.queue_execute(cb)
        host.synchronize()
        order[dependencies] = list(log)
    assert order["barriers"] == [0, 1, 2]
    assert order["hazards"] == [1, 0, 2]


def test_dependency_graph_of_barriers(host):
    exe = logger(host, [])
    cb = host.create_command_buffer()
    with cb:
        cb.dispatch(exe, "log", (1, 1, 1), constants=(0,))
        cb.dispatch(exe, "log", (1, 1, 1), constants=(1,))
        cb.execution_barrier()
        cb.dispatch(exe, "log", (1, 1, 1), constants=(2,))
        cb.fill_buffer(host.allocate(4), b"\x01")
    graph = cb.dependency_graph()
    assert sorted(graph.edges) == [(0, 2), (0, 3), (1, 2), (1, 3)]
    assert graph.nodes[3] == {"kind": "fill", "segment": 1}
    assert graph.nodes[0]["kind"] == "dispatch"


# Device creation.
def test_create_device_defaults_to_host_without_a_gpu(monkeypatch):
    monkeypatch.delenv("HAL_DEVICE", raising=False)
    status = hal_device.driver_status()
    if any(isinstance(d, list) and any(i.kind == "gpu" for i in d) for d in status.values()):
        pytest.skip("a GPU driver is available here")
    with hal.create_device() as dev:
        assert dev.driver == "host"
        assert isinstance(dev.capabilities, hal.Capabilities)


def test_hal_device_environment_variable(monkeypatch):
    monkeypatch.setenv("HAL_DEVICE", "host")
    with hal.create_device() as dev:
        assert dev.driver == "host"
    monkeypatch.setenv("HAL_DEVICE", "nonsense")
    with pytest.raises(hal.UnsupportedError, match=r"no driver named 'nonsense'"):
        hal.create_device()


def test_create_device_unknown_driver():
    with pytest.raises(hal.UnsupportedError, match=r"no driver named 'nonsense'; known: .*host"):
        hal.create_device("nonsense")


def test_create_device_host_index_1():
    with pytest.raises(hal.UnsupportedError, match=r"no host device 1"):
        hal.create_device("host:1")


def test_create_device_host_index_0():
    with hal.create_device("host:0") as dev:
        assert dev.driver == "host"


def test_create_device_bad_spec():
    with pytest.raises(hal.ValidationError, match=r"should be DRIVER or DRIVER:INDEX"):
        hal.create_device("host:x")


def test_unknown_capability_override():
    with pytest.raises(hal.ValidationError, match=r"unknown capability 'max_bananas'"):
        hal.create_device("host", capabilities={"max_bananas": 1})


def test_capability_override_applies():
    with hal.create_device("host", capabilities={"max_push_constants_size": 8}) as dev:
        assert dev.capabilities.max_push_constants_size == 8
    with hal.create_device("host") as dev:
        assert dev.capabilities.max_push_constants_size == 256


def test_available_drivers_contains_host():
    drivers = hal.available_drivers()
    assert "host" in drivers
    assert drivers == sorted(drivers, key=lambda n: ("cuda", "vulkan", "host").index(n)
                             if n in ("cuda", "vulkan", "host") else 3)


def test_constants_reach_a_host_kernel_as_a_gpu_sees_them(host):
    seen = {}

    def kernel(ctx):
        seen["constants"] = ctx.constants
        seen["words"] = ctx.words.tolist()
    exe = host.load_executable(hal.ExecutableSource.python({"k": kernel}, [hal.Export("k", bindings=0, constants=3)]))
    cb = host.create_command_buffer()
    with cb:
        cb.dispatch(exe, "k", 1, (1e-50, -1, np.float32(0.5)))
    host.queue_execute(cb)
    host.synchronize()
    small, minus_one, half = seen["constants"]
    assert type(small) is np.float32 and small == 0  # 1e-50 rounds to 0 in float32, as on a GPU
    assert minus_one == -1 and half == np.float32(0.5)
    assert seen["words"] == [0, 0xFFFFFFFF, 0x3F000000]
