"""Differential test: generated programs give byte-identical results on every device, strategy and
dependency mode, with direct references or through a binding table, recorded flat or nested in another command
buffer (execute_commands), with copies direct or staged through transients (cb.alloca), and equal a plain
sequential numpy interpretation of the program.

The pieces are reusable by the backend test suites:
- `generate_program(draw)`: a hypothesis composite body (`programs = st.composite(generate_program)`);
- `run_program(device, program, strategy, dependencies, use_slots, nested=False, staged=False)`: final bytes of
  every buffer;
- `run_reference(program)`: the same, applying each command in recording order with numpy.
Add a device to `DEVICES` (a `tests.conftest.open_device` spec) to include it.

A program is a dict:
- "sizes": bytes per buffer; "seed": the initial contents (see `initial_bytes`);
- "slots": for binding-table entry i, the index of the buffer bound there (two entries may name the
  same buffer); with use_slots, a reference whose `via` is a slot index goes through hal.slot(), and every
  dispatch constant through a constant slot (hal.constant_slot), its value given at submit;
- "commands": tuples, with references R = (buffer, offset, length, via, open_end):
  ("fill", R, pattern bytes), ("update", R, data seed) (see `update_data`), ("copy", R_source, R_target),
  ("dispatch", export name, constants, (R, ...), indirect), ("barrier",); `indirect` None (cb.dispatch), or
  "static" / "dynamic": cb.dispatch_indirect, its counts in a buffer of hal's own (`indirect_counts`), static ones
  written before the submission, dynamic ones by an update_buffer the recording starts with (then a barrier);
  ("region", loop, iterations, (command, ...)): cb.while_nonzero (loop) or cb.if_nonzero around the commands, its
  flag (in a buffer of hal's own) set to `iterations`; a loop's body ends with a decrement of the flag.
  `open_end` (only with `via`) records hal.slot(via, offset) without a length: to the buffer's end,
  which the generator only sets when offset + length is the buffer size (updates: where the data fits).
Programs are race-free: a command that would overlap a command of its segment (one writing) gets an
execution barrier first, so every recording order the dependency graph allows gives the same bytes.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hal
from tests import kernels
from tests.conftest import open_device

DEVICES = ["host", pytest.param("vulkan", marks=pytest.mark.vulkan), pytest.param("cuda", marks=pytest.mark.cuda)]
STRATEGIES = ("deferred", "single_pass")
DEPENDENCIES = ("barriers", "hazards")
BINDING_ALIGN = 256  # dispatch binding offsets: the strictest storage_buffer_offset_alignment in practice
EXPORTS = {e.name: e for e in kernels.EXPORTS if e.name != "mark"}  # mark shows a grid, not arithmetic


# Generation.

def generate_program(draw):
    """Draw a race-free program over 3-4 uint32 buffers of 64-256 elements (see the module docstring)."""
    nbuf = draw(st.integers(3, 4), label="buffers")
    sizes = [4 * draw(st.integers(16, 64)) * 4 for _ in range(nbuf)]  # 64..256 uint32, multiples of 16 bytes
    seed = draw(st.integers(0, 2**32 - 1), label="seed")
    slots = draw(st.lists(st.integers(0, nbuf - 1), min_size=1, max_size=3), label="slots")
    slots_of = {b: [i for i, s in enumerate(slots) if s == b] for b in range(nbuf)}

    def via(b):
        return draw(st.sampled_from([None] + slots_of[b]))

    def ref(b, offset, length, open_end_ok=True):
        v = via(b)
        open_end = v is not None and open_end_ok and offset + length == sizes[b] and draw(st.booleans())
        return (b, offset, length, v, open_end)

    def range16(b, max_len=None):
        size = sizes[b]
        start = 16 * draw(st.integers(0, size // 16 - 1))
        room = (size - start) // 16
        if max_len is not None:
            room = min(room, max_len // 16)
        length = 16 * draw(st.integers(1, room))
        return start, length

    def binding(b):
        size = sizes[b]
        offset = BINDING_ALIGN * draw(st.integers(0, (size - 1) // BINDING_ALIGN))
        if draw(st.booleans()):
            length = size - offset
        else:
            length = BINDING_ALIGN * draw(st.integers(1, max(1, (size - offset) // BINDING_ALIGN)))
            length = min(length, size - offset)
        return offset, length

    def generate(target: list[tuple], length: int, regions: bool) -> None:
        """Append `length` commands to `target` (a region among them if `regions`), race-free."""
        open_accesses: list[tuple[int, int, int, bool]] = []  # (buffer, start, end, writes) of this segment

        def barrier():
            target.append(("barrier",))
            open_accesses.clear()

        for _ in range(length):
            kind = draw(st.sampled_from(["fill", "update", "copy", "dispatch", "dispatch", "barrier"]
                                        + (["region"] if regions else [])))
            if kind == "barrier":
                barrier()
                continue
            if kind == "region":
                loop = draw(st.booleans(), label="loop")
                iterations = draw(st.integers(0, 3 if loop else 1), label="iterations")
                inside: list[tuple] = []
                generate(inside, draw(st.integers(1, 4), label="body length"), False)
                if any(c[0] != "barrier" for c in inside):
                    target.append(("region", loop, iterations, tuple(inside)))
                    open_accesses.clear()  # a region sits between two barriers
                continue
            if kind == "fill":
                b = draw(st.integers(0, nbuf - 1))
                start, length = range16(b)
                width = draw(st.sampled_from([1, 2, 4]))
                pattern = draw(st.binary(min_size=width, max_size=width))
                cmd = ("fill", ref(b, start, length), pattern)
                accesses = [(b, start, start + length, True)]
            elif kind == "update":
                b = draw(st.integers(0, nbuf - 1))
                start, length = range16(b, max_len=512)
                cmd = ("update", ref(b, start, length), draw(st.integers(0, 2**32 - 1)))
                accesses = [(b, start, start + length, True)]
            elif kind == "copy":
                src, dst = draw(st.integers(0, nbuf - 1)), draw(st.integers(0, nbuf - 1))
                s, length = range16(src, max_len=sizes[dst])
                t = 16 * draw(st.integers(0, (sizes[dst] - length) // 16))
                if src == dst and s < t + length and t < s + length:
                    continue  # an overlapping copy within one buffer is invalid
                cmd = ("copy", ref(src, s, length, False), ref(dst, t, length, False))
                accesses = [(src, s, s + length, False), (dst, t, t + length, True)]
            else:
                name = draw(st.sampled_from(sorted(EXPORTS)))
                export = EXPORTS[name]
                refs = []
                for _i in range(export.bindings):
                    b = draw(st.integers(0, nbuf - 1))
                    refs.append((b, *binding(b)))
                writes = [i for i in range(export.bindings) if i not in export.readonly]
                # Inside one dispatch a written binding may alias another only exactly (element i reads and
                # writes the same address), never shifted: that would be a race inside the kernel on a GPU.
                if any(i != j and refs[i][0] == refs[j][0] and refs[i][1] != refs[j][1]
                       and refs[i][1] < refs[j][1] + refs[j][2] and refs[j][1] < refs[i][1] + refs[i][2]
                       for i in writes for j in range(export.bindings)):
                    continue
                n = draw(st.integers(1, min(r[2] for r in refs) // 4))
                constants = (n,) if name == "add" else (n, draw(st.integers(0, 2**32 - 1)))
                # Inside a region (where no region is drawn) counts must be dynamic.
                modes = [None, None, "static", "dynamic"] if regions else [None, "dynamic"]
                indirect = draw(st.sampled_from(modes), label="indirect")
                cmd = ("dispatch", name, constants, tuple(ref(*r) for r in refs), indirect)
                accesses = [(r[0], r[1], r[1] + r[2], i not in export.readonly) for i, r in enumerate(refs)]
            if any(b == b2 and s < e2 and s2 < e and (w or w2)
                   for b, s, e, w in accesses for b2, s2, e2, w2 in open_accesses):
                barrier()
            target.append(cmd)
            open_accesses.extend(accesses)
            if draw(st.integers(0, 6)) == 0:
                barrier()

    commands: list[tuple] = []
    generate(commands, draw(st.integers(1, 30), label="length"), True)
    return {"sizes": sizes, "seed": seed, "slots": slots, "commands": commands}


programs = st.composite(generate_program)


# Running.

def initial_bytes(program):
    """The initial contents of every buffer: random uint32s from the program's seed."""
    rng = np.random.default_rng(program["seed"])
    return [rng.integers(0, 2**32, size // 4, dtype=np.uint32).view(np.uint8) for size in program["sizes"]]


def update_data(command):
    """The bytes an update command writes: as many as its target range holds, from its seed."""
    _, (_b, _offset, length, _via, _open_end), seed = command
    return np.random.default_rng(seed).integers(0, 256, length, dtype=np.uint8)


def _hal_ref(r, buffers, use_slots):
    b, offset, length, via, open_end = r
    if use_slots and via is not None:
        return hal.slot(via, offset) if open_end else hal.slot(via, offset, length)
    return hal.ref(buffers[b], offset, length)


def all_commands(commands):
    """The commands in recording order, those inside regions too (each region before its body)."""
    for c in commands:
        yield c
        if c[0] == "region":
            yield from all_commands(c[3])


def constant_count(program):
    """The dispatch constants of `program`: with use_slots, one constant slot each."""
    return sum(len(c[2]) for c in all_commands(program["commands"]) if c[0] == "dispatch")


def indirect_counts(program, mode):
    """The workgroup counts of the program's `mode` ("static" or "dynamic") indirect dispatches, 16 bytes each."""
    counts = [(*kernels.groups(c[2][0]), 0) for c in all_commands(program["commands"])
              if c[0] == "dispatch" and c[4] == mode]
    return np.array(counts or [(0, 0, 0, 0)], np.uint32)


def region_flags(program):
    """Each region's flag (its iterations), one per 256 bytes (an offset every storage alignment allows)."""
    iterations = [c[2] for c in all_commands(program["commands"]) if c[0] == "region"]
    flags = np.zeros(64 * max(1, len(iterations)), np.uint32)
    flags[::64][:len(iterations)] = iterations
    return flags


class Recorder:
    """Records a program's commands into a begun command buffer (regions and their bodies too), numbering the
    constant slots, indirect counts and region flags as it goes, in recording order."""

    def __init__(self, cb, exe, buffers, use_slots, extra, staged=False):
        self.cb, self.exe, self.buffers, self.use_slots, self.extra = cb, exe, buffers, use_slots, extra
        self.staged = staged  # copies go through a transient (cb.alloca) and a barrier
        self.values = []
        self.placed = {"static": 0, "dynamic": 0}
        self.regions = 0

    def record(self, commands):
        cb, buffers, use_slots = self.cb, self.buffers, self.use_slots
        for c in commands:
            kind = c[0]
            if kind == "barrier":
                cb.execution_barrier()
            elif kind == "fill":
                cb.fill_buffer(_hal_ref(c[1], buffers, use_slots), c[2])
            elif kind == "update":
                cb.update_buffer(_hal_ref(c[1], buffers, use_slots), update_data(c))
            elif kind == "copy" and self.staged:  # the programs are race-free: a barrier only adds order
                transient = cb.alloca(c[1][2])
                cb.copy_buffer(_hal_ref(c[1], buffers, use_slots), transient)
                cb.execution_barrier()
                cb.copy_buffer(transient, _hal_ref(c[2], buffers, use_slots))
            elif kind == "copy":
                cb.copy_buffer(_hal_ref(c[1], buffers, use_slots), _hal_ref(c[2], buffers, use_slots))
            elif kind == "region":
                _, loop, _iterations, body = c
                flag = hal.ref(self.extra["flags"], 256 * self.regions, 4)
                self.regions += 1
                with cb.while_nonzero(flag) if loop else cb.if_nonzero(flag):
                    self.record(body)
                    if loop:  # the flag counts the iterations down
                        cb.execution_barrier()
                        cb.dispatch(self.exe, "add", (1, 1, 1), (1,), (flag, self.extra["minus_one"], flag))
            else:
                self.dispatch(*c[1:])

    def dispatch(self, name, constants, refs, indirect):
        n = constants[0]
        if self.use_slots:
            self.values.extend(constants)
            constants = tuple(hal.constant_slot(len(self.values) - len(constants) + i) for i in range(len(constants)))
        bindings = tuple(_hal_ref(r, self.buffers, self.use_slots) for r in refs)
        if indirect is None:
            self.cb.dispatch(self.exe, name, workgroups=kernels.groups(n), constants=constants, bindings=bindings)
            return
        parameters = hal.ref(self.extra[indirect], 16 * self.placed[indirect], 12)
        self.placed[indirect] += 1
        self.cb.dispatch_indirect(self.exe, name, parameters, constants=constants, bindings=bindings,
                                  dynamic=indirect == "dynamic")


def record_program(cb, exe, program, buffers, use_slots, extra, staged=False):
    """Record `program`'s commands into the begun command buffer `cb`; returns the values of the constant slots
    (with use_slots), in slot order. `extra`: hal's own buffers: "static" and "dynamic" hold the indirect
    dispatches' counts (the dynamic ones are written first, then a barrier), "flags" the regions' flags, and
    "minus_one" what a loop adds to its flag. `staged`: each copy goes through a transient of cb."""
    if any(c[0] == "dispatch" and c[4] == "dynamic" for c in all_commands(program["commands"])):
        cb.update_buffer(extra["dynamic"], indirect_counts(program, "dynamic"))
        cb.execution_barrier()
    recorder = Recorder(cb, exe, buffers, use_slots, extra, staged)
    recorder.record(program["commands"])
    return tuple(recorder.values)


def run_program(device, program, strategy, dependencies, use_slots, nested=False, staged=False):
    """Run `program` on `device`; returns the final bytes of every buffer (uint8 arrays). `nested`: recorded into
    a reusable command buffer that another executes (execute_commands), its slots forwarded to the outer's.
    `staged`: every copy goes through a transient (cb.alloca), whose memory the planner may share."""
    exe = device.load_executable(kernels.SOURCE)
    buffers = [device.upload(data) for data in initial_bytes(program)]
    extra = {"static": device.upload(indirect_counts(program, "static")),
             "dynamic": device.upload(np.zeros_like(indirect_counts(program, "dynamic"))),  # written by the program
             "flags": device.upload(region_flags(program)),
             "minus_one": device.upload(np.array([2**32 - 1], np.uint32))}
    capacities = dict(binding_capacity=len(program["slots"]) if use_slots else 0, strategy=strategy,
                      dependencies=dependencies, constant_capacity=constant_count(program) if use_slots else 0)
    try:
        cb = device.create_command_buffer(mode="reusable" if nested else "one_shot", **capacities)
        cb.begin()
        values = record_program(cb, exe, program, buffers, use_slots, extra, staged)
        cb.end()
        if nested:
            inner, cb = cb, device.create_command_buffer(mode="one_shot", **capacities)
            with cb:
                cb.execute_commands(inner, tuple(hal.slot(i) for i in range(capacities["binding_capacity"])))
        table = tuple(buffers[b] for b in program["slots"]) if use_slots else ()
        device.queue_execute(cb, binding_table=table, constants=values)
        device.synchronize()
        return [b.read() for b in buffers]
    finally:
        for b in [*buffers, *extra.values()]:
            b.release()


def run_reference(program):
    """The sequential meaning of `program`: each command in recording order, with numpy."""
    mem = initial_bytes(program)

    def view(r):
        b, offset, length, _via, _open_end = r
        return mem[b][offset:offset + length]

    def apply(commands):
        for c in commands:
            if c[0] == "region":
                _, loop, iterations, body = c
                for _ in range(iterations if loop else min(iterations, 1)):
                    apply(body)
            else:
                apply_one(c)

    def apply_one(c):
        kind = c[0]
        if kind == "fill":
            target, pattern = view(c[1]), c[2]
            target[:] = np.tile(np.frombuffer(pattern, np.uint8), len(target) // len(pattern))
        elif kind == "update":
            view(c[1])[:] = update_data(c)
        elif kind == "copy":
            view(c[2])[:] = view(c[1]).copy()
        elif kind == "dispatch":
            _, name, constants, refs, _indirect = c
            kernels.reference(name, constants, [view(r).view(np.uint32) for r in refs])

    apply(program["commands"])
    return mem


# The test.

@pytest.fixture(scope="module", params=DEVICES)
def device(request):
    dev = open_device(request.param)
    yield dev
    dev.close()


COMBINATIONS = [(s, d, slots) for slots in (False, True) for s, d in itertools.product(STRATEGIES, DEPENDENCIES)]
COMBINATIONS += [("deferred", "barriers", True, True), ("single_pass", "hazards", False, True)]  # nested
COMBINATIONS += [("deferred", "barriers", True, False, True), ("deferred", "hazards", False, True, True)]  # staged


def check_program(device, program):
    expected = run_reference(program)
    results = {combo: run_program(device, program, *combo) for combo in COMBINATIONS}
    first = COMBINATIONS[0]
    for combo, got in results.items():
        for i, (a, b) in enumerate(zip(got, results[first])):
            assert np.array_equal(a, b), (
                f"buffer {i}: {combo} (strategy, dependencies, use_slots[, nested, staged]) differs from {first}")
    for combo, got in results.items():
        for i, (a, b) in enumerate(zip(got, expected)):
            bad = np.flatnonzero(a != b)
            assert not bad.size, (f"buffer {i}: {combo} (strategy, dependencies, use_slots[, nested, staged]) differs "
                                  f"from the sequential reference at bytes {bad[:8].tolist()}")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs())
def test_generated_programs(device, program):
    check_program(device, program)


def test_reference_interpreter():
    """The oracle itself, on a hand-checked program."""
    program = {"sizes": [256, 256, 256], "seed": 5, "slots": [1], "commands": [
        ("fill", (1, 0, 16, None, False), b"\x01\x02"),
        ("update", (1, 16, 16, None, False), 77),
        ("barrier",),
        ("dispatch", "add", (8,), ((0, 0, 256, None, False), (1, 0, 256, None, False),
                                   (2, 0, 256, None, False)), None),
        ("barrier",),
        ("dispatch", "scale", (2, 3), ((2, 0, 256, None, False),), "static"),
        ("copy", (0, 32, 16, None, False), (1, 240, 16, None, False)),
        ("barrier",),
        ("dispatch", "xor_copy", (4, 1), ((2, 0, 256, None, False), (0, 0, 256, None, False)), "dynamic"),
        ("region", True, 3, (("dispatch", "scale", (1, 5), ((1, 0, 256, None, False),), None),)),
        ("region", False, 0, (("fill", (1, 0, 16, None, False), b"\xff"),)),
    ]}
    mem = run_reference(program)
    with hal.create_device("host") as host:
        assert all(np.array_equal(a, b) for a, b in zip(run_program(host, program, "deferred", "barriers", False), mem))
        assert all(np.array_equal(a, b) for a, b in zip(run_program(host, program, "deferred", "hazards", True,
                                                                    staged=True), mem))
    a, b, c = (m.view(np.uint32).copy() for m in initial_bytes(program))
    assert len(set(map(bytes, (a, b, c)))) == 3
    np.testing.assert_array_equal(update_data(program["commands"][1]), update_data(program["commands"][1]))
    b[:4] = 0x02010201
    b[4:8] = update_data(program["commands"][1]).view(np.uint32)
    c[:8] = a[:8] + b[:8]
    c[:2] *= 3
    b[60:64] = a[8:12]
    a[:4] = c[:4] ^ 1
    b[:1] *= np.uint32(125)  # the loop, three times; the if with a zero flag runs nothing
    np.testing.assert_array_equal(mem[0].view(np.uint32), a)
    np.testing.assert_array_equal(mem[1].view(np.uint32), b)
    np.testing.assert_array_equal(mem[2].view(np.uint32), c)


def _slot_write_hides_writer_program():
    """Segment 0 fills buffer 0; segment 1 fills buffer 1 (through slot 0) and then buffer 0 again:
    the last fill must still run after the first one (WAW across a barrier)."""
    return {"sizes": [64, 64, 64], "seed": 0, "slots": [1], "commands": [
        ("fill", (0, 0, 64, None, False), b"\x01"),
        ("barrier",),
        ("fill", (1, 0, 64, 0, False), b"\x02"),
        ("fill", (0, 0, 64, None, False), b"\x03"),
    ]}


def test_slot_write_does_not_hide_earlier_writer(device):
    check_program(device, _slot_write_hides_writer_program())
