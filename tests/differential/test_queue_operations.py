"""Differential test of the queue operations: generated sequences of queue_alloca, queue_fill, queue_update (up to
96 KiB: staged), queue_copy, queue_execute, queue_read, queue_host_call and queue_dealloca, ordered by one timeline
semaphore, give on every device the bytes a numpy model gives: the buffers at the end, every queue_read's array,
and what each host call saw (the arrays of the reads before it in the chain are filled when it runs, and host
calls run in chain order).

A sequence is a list of tuples over "persistent" buffers 0..2 and the transients queue_alloca adds (numbered from
3 on, in order):
("alloca", bytes) - followed at once by a fill of the whole transient, whose contents are otherwise undefined;
("fill", buffer, offset, length, word); ("update", buffer, offset, length, seed); ("copy", source, offset, target,
offset, length); ("execute", a, b, out): a reusable command buffer adding the first 64 uint32 of a and b into out,
bound through a binding table; ("read", buffer, offset, length); ("call",); ("dealloca", buffer), after which the
buffer is not named again.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hal
from tests import kernels
from tests.conftest import open_device

DEVICES = ["host", pytest.param("vulkan", marks=pytest.mark.vulkan), pytest.param("cuda", marks=pytest.mark.cuda)]
SIZES = (4096, 98304, 1024)  # the persistent buffers; the second takes updates past 64 KiB
ELEMENTS = 64  # what "execute" adds: the first 256 bytes


@st.composite
def sequences(draw):
    """A sequence of queue operations (see the module docstring)."""
    sizes = list(SIZES)
    live = [0, 1, 2]
    ops = []

    def span(b):
        start = 16 * draw(st.integers(0, sizes[b] // 16 - 1))
        return start, 16 * draw(st.integers(1, (sizes[b] - start) // 16))

    for _ in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["alloca", "fill", "update", "copy", "execute", "read", "call", "dealloca"]))
        if kind == "alloca":
            nbytes = 16 * draw(st.integers(16, 512))
            ops.append(("alloca", nbytes))
            live.append(len(sizes))
            sizes.append(nbytes)
            ops.append(("fill", live[-1], 0, nbytes, draw(st.integers(0, 2**32 - 1))))
        elif kind == "fill":
            b = draw(st.sampled_from(live))
            ops.append(("fill", b, *span(b), draw(st.integers(0, 2**32 - 1))))
        elif kind == "update":
            b = draw(st.sampled_from(live))
            ops.append(("update", b, *span(b), draw(st.integers(0, 2**32 - 1))))
        elif kind == "copy":
            source, target = draw(st.sampled_from(live)), draw(st.sampled_from(live))
            offset, length = span(source)
            length = min(length, sizes[target])
            target_offset = 16 * draw(st.integers(0, (sizes[target] - length) // 16))
            if source == target and abs(offset - target_offset) < length:  # overlapping copies are refused
                continue
            ops.append(("copy", source, offset, target, target_offset, length))
        elif kind == "execute":
            ops.append(("execute", *[draw(st.sampled_from(live)) for _ in range(3)]))
        elif kind == "read":
            b = draw(st.sampled_from(live))
            ops.append(("read", b, *span(b)))
        elif kind == "call":
            ops.append(("call",))
        elif len(live) > 3:
            b = draw(st.sampled_from(live[3:]))
            live.remove(b)
            ops.append(("dealloca", b))
    for b in live[3:]:
        ops.append(("dealloca", b))
    return ops


def update_data(length: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, length, dtype=np.uint8).tobytes()


def initial(b: int) -> np.ndarray:
    return np.random.default_rng(100 + b).integers(0, 256, SIZES[b], dtype=np.uint8)


def run_model(ops: list) -> tuple[list[np.ndarray], list[np.ndarray], list[list[bytes]]]:
    """The persistent buffers' bytes at the end, each read's bytes, and per host call the reads it saw."""
    memory = [initial(b) for b in range(len(SIZES))]
    reads: list[np.ndarray] = []
    calls: list[list[bytes]] = []
    for op in ops:
        kind = op[0]
        if kind == "alloca":
            memory.append(np.zeros(op[1], np.uint8))
        elif kind == "fill":
            _, b, offset, length, word = op
            memory[b][offset:offset + length] = np.full(length // 4, word, np.uint32).view(np.uint8)
        elif kind == "update":
            _, b, offset, length, seed = op
            memory[b][offset:offset + length] = np.frombuffer(update_data(length, seed), np.uint8)
        elif kind == "copy":
            _, source, offset, target, target_offset, length = op
            memory[target][target_offset:target_offset + length] = memory[source][offset:offset + length].copy()
        elif kind == "execute":
            arrays = [memory[b][:4 * ELEMENTS].view(np.uint32).copy() for b in op[1:]]
            kernels.reference("add", (ELEMENTS,), arrays)
            memory[op[3]][:4 * ELEMENTS] = arrays[2].view(np.uint8)
        elif kind == "read":
            _, b, offset, length = op
            reads.append(memory[b][offset:offset + length].copy())
        elif kind == "call":
            calls.append([r.tobytes() for r in reads])
    return memory[:len(SIZES)], reads, calls


def run_device(dev: hal.Device, exe: hal.Executable, ops: list) -> tuple[list[np.ndarray], list[np.ndarray],
                                                                       list[list[bytes]]]:
    """The same on `dev`, every operation queued behind the one before it on one timeline, the caller never
    waiting until the end."""
    buffers = [dev.upload(initial(b)) for b in range(len(SIZES))]
    add = dev.create_command_buffer(mode="reusable", binding_capacity=3)
    with add:
        add.dispatch(exe, "add", (1, 1, 1), (ELEMENTS,), tuple(hal.slot(i, 0, 4 * ELEMENTS) for i in range(3)))
    timeline = dev.create_semaphore(0)
    reads: list[np.ndarray] = []
    calls: list[list[bytes]] = []
    for step, op in enumerate(ops):
        order = dict(wait=[(timeline, step)], signal=[(timeline, step + 1)])
        kind = op[0]
        if kind == "alloca":
            buffers.append(dev.queue_alloca(op[1], **order))
        elif kind == "fill":
            _, b, offset, length, word = op
            dev.queue_fill(hal.ref(buffers[b], offset, length), np.uint32(word), **order)
        elif kind == "update":
            _, b, offset, length, seed = op
            dev.queue_update(hal.ref(buffers[b], offset, length), update_data(length, seed), **order)
        elif kind == "copy":
            _, source, offset, target, target_offset, length = op
            dev.queue_copy(hal.ref(buffers[source], offset, length), hal.ref(buffers[target], target_offset, length),
                           **order)
        elif kind == "execute":
            dev.queue_execute(add, binding_table=tuple(buffers[b] for b in op[1:]), **order)
        elif kind == "read":
            _, b, offset, length = op
            out = np.zeros(length, np.uint8)
            reads.append(out)
            dev.queue_read(hal.ref(buffers[b], offset, length), out, **order)
        elif kind == "call":
            seen = list(reads)  # the arrays of the reads queued so far
            dev.queue_host_call(lambda seen=seen: calls.append([r.tobytes() for r in seen]), **order)
        else:
            dev.queue_dealloca(buffers[op[1]], **order)
    timeline.wait(len(ops), timeout=60)
    dev.synchronize()
    return [b.read(np.uint8) for b in buffers[:len(SIZES)]], reads, calls


@pytest.fixture(scope="module", params=DEVICES)
def device(request):
    dev = open_device(request.param)
    exe = dev.load_executable(kernels.SOURCE)
    yield dev, exe
    dev.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(ops=sequences())
def test_queue_operations_give_what_numpy_gives(device, ops):
    dev, exe = device
    expected, got = run_model(ops), run_device(dev, exe, ops)
    for want, have in zip(expected[0], got[0]):
        np.testing.assert_array_equal(have, want)
    assert len(got[1]) == len(expected[1])
    for want, have in zip(expected[1], got[1]):
        np.testing.assert_array_equal(have, want)
    assert got[2] == expected[2]


def test_a_long_sequence_with_every_operation(device):
    """One fixed sequence using each operation, a transient updated past 64 KiB and read back through a copy."""
    ops = [("alloca", 81920), ("fill", 3, 0, 81920, 7), ("update", 3, 16, 81888, 1), ("read", 3, 65520, 32),
           ("copy", 3, 0, 1, 4096, 81920), ("execute", 1, 0, 2), ("call",), ("update", 0, 0, 4096, 2),
           ("execute", 0, 2, 2), ("read", 2, 0, 1024), ("dealloca", 3), ("call",), ("read", 1, 0, 98304)]
    dev, exe = device
    expected, got = run_model(ops), run_device(dev, exe, ops)
    for want, have in zip(expected[0] + expected[1], got[0] + got[1]):
        np.testing.assert_array_equal(have, want)
    assert got[2] == expected[2] and len(got[2]) == 2
