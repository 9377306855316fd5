"""Host executables: loading and caching, exports, and the host kernel ABI."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests import kernels
from tests.host.host_helpers import logger
from tests.kernels import groups, u32


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
    assert [e.name for e in exe.exports] == ["add", "scale", "xor_copy", "mark"]
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
