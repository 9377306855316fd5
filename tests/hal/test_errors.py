import builtins

import pytest

import hal
from hal.errors import integer


def test_the_hierarchy_of_design_md():
    for cls in (hal.ValidationError, hal.CompileError, hal.UnsupportedError, hal.DeviceError, hal.TimeoutError):
        assert issubclass(cls, hal.HalError)
    assert issubclass(hal.ValidationError, ValueError)
    assert issubclass(hal.OutOfMemoryError, hal.DeviceError)
    assert issubclass(hal.DeviceLostError, hal.DeviceError)
    assert issubclass(hal.TimeoutError, builtins.TimeoutError)
    assert hal.TimeoutError is not builtins.TimeoutError


def test_compile_error_carries_the_log():
    e = hal.CompileError("nvrtc failed", log="kernel.cu(3): error: expected ';'")
    assert e.log == "kernel.cu(3): error: expected ';'"
    assert "expected ';'" in str(e) and str(e).startswith("nvrtc failed")


def test_integer_accepts_numpy_integers_and_names_what_is_wrong():
    import numpy as np
    assert integer(np.int64(5), "x", 0, 9) == 5 and type(integer(np.uint8(5), "x")) is int
    with pytest.raises(hal.ValidationError, match=r"size must be an integer, got bool True"):
        integer(True, "size")
    with pytest.raises(hal.ValidationError, match=r"size must be in \[0, 9\], got 10"):
        integer(10, "size", 0, 9)
    with pytest.raises(hal.ValidationError, match=r"size must be >= 1, got 0"):
        integer(0, "size", 1)
