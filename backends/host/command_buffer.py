"""Host command buffers: run the Program's commands with numpy.

At end() the DAG is ordered once (Program.topological_order): among the commands ready to run, always
the one recorded last. So the host runs commands out of recording order wherever the DAG allows, and a
missing dependency shows up as a wrong result in the tests rather than hiding behind program order.
A dispatch_indirect reads its workgroup counts when the submission starts (static) or when it runs (dynamic);
a zero count runs nothing, a count above the device's max_workgroup_count fails the submission. A region runs its
body's commands (in the body's own order) while, or if, its condition is non-zero, read before each iteration.
A collective meets the other ranks through its communicator (backends.host.communicator); a call runs its function
with numpy views of its bindings (hal.calls).
"""

from __future__ import annotations

import numpy as np

from backends.host.executable import DispatchContext
from hal.buffer import Buffer, BufferRef, ConstantSlot
from hal.commands import Call, Collective, Command, Copy, Dispatch, Fill, Region, Update
from hal.errors import DeviceError, DeviceLostError
from hal.program import Emitter, Program

_PATTERN_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32}


class HostEmitter(Emitter):
    """The host's side of a command buffer (hal.program.Emitter): the order its commands run in."""

    lanes = 0  # the host runs commands one at a time: no graph to lay out in lanes
    graph_layout = False

    def __init__(self) -> None:
        self.order: list[Command] = []
        self.static: list[Dispatch] = []  # the dispatch_indirect commands whose counts are read at the start
        self.bodies: dict[Region, list[Command]] = {}  # per region (nested ones too), its body's order

    def begin(self, program: Program) -> None:
        pass

    def end(self, program: Program) -> None:
        self.order = program.topological_order()
        self.static, self.bodies = [], {}
        if program.indirect or program.regions:
            self.plan(program)

    def plan(self, program: Program) -> None:
        """Note the static dispatch_indirect commands and the regions' orders of `program` and its regions."""
        self.static += [program.commands[i] for i in program.static_indirect]
        for i in program.regions:
            region = program.commands[i]
            self.bodies[region] = region.body.topological_order()
            self.plan(region.body)

    def reset(self) -> None:
        self.order, self.static, self.bodies = [], [], {}


def execute(order: list[Command], static: list[Dispatch], bodies: dict, limit: tuple[int, int, int],
            table: tuple[Buffer, ...], constants: tuple) -> None:
    """Run commands in `order` (a submission keeps its own order, so reset() cannot pull it away), with the
    submission's binding `table` and constant slot values `constants`; `static`: the dispatch_indirect commands
    whose counts are read first, `bodies`: each region's order, `limit`: the device's max_workgroup_count."""
    counts = {c: _counts(c, table) for c in static}
    _run(order, counts, bodies, limit, table, constants)


def _run(order: list[Command], counts: dict, bodies: dict, limit: tuple[int, int, int], table: tuple[Buffer, ...],
         constants: tuple) -> None:
    for c in order:
        if type(c) is Region:
            while _view(c.condition, table).view(np.uint32)[0]:
                _run(bodies[c], counts, bodies, limit, table, constants)
                if not c.loop:
                    break
            continue
        try:
            if type(c) is Dispatch:
                workgroups = c.workgroups
                if c.parameters is not None:
                    workgroups = _grid(c, counts[c] if not c.dynamic else _counts(c, table), limit)
                    if workgroups is None:
                        continue
                _dispatch(c, workgroups, table, constants)
            elif type(c) is Call:
                _call(c, table, constants)
            else:
                _RUN[type(c)](c, table)
        except DeviceError:
            raise
        except Exception as e:
            name = f" {c.export.name}" if isinstance(c, Dispatch) else ""
            raise DeviceError(f"host: command {c.index} ({c.kind}{name}) failed: {type(e).__name__}: {e}") from e


def _view(r: BufferRef, table: tuple[Buffer, ...]) -> np.ndarray:
    b = r.buffer if r.buffer is not None else table[r.slot]
    return b.data[r.offset:r.offset + r.nbytes if r.bounded else b.size]


def _fill(c: Fill, table: tuple[Buffer, ...]) -> None:
    dt = _PATTERN_TYPES[len(c.pattern)]
    _view(c.target, table).view(dt)[:] = np.frombuffer(c.pattern, dt)[0]


def _update(c: Update, table: tuple[Buffer, ...]) -> None:
    _view(c.target, table)[:] = np.frombuffer(c.data, np.uint8)


def _copy(c: Copy, table: tuple[Buffer, ...]) -> None:
    _view(c.target, table)[:] = _view(c.source, table)


def _counts(c: Dispatch, table: tuple[Buffer, ...]) -> tuple[int, ...]:
    """A dispatch_indirect's workgroup counts as they are now."""
    return tuple(int(n) for n in _view(c.parameters, table).view(np.uint32))


def _grid(c: Dispatch, counts: tuple[int, ...], limit: tuple[int, int, int]) -> tuple[int, ...] | None:
    """The grid a dispatch_indirect runs: its counts, or None when one is zero (it runs nothing); counts above
    the limit fail it (and so the submission), as a GPU backend's guard fails the work."""
    if any(n > most for n, most in zip(counts, limit)):
        raise DeviceError(f"host: command {c.index} (dispatch_indirect {c.export.name}): workgroup counts {counts} "
                          f"exceed the device's max_workgroup_count {limit}; it ran nothing")
    return counts if all(counts) else None


def _dispatch(c: Dispatch, workgroups: tuple, table: tuple[Buffer, ...], slot_values: tuple) -> None:
    views = [_view(r, table) for r in c.bindings]
    export = c.export
    given = (slot_values[v.index] if type(v) is ConstantSlot else v for v in c.constants)
    constants = tuple(np.float32(v) if type(v) is float else v for v in given)  # what a GPU sees
    c.executable.functions[c.ordinal](
        DispatchContext(views, export.readonly, constants, workgroups, export.workgroup_size))


def _call(c: Call, table: tuple[Buffer, ...], slot_values: tuple) -> None:
    """Foreign work (hal.calls): its function with numpy views of its bindings (read-only those it only reads) and
    its constants' values."""
    readonly = tuple(i for i, writes in enumerate(c.writes) if not writes)
    c.function(DispatchContext([_view(r, table) for r in c.bindings], readonly, c.constant_values(slot_values),
                               (1, 1, 1), (1, 1, 1)))


def _collective(c: Collective, table: tuple[Buffer, ...]) -> None:
    """Run a collective for its rank: the communicator (backends.host.communicator) meets the other ranks."""
    if c.communicator.closed:
        raise DeviceLostError(f"host: command {c.index} ({c.kind}): its communicator was closed")
    c.communicator.run(c, None if c.source is None else _view(c.source, table),
                       None if c.target is None else _view(c.target, table))


_RUN = {Fill: _fill, Update: _update, Copy: _copy, Collective: _collective}
