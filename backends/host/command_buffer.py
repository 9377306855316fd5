"""Host command buffers: run the Program's commands with numpy.

At end() the DAG is ordered once (Program.topological_order): among the commands ready to run, always
the one recorded last. So the host runs commands out of recording order wherever the DAG allows, and a
missing dependency shows up as a wrong result in the tests rather than hiding behind program order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.host.executable import DispatchContext
from hal.buffer import Buffer, BufferRef, ConstantSlot
from hal.commands import Command, Copy, Dispatch, Fill, Update
from hal.errors import DeviceError
from hal.program import Program

_PATTERN_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32}


class HostEmitter:
    """The host's side of a command buffer (hal.program.Emitter): the order its commands run in."""

    lanes = 0  # the host runs commands one at a time: no graph to lay out in lanes

    def __init__(self) -> None:
        self.order: list[Command] = []

    def begin(self, program: Program) -> None:
        pass

    def command(self, program: Program, command: Any) -> None:
        pass

    def end(self, program: Program) -> None:
        self.order = program.topological_order()

    def reset(self) -> None:
        self.order = []


def execute(order: list[Command], table: tuple[Buffer, ...], constants: tuple) -> None:
    """Run commands in `order` (a submission keeps its own order, so reset() cannot pull it away), with the
    submission's binding `table` and constant slot values `constants`."""
    for c in order:
        try:
            if type(c) is Dispatch:
                _dispatch(c, table, constants)
            else:
                _RUN[type(c)](c, table)
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


def _dispatch(c: Dispatch, table: tuple[Buffer, ...], slot_values: tuple) -> None:
    views = [_view(r, table) for r in c.bindings]
    export = c.export
    given = (slot_values[v.index] if type(v) is ConstantSlot else v for v in c.constants)
    constants = tuple(np.float32(v) if type(v) is float else v for v in given)  # what a GPU sees
    c.executable.functions[c.ordinal](
        DispatchContext(views, export.readonly, constants, c.workgroups, export.workgroup_size))


_RUN = {Fill: _fill, Update: _update, Copy: _copy}
