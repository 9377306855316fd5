"""The CUDA device: capabilities from the device, sharing memory with PyTorch and CuPy without copies,
semaphores on the GPU side, and a faulting kernel that loses the device but not the process."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import hal
from tests import kernels
from tests.conftest import backend_or_skip, open_device

backend_or_skip("cuda")

pytestmark = pytest.mark.cuda


def test_capabilities_come_from_the_device(gpu):
    caps = gpu.capabilities
    assert caps.max_push_constants_size == 4096  # the kernel parameter limit
    assert caps.max_workgroup_invocations >= 1024 and caps.max_workgroup_size[0] >= 1024
    assert caps.max_workgroup_count[0] >= 2**31 - 1
    assert gpu.compute_capability >= (7, 0)


def test_dlpack_round_trip_with_torch_shares_memory(gpu, exe):
    torch = pytest.importorskip("torch")
    n = 1000
    buf = gpu.upload(np.arange(n, dtype=np.uint32))
    view = torch.from_dlpack(buf)
    assert view.data_ptr() == buf.address and view.numel() == 4 * n and view.is_cuda
    view[:4].fill_(0)  # torch writes hal's memory
    torch.cuda.synchronize()
    assert buf.read(np.uint32, count=1)[0] == 0
    t = torch.arange(n, dtype=torch.int32, device="cuda")
    imported = gpu.import_buffer(t)
    assert imported.address == t.data_ptr() and imported.size == 4 * n
    cb = gpu.create_command_buffer()
    with cb:
        cb.dispatch(exe, "scale", kernels.groups(n), (n, 3), (imported,))
    gpu.queue_execute(cb)
    gpu.synchronize()
    np.testing.assert_array_equal(t.cpu().numpy(), np.arange(n) * 3)  # hal wrote torch's memory
    imported.release()
    assert t.sum().item() == 3 * n * (n - 1) // 2  # releasing an import leaves the memory to its owner


def test_cuda_array_interface_with_cupy(gpu):
    cupy = pytest.importorskip("cupy")
    buf = gpu.upload(np.arange(16, dtype=np.uint8))
    array = cupy.asarray(buf)
    assert array.data.ptr == buf.address
    np.testing.assert_array_equal(cupy.asnumpy(array), np.arange(16))


def test_import_refuses_strided_memory(gpu):
    torch = pytest.importorskip("torch")
    t = torch.zeros((8, 8), device="cuda")[:, ::2]
    with pytest.raises(hal.ValidationError, match=r"strided"):
        gpu.import_buffer(t)


def test_a_faulting_kernel_loses_the_device_and_the_process_goes_on():
    """In a child process, since a fault spoils the CUDA context for everything in the process."""
    script = textwrap.dedent("""
        import numpy as np, hal
        dev = hal.create_device("cuda")
        exe = dev.load_executable(hal.ExecutableSource.cuda(
            'extern "C" __global__ void wild(unsigned* x) { ((unsigned*)0x10)[threadIdx.x] = 1; }',
            [hal.Export("wild", bindings=1, workgroup_size=32)]))
        x = dev.allocate(256)
        fine = dev.create_command_buffer(mode="reusable")
        with fine:
            fine.fill_buffer(x, np.uint32(1))
        dev.queue_execute(fine)  # built and launched: a resubmission takes the one-launch path
        cb = dev.create_command_buffer()
        with cb:
            cb.dispatch(exe, "wild", (1, 1, 1), (), (x,))
        dev.queue_execute(cb)
        try:
            dev.synchronize()
        except hal.DeviceLostError as e:
            print("lost:", e)
        try:
            dev.allocate(16)
        except hal.DeviceLostError:
            print("still lost")
        try:
            dev.queue_execute(fine)
        except hal.DeviceLostError:
            print("resubmission refused")
        print("alive")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "lost:" in done.stdout and "ILLEGAL_ADDRESS" in done.stdout
    assert "still lost" in done.stdout and "resubmission refused" in done.stdout and "alive" in done.stdout


def test_a_submission_waits_for_another_on_the_gpu(gpu, exe):
    """Both are queued before the host signals anything: the second waits for the first's signal on the GPU."""
    gate, sem = gpu.create_semaphore(0), gpu.create_semaphore(0)
    x = gpu.upload(np.ones(4, np.uint32))
    for k, (wait, signal) in enumerate((((gate, 1), (sem, 1)), ((sem, 1), (sem, 2)))):
        cb = gpu.create_command_buffer()
        with cb:
            cb.dispatch(exe, "scale", (1, 1, 1), (4, 3 + k), (x,))
        gpu.queue_execute(cb, wait=[wait], signal=[signal])
    assert sem.query() == 0
    gate.signal(1)
    sem.wait(2, timeout=10)
    np.testing.assert_array_equal(x.read(np.uint32), np.full(4, 12, np.uint32))


def test_queue_waits_for_and_signals_a_torch_stream_without_a_host_wait(gpu):
    torch = pytest.importorskip("torch")
    stream = torch.cuda.Stream()
    shared = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    imported, copy = gpu.import_buffer(shared), gpu.allocate(4 << 20)
    with torch.cuda.stream(stream):
        torch.cuda._sleep(50_000_000)  # tens of ms of GPU time before torch writes
        shared.fill_(5)
    gpu.queue_wait_stream(stream)
    gpu.queue_copy(imported, copy)
    np.testing.assert_array_equal(copy.read(np.int32)[:4], [5, 5, 5, 5])  # the copy came after torch's fill

    gate = gpu.create_semaphore(0)
    gpu.queue_fill(imported, np.uint32(7), wait=[(gate, 1)])  # held until the host signals
    gpu.queue_signal_stream(stream)
    with torch.cuda.stream(stream):
        seen = shared.clone()  # waits for hal's fill on the GPU
    gate.signal(1)
    torch.cuda.synchronize()
    assert int(seen.min()) == 7 and int(seen.max()) == 7
    with pytest.raises(hal.ValidationError, match="expected a CUDA stream"):
        gpu.queue_wait_stream("stream")


def test_pinned_memory_freed_while_the_stream_waits_at_a_host_call_does_not_wait_for_it():
    """cuMemFreeHost waits for the whole stream. A semaphore's pinned word, done with before a host call's gate, is
    freed at a collect while the stream is stopped at that gate, whose function needs a lock the collecting thread
    holds: the free must wait for an idle stream, not the collect for the function (a deadlock before)."""
    dev = open_device("cuda")
    try:
        first, started = threading.Event(), threading.Event()
        held = threading.Lock()

        def needs_the_lock() -> None:
            started.set()
            if held.acquire(timeout=20):
                held.release()

        sem = dev.create_semaphore(0)
        dev.queue_host_call(lambda: first.wait(20))
        del sem
        gc.collect()
        dev.collect()  # stamped with a mark after the first gate: done with once the queue passes it
        dev.queue_host_call(needs_the_lock)
        with held:
            first.set()
            assert started.wait(20)  # the queue is past the mark, stopped at the second gate
            t0 = time.perf_counter()
            dev.collect()
            elapsed = time.perf_counter() - t0
        assert elapsed < 5, f"collect() waited {elapsed:.1f} s for the host call"
        dev.synchronize()  # the stream idle: the word is freed now
        assert dev.host_frees_pending == 0
    finally:
        dev.close()
