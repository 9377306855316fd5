"""Typed constants (issue 44, item 1): generated values for an export declaring ("float32", "int32", "uint32") give
the same words on every backend present (the host oracle, Vulkan, CUDA) as numpy's conversion, literal or through
constant slots; a value of the wrong kind is refused at record (literals) or at queue_execute (slots), naming the
command, the constant and the type, with nothing submitted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hal
from tests.conftest import open_device

TYPES = ("float32", "int32", "uint32")
EXPORTS = [hal.Export("typed", bindings=1, constants=TYPES)]


def _typed(ctx):  # writes the three words it was given, as they are
    ctx.binding(0, np.uint32)[:3] = ctx.words


GLSL = """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) buffer Out { uint o[]; };
layout(push_constant) uniform P { float f; int i; uint u; } p;
void main() { o[0] = floatBitsToUint(p.f); o[1] = uint(p.i); o[2] = p.u; }
"""
CUDA = r"""
extern "C" __global__ void typed(unsigned* out, float f, int i, unsigned u) {
    out[0] = __float_as_uint(f); out[1] = (unsigned)i; out[2] = u;
}
"""
SOURCE = hal.ExecutableSource.multi(host=hal.ExecutableSource.python({"typed": _typed}, EXPORTS),
                                    vulkan=hal.ExecutableSource.glsl({"typed": GLSL}, EXPORTS),
                                    cuda=hal.ExecutableSource.cuda(CUDA, EXPORTS))
SPECS = [pytest.param("host", id="host"), pytest.param("vulkan", id="vulkan", marks=pytest.mark.vulkan),
         pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)]


@pytest.fixture(scope="module", params=SPECS)
def dev(request):
    device = open_device(request.param)
    yield device
    device.close()


def _expected(f, i, u) -> list[int]:
    return [int(np.float32(f).view(np.uint32)), int(np.int32(i).view(np.uint32)), int(np.uint32(u))]


def _run(dev, constants, slots: bool) -> list[int]:
    exe = dev.load_executable(SOURCE)
    out = dev.allocate(12)
    cb = dev.create_command_buffer(mode="reusable", constant_capacity=3 if slots else 0)
    with cb:
        cb.dispatch(exe, "typed", (1, 1, 1), tuple(hal.constant_slot(k) for k in range(3)) if slots else constants,
                    (out,))
    dev.queue_execute(cb, constants=constants if slots else ())
    return out.read(np.uint32).tolist()


numbers = st.one_of(st.integers(-(1 << 31), (1 << 31) - 1), st.floats(width=32, allow_nan=False),
                    st.integers(0, 1000).map(np.int64), st.floats(-1e6, 1e6).map(np.float64))


@settings(max_examples=25, deadline=None)
@given(f=numbers, i=st.integers(-(1 << 31), (1 << 31) - 1), u=st.integers(0, (1 << 32) - 1), slots=st.booleans())
def test_every_backend_packs_what_numpy_converts(dev, f, i, u, slots):
    assert _run(dev, (f, i, u), slots) == _expected(f, i, u)


@pytest.mark.parametrize("constants, position, why", [
    ((1.0, 2.5, 3), 1, "a float; a int32 constant takes an integer"),
    ((1.0, 2, -1), 2, "outside uint32's range"),
    (("1.0", 2, 3), 0, "is not a number"),
    ((1.0, 1 << 31, 3), 1, "outside int32's range"),
    ((True, 2, 3), 0, "is not a number"),
])
def test_a_value_of_the_wrong_kind_is_refused_at_record_and_at_submit(dev, constants, position, why):
    exe = dev.load_executable(SOURCE)
    out = dev.allocate(12)
    cb = dev.create_command_buffer()
    cb.begin()
    with pytest.raises(hal.ValidationError, match=rf"command 0 \(dispatch typed\): constants\[{position}\] = .* for "
                                                  rf"a {TYPES[position]} constant: .*{why}"):
        cb.dispatch(exe, "typed", (1, 1, 1), constants, (out,))
    slotted = dev.create_command_buffer(mode="reusable", constant_capacity=3)
    with slotted:
        slotted.dispatch(exe, "typed", (1, 1, 1), tuple(hal.constant_slot(k) for k in range(3)), (out,))
    with pytest.raises(hal.ValidationError, match=rf"queue_execute: constants\[{position}\] = .* for constant slot "
                                                  rf"{position}, a {TYPES[position]}"):
        dev.queue_execute(slotted, constants=constants)
    dev.synchronize()


def test_a_slot_read_as_two_types_is_refused(dev):
    exe = dev.load_executable(SOURCE)
    out = dev.allocate(12)
    cb = dev.create_command_buffer(constant_capacity=2)
    cb.begin()
    cb.dispatch(exe, "typed", (1, 1, 1), (1.0, hal.constant_slot(0), 3), (out,))
    with pytest.raises(hal.ValidationError, match=r"command 1 \(dispatch typed\): constants\[2\] reads constant slot 0 "
                                                  r"as uint32, but command 0 reads it as int32"):
        cb.dispatch(exe, "typed", (1, 1, 1), (1.0, 2, hal.constant_slot(0)), (out,))


def test_untyped_exports_keep_their_words(dev):
    """constants=N keeps 32-bit words of anything that fits (the behaviour before typed constants)."""
    untyped = [hal.Export("typed", bindings=1, constants=3)]
    source = hal.ExecutableSource.multi(host=hal.ExecutableSource.python({"typed": _typed}, untyped),
                                        vulkan=hal.ExecutableSource.glsl({"typed": GLSL}, untyped),
                                        cuda=hal.ExecutableSource.cuda(CUDA, untyped))
    exe = dev.load_executable(source)
    out = dev.allocate(12)
    cb = dev.create_command_buffer()
    with cb:
        cb.dispatch(exe, "typed", (1, 1, 1), (1.5, -1, 7), (out,))
    dev.queue_execute(cb)
    assert out.read(np.uint32).tolist() == _expected(1.5, -1, 7)


def test_vulkan_refuses_a_declaration_its_shader_disagrees_with():
    vk = open_device("vulkan") if "vulkan" in hal.available_drivers() else pytest.skip("no Vulkan device")
    try:
        wrong = [hal.Export("typed", bindings=1, constants=("uint32", "int32", "uint32"))]
        with pytest.raises(hal.ValidationError, match=r"constants\[0\] is declared uint32, but the shader's "
                                                      r"push-constant member at offset 0 is a float32"):
            vk.load_executable(hal.ExecutableSource.glsl({"typed": GLSL}, wrong))
    finally:
        vk.close()
