"""CUDA graph backend tests (marker `cuda`): skipped without an NVIDIA GPU, failed when HAL_REQUIRE names cuda."""

from __future__ import annotations

import pytest

from tests import kernels
from tests.conftest import open_device


@pytest.fixture(scope="module")
def gpu():
    dev = open_device("cuda")
    yield dev
    dev.close()


@pytest.fixture(scope="module")
def exe(gpu):
    return gpu.load_executable(kernels.SOURCE)
