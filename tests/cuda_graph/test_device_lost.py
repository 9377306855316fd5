"""A GPU fault (issue 49): a kernel that writes far outside its buffer, run from a reusable command buffer (a graph)
or a one-shot one (launched on the stream), gives DeviceLostError at synchronize(); every later use of the device
raises DeviceLostError naming the fault, a new CUDA device in that process is refused at once saying why (CUDA keeps
such a fault until the process ends: backends/cuda_graph/context.py), close() returns; and the way to go on works:
the faulting work ran in a child process, and a new one gets a device that runs a kernel right, twenty times in a
row, the GPU's free memory flat (read by this process, whose own device keeps working throughout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hal
from tests import kernels
from tests.conftest import backend_or_skip, open_device

backend_or_skip("cuda")
pytestmark = pytest.mark.cuda

CHILD = r"""
import json, sys
import numpy as np
import hal
from tests import kernels

WILD = hal.ExecutableSource.cuda(
    'extern "C" __global__ void wild(unsigned* x) { *(volatile unsigned*)(x + (1ull << 40)) = 1u; }',
    [hal.Export("wild", bindings=1, workgroup_size=32)])


def raises(call, *words):
    try:
        call()
    except hal.DeviceLostError as e:
        assert all(w in str(e) for w in words), (words, str(e))
        return str(e)
    raise SystemExit(f"{call} raised nothing")


dev = hal.create_device("cuda")
x = dev.upload(np.arange(64, dtype=np.uint32))
cb = dev.create_command_buffer(mode="reusable")
with cb:
    cb.dispatch(dev.load_executable(kernels.SOURCE), "scale", (1, 1, 1), (64, 3), (x,))
dev.queue_execute(cb)
assert (x.read(np.uint32) == np.arange(64) * 3).all()
wild = dev.create_command_buffer(mode=sys.argv[1])
with wild:
    wild.dispatch(dev.load_executable(WILD), "wild", (1, 1, 1), (), (x,))
dev.queue_execute(wild)
fault = raises(dev.synchronize, "ILLEGAL_ADDRESS", "restart the process")
for use in (lambda: x.read(np.uint32), lambda: dev.queue_execute(cb), dev.synchronize):
    raises(use, "is lost", "ILLEGAL_ADDRESS")
refused = raises(lambda: hal.create_device("cuda"), "cannot be used in this process any more", "ILLEGAL_ADDRESS")
dev.close()
print(json.dumps(dict(fault=fault, refused=refused)))
"""


def test_twenty_faults_each_in_a_child_process_and_the_next_one_works():
    with open_device("cuda") as parent:
        from cuda.bindings import driver
        root = Path(__file__).resolve().parents[2]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
        exe = parent.load_executable(kernels.SOURCE)
        free = []
        for i in range(20):
            done = subprocess.run([sys.executable, "-c", CHILD, "reusable" if i % 2 == 0 else "one_shot"], env=env,
                                  capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
            json.loads(done.stdout.strip().splitlines()[-1])
            x = parent.upload(np.arange(64, dtype=np.uint32))
            cb = parent.create_command_buffer()
            with cb:
                cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (x,))
            parent.queue_execute(cb)
            np.testing.assert_array_equal(x.read(np.uint32), np.arange(64) * 3)
            parent.activate()
            free.append(int(driver.cuMemGetInfo()[1]))
        assert max(free[1:]) - min(free[1:]) < 64 << 20, free


SPIN = r"""
extern "C" __global__ void spin(unsigned ms) {  // runs for `ms` milliseconds of the GPU's clock
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < ms * 1000000ull);
}
"""


def test_a_kernel_still_running_times_synchronize_out_and_another_device_runs_meanwhile():
    with open_device("cuda") as dev, open_device("cuda") as other:
        spin = dev.load_executable(hal.ExecutableSource.cuda(SPIN, [hal.Export("spin", bindings=0, constants=1,
                                                                                workgroup_size=32)]))
        cb = dev.create_command_buffer()
        with cb:
            cb.dispatch(spin, "spin", (1, 1, 1), (1500,), ())
        dev.queue_execute(cb)
        with pytest.raises(hal.TimeoutError, match="the work queued on its stream .* still running after 0.2 s"):
            dev.synchronize(timeout=0.2)
        x = other.upload(np.arange(64, dtype=np.uint32))
        work = other.create_command_buffer()
        with work:
            work.dispatch(other.load_executable(kernels.SOURCE), "scale", (1, 1, 1), (64, 3), (x,))
        other.queue_execute(work)
        other.synchronize(timeout=1.0)  # while the first device's kernel still runs
        np.testing.assert_array_equal(x.read(np.uint32), np.arange(64) * 3)
        dev.synchronize(timeout=30)
