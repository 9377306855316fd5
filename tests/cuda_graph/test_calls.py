"""Calls on CUDA (issue 50, items 1 to 3; hal.calls): a library's work captured from a stream into a child graph node
of the command buffer's graph (cuBLAS through torch here), captured once per set of buffer addresses and constants
and kept (CALL_CAPTURES per call), the exec's node set to the capture for a new table without instantiating again;
a function that raises or does what a capture forbids fails the recording or the submission with a message saying
so, and the command buffer stays usable."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from tests.conftest import backend_or_skip, open_device

backend_or_skip("cuda")

from cuda.bindings import driver  # noqa: E402

from backends.cuda_graph.graph_builder import CALL_CAPTURES  # noqa: E402

N = 64
MATRIX = 4 * N * N


@pytest.fixture
def dev():
    with open_device("cuda") as device:
        yield device


def torch_matmul(ctx):
    """C = A @ B with torch (cuBLAS) on the stream hal captures, into binding 2."""
    import torch
    a, b, c = (torch.as_tensor(ctx.binding(i, np.float32), device="cuda").view(N, N) for i in range(3))
    with torch.cuda.stream(torch.cuda.ExternalStream(ctx.stream)):
        torch.matmul(a, b, out=c)


def matrices(dev, count):
    rng = np.random.default_rng(1)
    hosts = [rng.standard_normal((N, N)).astype(np.float32) for _ in range(count)]
    return hosts, [dev.upload(h) for h in hosts]


def test_cublas_through_torch_runs_between_hal_s_commands(dev):
    pytest.importorskip("torch", reason="torch is not installed")
    (a, b), (da, db) = matrices(dev, 2)
    c = dev.allocate(MATRIX)
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(c, np.float32(7.0))
        cb.execution_barrier()
        cb.call(torch_matmul, (da, db, c), reads=(0, 1))
        cb.execution_barrier()
        cb.copy_buffer(c, da)
    for _ in range(2):  # the second: A is the product
        dev.queue_execute(cb)
        a = a @ b
    np.testing.assert_allclose(c.read(np.float32).reshape(N, N), a, rtol=1e-3, atol=1e-3)
    assert cb.emitter.calls_captured == 1 and cb.emitter.instantiations == 1
    graph = cb.emitter.emitted_graph()
    assert graph.nodes[1]["type"] == "CU_GRAPH_NODE_TYPE_GRAPH" and sorted(graph.edges) == [(0, 1), (1, 2)]


def test_calls_run_in_their_recording_order_as_on_one_stream(dev):
    """Independent calls still run one after the other: torch's cuBLAS keeps one workspace per stream, which every
    capture from the device's capture stream shares (at 512 x 512 cuBLAS uses it; running at once, they clobbered
    each other's)."""
    pytest.importorskip("torch", reason="torch is not installed")
    from bench.cublas import torch_matmul
    n, count = 512, 6
    rng = np.random.default_rng(2)
    a = rng.standard_normal((n, n)).astype(np.float32)
    bs = [rng.standard_normal((n, n)).astype(np.float32) for _ in range(count)]
    da, dbs, dcs = dev.upload(a), [dev.upload(b) for b in bs], [dev.allocate(4 * n * n) for _ in range(count)]
    cb = dev.create_command_buffer(mode="reusable", dependencies="hazards")
    with cb:
        for k in range(count):
            cb.call(torch_matmul(n), (da, dbs[k], dcs[k]), reads=(0, 1))
    for _ in range(3):
        dev.queue_execute(cb)
    for k in range(count):
        np.testing.assert_allclose(dcs[k].read(np.float32).reshape(n, n), a @ bs[k], rtol=1e-3, atol=1e-2)
    assert cb.dependency_graph().number_of_edges() == 0
    assert sorted(cb.emitter.emitted_graph().edges) == [(k, k + 1) for k in range(count - 1)]


