"""Fixtures shared by the tests/hal modules."""

from __future__ import annotations

import pytest

import hal
from tests import kernels
from tests.hal.dependency_helpers import BUF


@pytest.fixture
def make_device():
    """Host devices with capability overrides; closed at teardown."""
    made = []

    def make(**capabilities):
        dev = hal.create_device("host", capabilities=capabilities or None)
        made.append(dev)
        return dev

    yield make
    for dev in made:
        dev.close()


@pytest.fixture
def exe(host):
    return host.load_executable(kernels.SOURCE)


@pytest.fixture
def bufs(host):
    return [host.allocate(BUF) for _ in range(8)]
