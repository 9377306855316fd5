"""The CUDA word stream's encoder, without a GPU: the words each command gives (graph.c reads them)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hal
from hal.buffer import Buffer, BufferRef
from hal.commands import Dispatch, Fill
from tests import kernels
from tests.conftest import backend_or_skip

backend_or_skip("cuda")  # cuda-python is needed, a GPU is not

from backends.cuda_graph import stream as words
from backends.cuda_graph.command_buffer import CudaCommandBuffer, lane_width

EXPORT = hal.Export("k", bindings=2, constants=2, workgroup_size=(32, 2, 1))


def kernel(function: int) -> SimpleNamespace:
    """What the encoder reads of a CUDA executable: its function handles, by export ordinal."""
    return SimpleNamespace(functions=(function,))


def direct(address: int, offset: int = 0) -> BufferRef:
    """A reference to a stand-in buffer (the encoder reads its device address and size)."""
    return BufferRef(SimpleNamespace(address=address, size=1 << 20), -1, offset, 256)


def dispatch(index: int, executable, workgroups, constants, bindings) -> Dispatch:
    return Dispatch(index, 0, executable, EXPORT, 0, workgroups, constants, bindings)


def test_kernel_words_follow_each_dispatch_when_its_objects_change():
    """Reused words for the same kernel, workgroups and constants objects; new ones when any differs,
    also for an export shared by two executables."""
    a, b = kernel(0xA000), kernel(0xB000)
    wg, constants = (4, 1, 1), (7, -1)
    refs = (direct(0x1000), direct(0x2000, 64))
    stream: list[int] = []
    encoder = words.Words((), {})
    for i, (exe, w, k) in enumerate([(a, wg, constants), (a, wg, constants), (b, wg, constants),
                                      (b, (8, 1, 1), constants), (b, (8, 1, 1), (1, 2.0))]):
        encoder.emit(dispatch(i, exe, w, k, refs), i, stream)
    head = [words.OP_KERNEL]
    expected = []
    for slot, (function, w, k) in enumerate([(0xA000, wg, [7, 0xFFFFFFFF]), (0xA000, wg, [7, 0xFFFFFFFF]),
                                             (0xB000, wg, [7, 0xFFFFFFFF]), (0xB000, (8, 1, 1), [7, 0xFFFFFFFF]),
                                             (0xB000, (8, 1, 1), [1, 0x40000000])]):
        expected += head + [slot, function, *w, 32, 2, 1, 4, 0x1000, 0x2040, *k]
    assert stream == expected


def test_a_slot_reference_reads_the_binding_table():
    table = (SimpleNamespace(address=0x9000, size=512),)
    slot_ref = BufferRef(None, 0, 16, None)
    encoder = words.Words(table, {})
    got = encoder.command(dispatch(0, kernel(0xA000), (1, 1, 1), (0, 0), (slot_ref, direct(0x1000))), 3)
    assert got[words.FIRST_PARAMETER:words.FIRST_PARAMETER + 2] == [0x9010, 0x1000]
    fill = encoder.command(Fill(1, 0, slot_ref, b"\x01\x02"), 4)
    assert fill == [words.OP_MEMSET, 4, 0x9010, 0x0201, 2, (512 - 16) // 2]



@pytest.fixture(scope="module")
def host():
    """Recordings are made on the host device; their buffers get a device address, as the encoder reads."""
    with pytest.MonkeyPatch.context() as patch, hal.create_device("host") as dev:
        patch.setattr(Buffer, "address", 0x7F0000000000, raising=False)
        yield dev


@given(sizes=st.lists(st.integers(0, 12), min_size=1, max_size=8), lanes=st.integers(1, 5),
       fills=st.sets(st.integers(0, 60)))
@settings(max_examples=60, deadline=None)
def test_barriers_mode_builds_from_the_segments_what_the_groups_give(host, sizes, lanes, fills):
    """Deferred barriers mode encodes straight from the segments, skipping the tracker's groups; the
    words (nodes, edges, join nodes) are the ones the general encoder gives from the groups, for any
    segment sizes (empty ones too: two barriers in a row) and lane limit."""
    exe = host.load_executable(kernels.SOURCE)
    out = host.allocate(256 * sum(sizes) + 4)
    cb = host.create_command_buffer(mode="reusable", validate=False)
    with cb:
        k = 0
        for size in sizes:
            for _ in range(size):
                target = hal.ref(out, 256 * k, 256)
                if k in fills:
                    cb.fill_buffer(target, b"\x07")
                else:
                    cb.dispatch(exe, "scale", (1, 1, 1), (64, 3), (target,))
                k += 1
            cb.execution_barrier()
    stand_in = SimpleNamespace(functions=(0xA000, 0xA001, 0xA002))  # a CUDA executable's function handles
    for c in cb.commands:
        if type(c) is Dispatch:
            c.executable = stand_in
    cb.dependency_graph()  # the tracker's groups, for the general encoder

    def encoder() -> CudaCommandBuffer:
        e = object.__new__(CudaCommandBuffer)
        e._head, e._commands, e._tracker, e._staging, e._lanes = cb._head, cb.commands, cb._tracker, {}, lanes
        e._forget_nodes()
        return e

    general, from_segments = encoder(), encoder()
    assert from_segments._encode_segments(()) == general._encode(cb.commands, ())
    assert from_segments._slot_of == general._slot_of
    assert len(from_segments._nodes) == len(general._nodes) == len(cb.commands) + len(general._joins)


def test_a_wide_segment_takes_the_fewest_lanes_of_the_same_depth():
    assert [lane_width(size, 64) for size in (1, 64, 65, 98, 128, 129, 998)] == [1, 64, 33, 49, 64, 43, 63]
    assert lane_width(998, 0) == 998  # 0: no limit
