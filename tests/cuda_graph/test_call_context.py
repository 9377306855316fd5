"""What a call's function gets on CUDA (backends.cuda_graph.call_context), without a device: each binding as a CUDA
Array Interface array, its address and size, the refusals of a wrong index or element type, and the messages of a
function that raised or did what a capture forbids."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.conftest import backend_or_skip

backend_or_skip("cuda")

from backends.cuda_graph.call_context import CallFailed, CudaArray, CudaCallContext  # noqa: E402


def test_a_binding_is_an_array_any_cuda_library_takes():
    ctx = CudaCallContext(stream=0x1234, device=1, buffers=((0x7000, 64), (0x8000, 6)), constants=(3, 1.5))
    array = ctx.binding(0, np.float32)
    assert array.__cuda_array_interface__ == {"shape": (16,), "typestr": "<f4", "data": (0x7000, False), "version": 3,
                                              "strides": None, "stream": None}
    assert (ctx.pointer(1), ctx.size(1), ctx.stream, ctx.device, ctx.constants) == (0x8000, 6, 0x1234, 1, (3, 1.5))
    assert ctx.binding(1).shape == (6,)  # bytes by default
    with pytest.raises(hal.ValidationError, match="binding 2: the call has 2 bindings"):
        ctx.pointer(2)
    with pytest.raises(hal.ValidationError, match="6 bytes is not a whole number of float32 elements"):
        ctx.binding(1, np.float32)
    assert isinstance(array, CudaArray)


def test_a_failed_capture_says_what_the_function_did():
    raised = RuntimeError("CUDA error: operation not permitted when stream is capturing")
    forbidden = CallFailed.of(3, raised, 901)  # CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert isinstance(forbidden, hal.DeviceError) and forbidden.__cause__ is raised
    assert str(forbidden).startswith("command 3 (call): its function did what CUDA forbids while a stream is "
                                     "captured (CUDA_ERROR_STREAM_CAPTURE_INVALIDATED; it raised RuntimeError(")
    assert "synchronizing ctx.stream" in str(forbidden)
    plain = CallFailed.of(0, ValueError("no"), 0)
    assert str(plain) == "command 0 (call): its function raised ValueError('no') while its work was captured"