def test_a_new_table_sets_the_node_to_a_kept_capture_without_instantiating(dev):
    calls = []

    def copy(ctx):
        calls.append(ctx.pointer(0))
        driver.cuMemcpyDtoDAsync(ctx.pointer(1), ctx.pointer(0), ctx.size(0), driver.CUstream(ctx.stream))

    sources = [dev.upload(np.full(16, k, np.uint32)) for k in range(CALL_CAPTURES + 1)]
    target = dev.allocate(64)
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=1)
    with cb:
        cb.call(copy, (hal.slot(0), target), reads=(0,))
    order = [0, 1, 0, 1] + list(range(CALL_CAPTURES + 1)) + [1]
    for k in order:
        dev.queue_execute(cb, binding_table=(sources[k],))
        np.testing.assert_array_equal(target.read(np.uint32), np.full(16, k))
    # 0 and 1 once each, then 2..16 (16 captures kept: 0 is dropped when 16 comes), 1 still kept at the end.
    assert len(calls) == CALL_CAPTURES + 1 and cb.emitter.instantiations == 1
    dev.queue_execute(cb, binding_table=(sources[0],))  # dropped: captured again
    assert len(calls) == CALL_CAPTURES + 2 and cb.emitter.patched == 1


def test_one_shot_and_single_pass_command_buffers_capture_too(dev):
    x = dev.upload(np.arange(16, dtype=np.uint32))

    def set_five(ctx):
        driver.cuMemsetD32Async(ctx.pointer(0), 5, 16, driver.CUstream(ctx.stream))

    for mode, strategy in (("one_shot", "deferred"), ("reusable", "single_pass")):
        cb = dev.create_command_buffer(mode=mode, strategy=strategy)
        with cb:
            cb.fill_buffer(x, np.uint32(1))
            cb.execution_barrier()
            cb.call(set_five, (x,))
        dev.queue_execute(cb)
        np.testing.assert_array_equal(x.read(np.uint32), np.full(16, 5))
        assert cb.emitter.calls_captured == 1


@pytest.mark.parametrize("forbidden", ["synchronize the stream", "synchronize an event", "query the stream"])
def test_a_function_doing_what_a_capture_forbids_is_told_so_and_the_command_buffer_stays_usable(dev, forbidden):
    x = dev.upload(np.zeros(16, np.uint32))

    def misbehave(ctx):
        stream = driver.CUstream(ctx.stream)
        driver.cuMemsetD32Async(ctx.pointer(0), 3, 16, stream)
        if forbidden == "synchronize the stream":
            result, = driver.cuStreamSynchronize(stream)
        elif forbidden == "synchronize an event":
            _, event = driver.cuEventCreate(0)
            driver.cuEventRecord(event, stream)
            result, = driver.cuEventSynchronize(event)
            driver.cuEventDestroy(event)
        else:
            result, = driver.cuStreamQuery(stream)
        if result != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"the library got {result.name}")

    cb = dev.create_command_buffer(mode="reusable")
    cb.begin()
    cb.call(misbehave, (x,))
    with pytest.raises(hal.DeviceError, match=r"command 0 \(call\): its function did what CUDA forbids while a "
                                              r"stream is captured \(CUDA_ERROR_STREAM_CAPTURE_\w+.*synchronizing"):
        cb.end()
    cb.reset()
    with cb:
        cb.fill_buffer(x, np.uint32(9))
    dev.queue_execute(cb)
    np.testing.assert_array_equal(x.read(np.uint32), np.full(16, 9))
    np.testing.assert_array_equal(dev.upload(np.ones(4, np.uint32)).read(np.uint32), np.ones(4))  # device works


def test_a_function_failing_at_a_new_table_fails_that_submission_only(dev):
    good, bad = dev.upload(np.full(16, 1, np.uint32)), dev.upload(np.full(16, 2, np.uint32))
    short = dev.allocate(60)
    target = dev.allocate(64)

    def copy(ctx):
        if ctx.size(0) == 60:
            raise ValueError("not this one")
        driver.cuMemcpyDtoDAsync(ctx.pointer(1), ctx.pointer(0), 64, driver.CUstream(ctx.stream))

    cb = dev.create_command_buffer(mode="reusable", binding_capacity=1)
    with cb:
        cb.call(copy, (hal.slot(0), target), reads=(0,))
    dev.queue_execute(cb, binding_table=(good,))
    with pytest.raises(hal.DeviceError, match=r"command 0 \(call\): its function raised ValueError\('not this one'\)"):
        dev.queue_execute(cb, binding_table=(short,))
    dev.queue_execute(cb, binding_table=(bad,))
    np.testing.assert_array_equal(target.read(np.uint32), np.full(16, 2))
