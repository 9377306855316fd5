"""The transient planner (hal.transients): peaks against the optimum on generated programs, and the sharing rules
in hazards mode."""

from __future__ import annotations

import random

import numpy as np
import pytest

import hal

SEGMENTS, TRANSIENTS, PROGRAMS = 20, 30, 40


def record_program(cb, rng: random.Random) -> tuple[list, int]:
    """Transients each used in a random run of segments (a fill at its first and its last); returns their
    (first, last, size) and the optimum's lower bound: the most bytes live in one segment."""
    spans = []
    for _ in range(TRANSIENTS):
        first = rng.randrange(SEGMENTS)
        spans.append((first, min(SEGMENTS - 1, first + rng.randrange(6)), 256 * rng.randrange(1, 17)))
    refs = [cb.alloca(size) for _, _, size in spans]
    for segment in range(SEGMENTS):
        for ref, (first, last, _) in zip(refs, spans):
            if segment in (first, last):
                cb.fill_buffer(ref, np.uint32(segment))
        cb.execution_barrier()
    bound = max(sum(size for first, last, size in spans if first <= s <= last) for s in range(SEGMENTS))
    return spans, bound


@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_peak_within_ten_percent_of_the_optimum(seed):
    with hal.create_device("host") as dev:
        cb = dev.create_command_buffer(mode="reusable")
        with cb:
            spans, bound = record_program(cb, random.Random(seed))
        plan = cb.program.transients
        assert bound <= cb.transient_bytes <= 1.1 * bound, (cb.transient_bytes, bound)
        assert plan.total == sum(size for _, _, size in spans)
        for a, (fa, la, sa) in enumerate(spans):  # transients live in one segment never overlap
            for b, (fb, lb, sb) in enumerate(spans[:a]):
                if fa <= lb and fb <= la:
                    oa, ob = plan.offsets[a], plan.offsets[b]
                    assert oa + sa <= ob or ob + sb <= oa


def test_hazards_mode_shares_only_what_the_dag_orders():
    with hal.create_device("host") as dev:
        cb = dev.create_command_buffer(mode="reusable", dependencies="hazards")
        other = dev.allocate(64)
        with cb:
            first, second, unordered = cb.alloca(64), cb.alloca(64), cb.alloca(64)
            cb.fill_buffer(first, np.uint32(1))
            cb.execution_barrier()
            cb.copy_buffer(first, second)  # waits for the fill: first is dead after it
            cb.fill_buffer(other, np.uint32(2))
            cb.execution_barrier()
            cb.copy_buffer(second, other)
            cb.fill_buffer(unordered, np.uint32(3))  # orders with nothing before: may run at any time
        plan = cb.program.transients
        assert plan.offsets[1] != plan.offsets[0]  # live at once during the copy
        assert plan.offsets[2] not in (plan.offsets[0], plan.offsets[1])  # concurrent with both
        assert cb.transient_bytes == 3 * 64


def test_alignment_of_every_transient():
    with hal.create_device("host", capabilities={"storage_buffer_offset_alignment": 64}) as dev:
        cb = dev.create_command_buffer()
        with cb:
            refs = [cb.alloca(n) for n in (4, 100, 8)]
            for r in refs:
                cb.fill_buffer(r, np.uint8(1))
        assert all(offset % 64 == 0 for offset in cb.program.transients.offsets)
        assert cb.transient_bytes == 128 + 64 + 4  # largest first: 100 at 0, 8 at 128, 4 at 192


def test_a_failed_end_places_the_transients_anew(monkeypatch):
    from backends.host.command_buffer import HostEmitter

    with hal.create_device("host") as dev:
        source, target = dev.upload(np.arange(16, dtype=np.uint32)), dev.allocate(64)
        cb = dev.create_command_buffer(mode="reusable")
        cb.begin()
        first = cb.alloca(64)
        cb.copy_buffer(source, first)
        emit = HostEmitter.end
        monkeypatch.setattr(HostEmitter, "end", lambda self, program: (_ for _ in ()).throw(
            hal.UnsupportedError("emit failed")))
        with pytest.raises(hal.UnsupportedError, match="emit failed"):
            cb.end()
        monkeypatch.setattr(HostEmitter, "end", emit)
        second = cb.alloca(64)  # recorded after the failed end(): placed too
        cb.execution_barrier()
        cb.copy_buffer(first, second)
        cb.execution_barrier()
        cb.copy_buffer(second, target)
        cb.end()
        assert cb.transient_bytes == 128 and len(cb.program.transients.offsets) == 2
        dev.queue_execute(cb)
        np.testing.assert_array_equal(target.read(np.uint32), np.arange(16))


def test_the_live_bound_sums_the_transients_each_command_holds():
    from hal.transients import live_bound
    assert live_bound([4, 8, 16, 32], [(0, 1), (1, 2), (3, 3), (0, -1)]) == 16  # the unused one counts nothing
    assert live_bound([4, 8, 16], [(0, 1), (1, 2), (2, 3)]) == 24  # at command 2
    assert live_bound([4, 8], [(0, 1), (2, 3)]) == 8  # one ends before the other starts
