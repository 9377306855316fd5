"""The call stream (backends.vulkan.call_stream): a single_pass command buffer's vkCmd* calls are made by the device's
worker thread while recording goes on. What runs must be what was recorded, in order, over many chunks, with
recordings interleaved or made from several Python threads at once, and whatever happens to a recording or its
device before end()."""

from __future__ import annotations

import gc
import random
import threading

import numpy as np
import pytest

import hal
from tests import kernels
from tests.conftest import backend_or_skip
from tests.kernels import groups

backend_or_skip("vulkan")

pytestmark = pytest.mark.vulkan

WORDS = 16384  # 64 KiB buffers: an update_buffer of all of one is more than a chunk's data


class Program:
    """A random program over `buffers` with a barrier after every command, and its result computed with numpy."""

    def __init__(self, seed: int, commands: int, buffers: int = 3) -> None:
        rng = random.Random(seed)
        self.steps = []
        for _ in range(commands):
            kind = rng.choice(("fill", "update", "copy", "scale", "xor_copy", "add"))
            a, b, c = (rng.randrange(buffers) for _ in range(3))
            k = rng.randrange(1 << 32)
            n = rng.choice((1, 64, 1000, WORDS))
            data = np.random.default_rng(rng.randrange(1 << 32)).integers(0, 1 << 32, n, np.uint32)
            self.steps.append((kind, a, b, c, k, n, data))

    def record(self, cb: hal.CommandBuffer, exe: hal.Executable, bufs: list[hal.Buffer]) -> None:
        for kind, a, b, c, k, n, data in self.steps:
            self.record_step(cb, exe, bufs, kind, a, b, c, k, n, data)

    @staticmethod
    def record_step(cb, exe, bufs, kind, a, b, c, k, n, data) -> None:
        # An int constant leaves the record its arguments as C data; a numpy one is resolved as it is encoded: both
        # kinds of dispatch set state on one account (backends.vulkan.calls.encode_dispatch).
        k = np.uint32(k) if k % 2 else k
        if kind == "fill":
            cb.fill_buffer(hal.ref(bufs[a], 0, 4 * n), np.uint32(k))
        elif kind == "update":
            cb.update_buffer(bufs[a], data)
        elif kind == "copy" and a != b:
            cb.copy_buffer(hal.ref(bufs[a], 0, 4 * n), hal.ref(bufs[b], 0, 4 * n))
        elif kind == "scale":
            cb.dispatch(exe, "scale", groups(n), (n, k), (bufs[a],))
        elif kind == "xor_copy" and a != b:
            cb.dispatch(exe, "xor_copy", groups(n), (n, k), (bufs[a], bufs[b]))
        elif kind == "add" and c not in (a, b):
            cb.dispatch(exe, "add", groups(n), (n,), (bufs[a], bufs[b], bufs[c]))
        cb.execution_barrier()

    def expected(self, start: list[np.ndarray]) -> list[np.ndarray]:
        x = [s.copy() for s in start]
        for kind, a, b, c, k, n, data in self.steps:
            if kind == "fill":
                x[a][:n] = k
            elif kind == "update":
                x[a][:len(data)] = data
            elif kind == "copy" and a != b:
                x[b][:n] = x[a][:n]
            elif kind == "scale":
                x[a][:n] *= np.uint32(k)
            elif kind == "xor_copy" and a != b:
                x[b][:n] = x[a][:n] ^ np.uint32(k)
            elif kind == "add" and c not in (a, b):
                x[c][:n] = x[a][:n] + x[b][:n]
        return x


def buffers(dev: hal.Device, count: int, seed: int) -> tuple[list[hal.Buffer], list[np.ndarray]]:
    start = [np.random.default_rng(seed + i).integers(0, 1 << 32, WORDS, np.uint32) for i in range(count)]
    return [dev.upload(s) for s in start], start


def run(dev: hal.Device, exe: hal.Executable, program: Program, bufs: list[hal.Buffer],
        strategy: str = "single_pass") -> None:
    """Record `program` into a new command buffer, submit it and wait."""
    cb = dev.create_command_buffer(strategy=strategy)
    with cb:
        program.record(cb, exe, bufs)
    dev.queue_execute(cb)
    dev.synchronize()


def check(bufs: list[hal.Buffer], expected: list[np.ndarray]) -> None:
    for buf, want in zip(bufs, expected):
        np.testing.assert_array_equal(buf.read(np.uint32), want)


