"""The conformance suite: the behaviour DESIGN.md promises, checked the same way on every backend.

Each test takes `dev`, one device per driver (host, vulkan, cuda); a missing driver skips its cases,
or fails them when HAL_REQUIRE names it. Kernels come from tests.kernels (the same uint32 arithmetic
as Python, GLSL and CUDA C), so every backend must agree with numpy to the bit.
"""

from __future__ import annotations

import pytest

from tests.conftest import open_device

SPECS = [
    pytest.param("host", id="host"),
    pytest.param("vulkan", id="vulkan", marks=pytest.mark.vulkan),
    pytest.param("cuda", id="cuda", marks=pytest.mark.cuda),
]


@pytest.fixture(scope="module", params=SPECS)
def dev(request):
    device = open_device(request.param)
    yield device
    device.close()


@pytest.fixture
def exe(dev):
    from tests import kernels
    return dev.load_executable(kernels.SOURCE)
