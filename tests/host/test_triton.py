"""Triton kernels on the host, in Triton's interpreter (a process with TRITON_INTERPRET=1, and torch): the same
checks as on CUDA, so the host is their oracle; and what is refused without Triton, the interpreter or torch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import hal


def test_without_triton_the_source_is_refused_saying_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # (an import of it raises ImportError)
    with pytest.raises(hal.UnsupportedError, match=r"pip install 'hal-command-buffers\[triton\]'"):
        hal.ExecutableSource.triton({"k": lambda: None}, [hal.Export("k", bindings=0, workgroup_size=128)])


pytest.importorskip("triton", reason="Triton is not installed: pip install 'hal-command-buffers[triton]'")
from tests import triton_kernels as tk  # noqa: E402


def test_a_compiled_kernel_is_refused_by_the_host_saying_how_to_interpret_it(host):
    with pytest.raises(hal.UnsupportedError, match="TRITON_INTERPRET=1"):
        host.load_executable(tk.scale_source())


CHECKS = """
import hal
from tests import triton_kernels as tk
with hal.create_device("host") as dev:
    for mode in ("reusable", "one_shot"):
        tk.check_tables_and_constant_slots(dev, mode)
    tk.check_indirect_loop_transients_hazards(dev)
    tk.check_matmul(dev, "reusable")
    try:
        hal.create_device("cuda").load_executable(tk.scale_source())
    except hal.UnsupportedError as e:
        print("cuda:", e)
print("checks passed")
"""


def test_under_triton_interpret_the_host_runs_the_checks_cuda_runs():
    pytest.importorskip("torch", reason="Triton's interpreter takes torch tensors: pip install torch")
    root = Path(tk.__file__).parent.parent
    path = os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=path)
    done = subprocess.run([sys.executable, "-c", CHECKS], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "checks passed" in done.stdout
