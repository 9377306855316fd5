"""README's example and its GPU twins run as written, and every backend computes the same (issue 44, item 4)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import hal
from tests.conftest import open_device

README = Path(__file__).resolve().parents[2] / "README.md"
pytestmark = pytest.mark.skipif(not README.exists(), reason="README.md is not beside the tests (they run outside the "
                                                            "source tree, on an installed wheel)")


def _python_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)


@pytest.fixture(params=[pytest.param("host", id="host"), pytest.param("vulkan", id="vulkan", marks=pytest.mark.vulkan),
                        pytest.param("cuda", id="cuda", marks=pytest.mark.cuda)])
def dev(request):
    device = open_device(request.param)
    yield device
    device.close()


def test_the_example_and_its_twins_agree(dev, capsys):
    example, twins = _python_blocks()[:2]
    scope: dict = {}
    exec(compile(example, "README.md (the example)", "exec"), scope)  # noqa: S102 - the README's own code
    assert "[1. 2. 3. 4.]" in capsys.readouterr().out
    exec(compile(twins, "README.md (the twins)", "exec"), scope)  # noqa: S102
    exe = dev.load_executable(scope["source"])
    a, b, out = dev.upload(np.arange(1024, dtype=np.float32)), dev.allocate(4096), dev.allocate(4096)
    cb = dev.create_command_buffer()
    with cb:
        cb.fill_buffer(b, np.float32(1.0))
        cb.execution_barrier()
        cb.dispatch(exe, "add", workgroups=(16, 1, 1), constants=(1000,), bindings=(a, b, out))
    dev.queue_execute(cb)
    got = out.read(np.float32)
    np.testing.assert_array_equal(got[:1000], np.arange(1000, dtype=np.float32) + 1)
    assert isinstance(exe, hal.Executable)
