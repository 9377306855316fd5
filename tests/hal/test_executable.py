import copy
import pickle

import numpy as np
import pytest

import hal


def _k(ctx):
    ctx.binding(0, np.uint32)[:] += 1


EXPORT = hal.Export("k", bindings=1, workgroup_size=(8, 2))


def test_export_normalises_workgroup_size_and_readonly():
    e = hal.Export("k", bindings=3, workgroup_size=32, readonly=[2, 0, 2])
    assert e.workgroup_size == (32, 1, 1)
    assert e.readonly == (0, 2)
    assert e.writes == (False, True, False)
    assert e == hal.Export("k", bindings=3, workgroup_size=(32, 1, 1), readonly=(0, 2))


def test_text_sources_with_the_same_content_share_a_key():
    a = hal.ExecutableSource.ptx(".version 8.0", [EXPORT])
    b = hal.ExecutableSource.ptx(b".version 8.0", [EXPORT])
    c = hal.ExecutableSource.ptx(".version 8.1", [EXPORT])
    assert a.key == b.key != c.key
    assert hal.ExecutableSource.cuda("x", [EXPORT], options=("-O3",)).key != \
        hal.ExecutableSource.cuda("x", [EXPORT]).key
    assert hal.ExecutableSource.cuda("x", [EXPORT], imports=("y",)).key != \
        hal.ExecutableSource.cuda("x", [EXPORT]).key


def test_spirv_must_be_whole_words():
    with pytest.raises(hal.ValidationError, match="32-bit words"):
        hal.ExecutableSource.spirv(b"\x03\x02\x23", [EXPORT])


def test_multi_gives_each_driver_its_part():
    host = hal.ExecutableSource.python({"k": _k}, [EXPORT])
    cuda = hal.ExecutableSource.cuda("extern \"C\" __global__ void k(unsigned *x) {}", [EXPORT])
    multi = hal.ExecutableSource.multi(cuda=cuda, host=host)
    assert multi.for_driver("host") is host
    assert multi.for_driver("cuda") is cuda
    with pytest.raises(hal.UnsupportedError, match="no part for the vulkan driver"):
        multi.for_driver("vulkan")


def test_multi_parts_must_agree_on_exports():
    host = hal.ExecutableSource.python({"k": _k}, [EXPORT])
    other = hal.ExecutableSource.ptx("x", [hal.Export("k", bindings=2)])
    with pytest.raises(hal.ValidationError, match="exports of"):
        hal.ExecutableSource.multi(cuda=other, host=host)


def test_loading_is_cached_per_device_by_content(host):
    source = hal.ExecutableSource.python({"k": _k}, [EXPORT])
    exe = host.load_executable(source)
    assert host.load_executable(hal.ExecutableSource.python({"k": _k}, [EXPORT])) is exe
    assert host.load_executable(hal.ExecutableSource.multi(host=source)) is exe
    with hal.create_device("host") as other:
        assert other.load_executable(source) is not exe


def test_export_lookup_names_the_choices(host):
    exe = host.load_executable(hal.ExecutableSource.python({"k": _k}, [EXPORT]))
    assert exe.export("k") is EXPORT
    with pytest.raises(hal.ValidationError, match="has k"):
        exe.export("nope")


def test_an_executable_is_not_copied(host):
    """A copy would be a second owner of what the device holds for it (and a copy of its compiled base alone
    would have no device): copying refuses, the executable stays whole."""
    exe = host.load_executable(hal.ExecutableSource.python({"k": _k}, [EXPORT]))
    for copier in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError):
            copier(exe)
    assert exe.device is host and exe.export("k") is EXPORT


def test_exports_beyond_device_limits_are_refused_at_load():
    with hal.create_device("host", capabilities={"max_workgroup_size": (4, 4, 4)}) as dev:
        with pytest.raises(hal.ValidationError, match="workgroup_size"):
            dev.load_executable(hal.ExecutableSource.python({"k": _k}, [EXPORT]))
    with hal.create_device("host", capabilities={"max_per_stage_descriptor_storage_buffer": 0}) as dev:
        with pytest.raises(hal.ValidationError, match="bindings exceed"):
            dev.load_executable(hal.ExecutableSource.python({"k": _k}, [EXPORT]))