@pytest.mark.parametrize("strategy", ["deferred", "single_pass"])
def test_a_long_program_runs_as_recorded(vk, strategy):
    """About 900 calls: many chunks, several updates larger than a chunk's data, every kind of call."""
    exe = vk.load_executable(kernels.SOURCE)
    program = Program(seed=1, commands=300)
    bufs, start = buffers(vk, 3, seed=10)
    run(vk, exe, program, bufs, strategy)
    check(bufs, program.expected(start))


def test_recordings_interleaved_on_one_device_each_get_their_own_calls(vk):
    exe = vk.load_executable(kernels.SOURCE)
    programs = [Program(seed=2, commands=150), Program(seed=3, commands=150)]
    made = [buffers(vk, 3, seed=20), buffers(vk, 3, seed=30)]
    cbs = [vk.create_command_buffer(strategy="single_pass") for _ in programs]
    for cb in cbs:
        cb.begin()
    for i in range(150):  # command i of one, then of the other
        for program, cb, (bufs, _) in zip(programs, cbs, made):
            Program.record_step(cb, exe, bufs, *program.steps[i])
    for cb in cbs:
        cb.end()
        vk.queue_execute(cb)
    vk.synchronize()
    for program, (bufs, start) in zip(programs, made):
        check(bufs, program.expected(start))


def test_python_threads_recording_at_once(vk):
    exe = vk.load_executable(kernels.SOURCE)
    threads = 4
    programs = [Program(seed=40 + t, commands=120) for t in range(threads)]
    made = [buffers(vk, 3, seed=400 + 10 * t) for t in range(threads)]
    cbs = [vk.create_command_buffer(strategy="single_pass") for _ in range(threads)]
    errors = []
    together = threading.Barrier(threads)

    def record(t: int) -> None:
        try:
            together.wait()
            with cbs[t]:
                programs[t].record(cbs[t], exe, made[t][0])
        except BaseException as e:  # reported below
            errors.append(e)

    workers = [threading.Thread(target=record, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not errors
    for cb in cbs:
        vk.queue_execute(cb)
    vk.synchronize()
    for program, (bufs, start) in zip(programs, made):
        check(bufs, program.expected(start))


@pytest.mark.parametrize("let_go", ["reset", "drop"])
def test_a_long_recording_let_go_midway_leaves_the_next_one_correct(fresh, let_go):
    """Its calls may still wait in the stream when its pool goes back: the next recording takes that pool only after
    the worker made them."""
    dev = fresh()
    exe = dev.load_executable(kernels.SOURCE)
    bufs, start = buffers(dev, 3, seed=50)
    cb = dev.create_command_buffer(strategy="single_pass")
    cb.begin()
    Program(seed=5, commands=200).record(cb, exe, bufs)
    if let_go == "reset":
        cb.reset()
    else:
        del cb
        gc.collect()
    program = Program(seed=6, commands=100)
    run(dev, exe, program, bufs)
    check(bufs, program.expected(start))


def test_a_recording_open_when_its_device_closes_fails_cleanly(fresh):
    dev = fresh()
    exe = dev.load_executable(kernels.SOURCE)
    bufs, _ = buffers(dev, 3, seed=60)
    cb = dev.create_command_buffer(strategy="single_pass")
    cb.begin()
    Program(seed=7, commands=100).record(cb, exe, bufs)
    dev.close()  # the worker stops; the calls still coming are dropped
    with pytest.raises(hal.ValidationError, match="closed"):
        Program(seed=8, commands=100).record(cb, exe, bufs)
        cb.end()
    cb.reset()


def test_a_buffer_released_while_its_calls_wait_in_the_stream_is_destroyed_after_them(fresh):
    """The lifetime settles the stream before it destroys anything (under the validation layer, a call made with a
    destroyed VkBuffer fails)."""
    dev = fresh()
    exe = dev.load_executable(kernels.SOURCE)
    bufs, start = buffers(dev, 3, seed=70)
    cb = dev.create_command_buffer(strategy="single_pass")
    cb.begin()
    Program(seed=9, commands=200).record(cb, exe, bufs)
    bufs[0].release()
    dev.synchronize()  # a safe point: the lifetime destroys the buffer
    assert not dev.lifetime.pending
    with pytest.raises(hal.ValidationError, match="released"):
        cb.end()
    cb.reset()
    program = Program(seed=10, commands=50, buffers=2)
    run(dev, exe, program, bufs[1:])
    check(bufs[1:], program.expected(start[1:]))
