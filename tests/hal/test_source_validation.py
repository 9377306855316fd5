"""Export and ExecutableSource constructors, and the sources load_executable refuses."""

from __future__ import annotations

import pytest

import hal
from tests import kernels


@pytest.mark.parametrize("name", ["", 5, None, b"add"])
def test_export_bad_name(name):
    with pytest.raises(hal.ValidationError, match=r"Export name must be a non-empty string"):
        hal.Export(name, bindings=1)


@pytest.mark.parametrize("kwargs, shown", [
    ({"bindings": -1}, r"bindings must be >= 0, got -1"),
    ({"bindings": 1, "constants": 1.0}, r"constants must be an integer, got float 1.0"),
    ({"bindings": True}, r"bindings must be an integer, got bool True"),
    ({"bindings": 1, "workgroup_size": (0, 1, 1)}, r"workgroup_size must be >= 1, got 0"),
    ({"bindings": 1, "workgroup_size": (1, 1, 1, 1)}, r"workgroup_size must be 1 to 3 positive integers"),
])
def test_export_bad_counts(kwargs, shown):
    with pytest.raises(hal.ValidationError, match=rf"Export 'k': {shown}"):
        hal.Export("k", **kwargs)


@pytest.mark.parametrize("readonly, shown", [
    ((3,), r"must be in \[0, 2\], got 3"), ((-1,), r"must be in \[0, 2\], got -1"),
    ((0, 1.0), "must be an integer, got float 1.0")])
def test_export_readonly_out_of_range(readonly, shown):
    with pytest.raises(hal.ValidationError, match=rf"Export 'k': readonly index {shown}"):
        hal.Export("k", bindings=3, readonly=readonly)


def test_export_readonly_of_mixed_types_is_a_validation_error():
    with pytest.raises(hal.ValidationError, match=r"Export 'k': readonly index"):
        hal.Export("k", bindings=3, readonly=(0, "1"))


def test_duplicate_export_names():
    e = hal.Export("a", bindings=1)
    with pytest.raises(hal.ValidationError, match=r"export names must be unique, got \['a', 'a'\]"):
        hal.ExecutableSource.python({"a": lambda ctx: None}, [e, hal.Export("a", bindings=2)])


def test_no_exports():
    with pytest.raises(hal.ValidationError, match=r"an executable needs at least one Export"):
        hal.ExecutableSource.python({}, [])


def test_glsl_string_for_two_exports():
    exports = [hal.Export("a", bindings=1), hal.Export("b", bindings=1)]
    with pytest.raises(hal.ValidationError,
                       match=r"glsl: one source string serves one export; give \{export: code\} for 2 exports"):
        hal.ExecutableSource.glsl("#version 450\nvoid main() {}", exports)


def test_python_mapping_missing_an_export():
    exports = [hal.Export("a", bindings=1), hal.Export("b", bindings=1)]
    with pytest.raises(hal.ValidationError,
                       match=r"python: code given for \['a'\] but the exports are \['a', 'b'\]"):
        hal.ExecutableSource.python({"a": lambda ctx: None}, exports)


def test_python_kernel_not_callable():
    with pytest.raises(hal.ValidationError, match=r"python: the code for export 'a' has the wrong type str"):
        hal.ExecutableSource.python({"a": "def a(ctx): pass"}, [hal.Export("a", bindings=1)])


def test_multi_with_no_parts():
    with pytest.raises(hal.ValidationError, match=r"multi: give at least one of cuda=, vulkan=, host="):
        hal.ExecutableSource.multi()


def test_multi_with_a_multi_part():
    with pytest.raises(hal.ValidationError, match=r"multi: host= must be a single-format ExecutableSource"):
        hal.ExecutableSource.multi(host=kernels.SOURCE)


def test_multi_with_disagreeing_exports():
    cuda = hal.ExecutableSource.cuda("extern \"C\" __global__ void a() {}", [hal.Export("a", bindings=0)])
    host = hal.ExecutableSource.python({"b": lambda ctx: None}, [hal.Export("b", bindings=0)])
    with pytest.raises(hal.ValidationError, match=r"multi: the exports of host= differ"):
        hal.ExecutableSource.multi(cuda=cuda, host=host)


@pytest.mark.parametrize("make, shown", [
    (lambda e: hal.ExecutableSource.cuda("   ", e), r"cuda: expected non-empty source text"),
    (lambda e: hal.ExecutableSource.spirv(b"", e), r"spirv: expected non-empty bytes"),
    (lambda e: hal.ExecutableSource.spirv(b"\x03\x02\x23", e), r"spirv: a SPIR-V module is a whole number of"),
    (lambda e: hal.ExecutableSource.cuda("x", e, options=(1,)), r"cuda options must be strings"),
])
def test_bad_source_payloads(make, shown):
    with pytest.raises(hal.ValidationError, match=shown):
        make([hal.Export("a", bindings=1)])


def test_host_refuses_cuda_source(host):
    source = hal.ExecutableSource.cuda('extern "C" __global__ void a(int *x) {}', [hal.Export("a", bindings=1)])
    with pytest.raises(hal.UnsupportedError, match=r"the host device runs Python kernels only, not 'cuda' code"):
        host.load_executable(source)


def test_host_refuses_spirv_source(host):
    source = hal.ExecutableSource.spirv(b"\x03\x02\x23\x07" + b"\x00" * 16, [hal.Export("a", bindings=1)])
    with pytest.raises(hal.UnsupportedError, match=r"the host device runs Python kernels only, not 'spirv' code"):
        host.load_executable(source)


def test_host_refuses_multi_without_host_part(host):
    cuda = hal.ExecutableSource.cuda('extern "C" __global__ void a(int *x) {}', [hal.Export("a", bindings=1)])
    with pytest.raises(hal.UnsupportedError, match=r"this multi source has no part for the host driver"):
        host.load_executable(hal.ExecutableSource.multi(cuda=cuda))


def test_load_executable_of_a_non_source(host):
    with pytest.raises(hal.ValidationError, match=r"load_executable: expected a hal\.ExecutableSource, got dict"):
        host.load_executable({"a": lambda ctx: None})


def test_export_workgroup_size_beyond_device_limit(make_device):
    dev = make_device(max_workgroup_invocations=32)
    with pytest.raises(hal.ValidationError,
                       match=r"export 'add': workgroup_size \(64, 1, 1\) exceeds .*max_workgroup_invocations 32"):
        dev.load_executable(kernels.SOURCE)
