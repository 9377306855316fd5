"""Triton kernels for the tests of ExecutableSource.triton (imported only where Triton is installed)."""

from __future__ import annotations

import numpy as np
import triton
import triton.language as tl

import hal


@triton.jit
def scale(x, out, n, factor, BLOCK: tl.constexpr):
    """out[i] = x[i] * factor for i < n."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + i, tl.load(x + i, mask=i < n) * factor, mask=i < n)


@triton.jit
def countdown(flag: "*u32", total: "*u32", step):  # noqa: F722 - Triton's type annotations
    """One program: total += step; flag -= 1 (a loop's body)."""
    tl.store(total, tl.load(total) + step)
    tl.store(flag, tl.load(flag) - 1)


@triton.jit
def matmul(a, b, c, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
           BK: tl.constexpr):
    """c = a @ b (row-major, fp16 in, fp32 out), a BM x BN tile a program: with 3 stages, more shared memory than
    48 KiB."""
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        a_tile = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
        acc += tl.dot(a_tile, tl.load(b + (k + rk)[:, None] * N + rn[None, :]))
    tl.store(c + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def described(x, out, BLOCK: tl.constexpr):
    """A device-side tensor descriptor: Triton then needs global scratch, which hal does not give."""
    tl.store(out + tl.arange(0, BLOCK), tl.make_tensor_descriptor(x, shape=[1024], strides=[1],
                                                                 block_shape=[BLOCK]).load([0]))


BLOCK = 256
SCALE = hal.Export("scale", bindings=2, constants=("uint32", "float32"), workgroup_size=128, readonly=(0,))
COUNTDOWN = hal.Export("countdown", bindings=2, constants=("uint32",), workgroup_size=128)
MATMUL = hal.Export("matmul", bindings=3, workgroup_size=256, readonly=(0, 1))
M, N, K = 256, 256, 512


def scale_source() -> hal.ExecutableSource:
    return hal.ExecutableSource.triton({"scale": scale, "countdown": countdown}, [SCALE, COUNTDOWN],
                                       constexprs={"scale": {"BLOCK": BLOCK}})


def matmul_source() -> hal.ExecutableSource:
    return hal.ExecutableSource.triton({"matmul": matmul}, [MATMUL], num_warps=8, num_stages=3,
                                       constexprs={"matmul": dict(M=M, N=N, K=K, BM=128, BN=128, BK=64)},
                                       signature={"matmul": {"a": "*fp16", "b": "*fp16"}})


# The checks each device runs (tests/cuda_graph/test_triton.py, tests/host/test_triton.py).
def check_tables_and_constant_slots(dev: hal.Device, mode: str) -> None:
    exe = dev.load_executable(scale_source())
    assert dev.load_executable(scale_source()) is exe
    n = 1000
    xs = [dev.upload(np.arange(n, dtype=np.float32) + k) for k in range(2)]
    outs = [dev.allocate(4 * n) for _ in range(2)]
    cb = dev.create_command_buffer(mode=mode, binding_capacity=2, constant_capacity=1)
    with cb:
        cb.dispatch(exe, "scale", (-(-n // BLOCK), 1, 1), (n, hal.constant_slot(0)), (hal.slot(0), hal.slot(1)))
    for k in range(2 if mode == "reusable" else 1):
        dev.queue_execute(cb, binding_table=(xs[k], outs[k]), constants=(1.5 + k,))
        np.testing.assert_array_equal(outs[k].read(np.float32), (np.arange(n, dtype=np.float32) + k) * (1.5 + k))


def check_indirect_loop_transients_hazards(dev: hal.Device) -> None:
    exe = dev.load_executable(scale_source())
    n = 700
    x = dev.upload(np.arange(n, dtype=np.float32))
    out = dev.allocate(4 * n)
    counts = dev.upload(np.array([-(-n // BLOCK), 1, 1], np.uint32))
    flag, total = dev.upload(np.array([5], np.uint32)), dev.upload(np.array([0], np.uint32))
    cb = dev.create_command_buffer(mode="reusable", constant_capacity=1, dependencies="hazards")
    with cb:
        tmp = cb.alloca(4 * n)
        cb.dispatch_indirect(exe, "scale", counts, (n, hal.constant_slot(0)), (x, tmp))
        cb.execution_barrier()
        cb.dispatch(exe, "scale", (-(-n // BLOCK), 1, 1), (n, 2.0), (tmp, out))
        with cb.while_nonzero(flag):  # (no barrier: under hazards nothing before the loop touches its buffers)
            cb.dispatch(exe, "countdown", (1, 1, 1), (3,), (flag, total))
    dev.queue_execute(cb, constants=(0.5,))
    np.testing.assert_array_equal(out.read(np.float32), np.arange(n, dtype=np.float32))
    assert total.read(np.uint32)[0] == 15 and flag.read(np.uint32)[0] == 0


def check_matmul(dev: hal.Device, mode: str) -> None:
    exe = dev.load_executable(matmul_source())
    rng = np.random.default_rng(0)
    a = rng.standard_normal((M, K)).astype(np.float16)
    b = rng.standard_normal((K, N)).astype(np.float16)
    c = dev.allocate(4 * M * N)
    cb = dev.create_command_buffer(mode=mode)
    with cb:
        cb.dispatch(exe, "matmul", (M // 128, N // 128, 1), (), (dev.upload(a), dev.upload(b), c))
    dev.queue_execute(cb)
    expected = a.astype(np.float32) @ b.astype(np.float32)
    np.testing.assert_allclose(c.read(np.float32).reshape(M, N), expected, rtol=2e-2, atol=2e-2)
