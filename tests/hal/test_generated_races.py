"""Generated segments of fills and copies, some through slots and some reusing one reference object, checked
against every pair of commands: the recorder refuses exactly the commands that overlap an earlier command of
their segment where one of the two writes, forgets each refused command, and the binding table's check at submit
finds the first race its bound buffers make."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hal

SIZE = 64  # bytes per buffer
CAPACITY = 2  # binding slots

reference = st.tuples(st.sampled_from(["a", "b", "s0", "s1", "pool"]), st.integers(0, 15), st.integers(1, 4))
command = st.one_of(st.tuples(st.just("fill"), reference),
                    st.tuples(st.just("copy"), reference, st.sampled_from(["a", "b", "s0", "s1"]), st.integers(0, 15)),
                    st.tuples(st.just("barrier")))


def _ref(buffers, pool, spec):
    """(BufferRef, key, start, end) for `spec`; "pool" reuses one of a few reference objects (the detector settles
    a reference read again with one lookup)."""
    where, offset, words = spec
    if where == "pool":
        return pool[offset % len(pool)]
    start, end = 4 * offset, 4 * min(offset + words, SIZE // 4)
    if where.startswith("s"):
        slot = int(where[1])
        return hal.slot(slot, start, end - start), ("slot", slot), start, end
    return hal.ref(buffers[where], start, end - start), where, start, end


def _conflict(earlier, accesses):
    """Does one of `accesses` ((key, start, end, writes) each) overlap one of the `earlier` commands' accesses, one
    of the two writing?"""
    return any(key == k and s < e2 and s2 < e and (w or w2)
               for c in earlier for key, s, e, w in c for k, s2, e2, w2 in accesses)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(command, min_size=1, max_size=14))
def test_generated_segments_refuse_exactly_the_racing_commands(host, program):
    buffers = {"a": host.allocate(SIZE), "b": host.allocate(SIZE)}
    pool = [(hal.ref(buffers["a"], 0, 16), "a", 0, 16), (hal.ref(buffers["b"], 32, 8), "b", 32, 40),
            (hal.ref(buffers["a"], 0, SIZE), "a", 0, SIZE)]
    cb = host.create_command_buffer(binding_capacity=CAPACITY)
    cb.begin()
    segment: list[list[tuple]] = []  # the accepted commands of the current segment: their accesses
    for item in program:
        if item[0] == "barrier":
            cb.execution_barrier()
            segment = []
            continue
        if item[0] == "fill":
            target, key, start, end = _ref(buffers, pool, item[1])
            accesses = [(key, start, end, True)]
            record = functools.partial(cb.fill_buffer, target, np.uint32(1))
        else:
            source, skey, sstart, send = _ref(buffers, pool, item[1])
            tstart = 4 * item[3]
            tend = tstart + send - sstart
            if tend > SIZE:
                continue  # out of range: refused for another reason
            target, tkey, _, _ = _ref(buffers, pool, (item[2], item[3], (send - sstart) // 4))
            if skey == tkey and sstart < tend and tstart < send:
                continue  # a copy onto itself: refused for another reason
            accesses = [(skey, sstart, send, False), (tkey, tstart, tend, True)]
            record = functools.partial(cb.copy_buffer, source, target)
        if _conflict(segment, accesses):
            with pytest.raises(hal.ValidationError, match=r"^race: command \d+"):
                record()
        else:
            record()
            segment.append(accesses)
    cb.end()
    assert [c.index for c in cb.commands] == list(range(len(cb.commands)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["s0", "s1", "a"]), st.integers(0, 7), st.booleans()), min_size=2,
                max_size=6))
def test_generated_slot_races_are_found_at_submit(host, accesses):
    """Fills (writes) and copies out (reads) of 8-byte ranges of two slots and of a buffer, free of races as recorded;
    with both slots bound to that buffer at submit, the first command whose range then overlaps an earlier one's (one
    of them writing) is named."""
    a, spare = host.allocate(SIZE), host.allocate(SIZE)
    cb = host.create_command_buffer(binding_capacity=CAPACITY)
    cb.begin()
    as_recorded, at_submit = [], []  # per command: its accesses, keyed as recorded, and as bound at submit
    for i, (where, word, writes) in enumerate(accesses):
        start, end = 8 * word, 8 * word + 8
        ref = hal.slot(int(where[1]), start, 8) if where.startswith("s") else hal.ref(a, start, 8)
        out = [] if writes else [("spare", 8 * i, 8 * i + 8, True)]  # a read copies to a range of its own
        mine = [(where, start, end, writes)] + out
        if _conflict(as_recorded, mine):
            continue  # keep the recording itself free of races
        if writes:
            cb.fill_buffer(ref, np.uint32(2))
        else:
            cb.copy_buffer(ref, hal.ref(spare, 8 * i, 8))
        as_recorded.append(mine)
        at_submit.append([("a", start, end, writes)] + out)
    cb.end()
    first = next((i for i in range(len(at_submit)) if _conflict(at_submit[:i], at_submit[i])), None)
    if first is None:
        host.queue_execute(cb, binding_table=(a, a))
        host.synchronize()
        return
    with pytest.raises(hal.ValidationError, match=rf"race: command {first} \(.* of one buffer"):
        host.queue_execute(cb, binding_table=(a, a))
