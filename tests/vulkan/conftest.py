"""Vulkan backend tests: lavapipe in CI (HAL_REQUIRE=vulkan makes a missing device a failure), the GPU's
Vulkan driver on a GPU machine. Kernels come from tests.kernels (GLSL) or are assembled here."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import open_device


@pytest.fixture(scope="module")
def vk():
    dev = open_device("vulkan")
    yield dev
    dev.close()


@pytest.fixture
def fresh():
    """A device of its own, for tests that count objects or change how the device is set up."""
    devices = []

    def make(**capabilities):
        dev = open_device("vulkan", capabilities=capabilities or None)
        devices.append(dev)
        return dev

    yield make
    for dev in devices:
        dev.close()


def assemble(text: str, target: str = "spv1.5") -> bytes:
    """SPIR-V assembly -> binary, with spirv-as (spirv-tools)."""
    tool = shutil.which("spirv-as")
    if tool is None:
        pytest.fail("spirv-as is not installed (Debian: apt-get install spirv-tools)")
    done = subprocess.run([tool, "--target-env", target, "-o", "-", "-"], input=text.encode(), capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout
