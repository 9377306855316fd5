"""Host command buffers: run the recorded DAG with numpy.

At end() the DAG is ordered once: a topological order that, among the commands ready to run, always
takes the one recorded last. So the host runs commands out of recording order wherever the DAG allows,
and a missing dependency shows up as a wrong result in the tests rather than hiding behind program order.
"""

from __future__ import annotations

import heapq

import numpy as np

from backends.host.executable import DispatchContext
from hal.buffer import Buffer, BufferRef
from hal.command_buffer import CommandBuffer
from hal.commands import Command, Copy, Dispatch, Fill, Update
from hal.errors import DeviceError

_PATTERN_TYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32}


class HostCommandBuffer(CommandBuffer):
    __slots__ = ("order",)

    def _on_end(self) -> None:
        self.order = execution_order(self._commands, self._tracker.groups, self._tracker.group_of)

    def _on_reset(self) -> None:
        self.order = []


def execute(order: list[Command], table: tuple[Buffer, ...]) -> None:
    """Run commands in `order` (a submission keeps its own order, so reset() cannot pull it away)."""
    for c in order:
        try:
            _RUN[type(c)](c, table)
        except Exception as e:
            name = f" {c.export.name}" if isinstance(c, Dispatch) else ""
            raise DeviceError(f"host: command {c.index} ({c.kind}{name}) failed: {type(e).__name__}: {e}") from e


def execution_order(commands: list[Command], groups: list[tuple[int, ...]], group_of: list[int]) -> list[Command]:
    """Topological order preferring the highest ready index; linear in commands plus group sizes."""
    waiting = [len(g) for g in groups]
    members: list[list[int]] = [[] for _ in groups]
    feeds: list[list[int]] = [[] for _ in commands]
    for g, preds in enumerate(groups):
        for p in preds:
            feeds[p].append(g)
    ready = []
    for i, g in enumerate(group_of):
        if g < 0:
            ready.append(-i)
        else:
            members[g].append(i)
    heapq.heapify(ready)
    order = []
    while ready:
        i = -heapq.heappop(ready)
        order.append(commands[i])
        for g in feeds[i]:
            waiting[g] -= 1
            if not waiting[g]:
                for m in members[g]:
                    heapq.heappush(ready, -m)
    if len(order) != len(commands):  # pragma: no cover - the tracker only links backwards
        raise AssertionError("dependency cycle")
    return order


def _view(r: BufferRef, table: tuple[Buffer, ...]) -> np.ndarray:
    b = r._buffer if r._buffer is not None else table[r._slot]
    return b.data[r._offset:r._end]


def _fill(c: Fill, table: tuple[Buffer, ...]) -> None:
    dt = _PATTERN_TYPES[len(c.pattern)]
    _view(c.target, table).view(dt)[:] = np.frombuffer(c.pattern, dt)[0]


def _update(c: Update, table: tuple[Buffer, ...]) -> None:
    _view(c.target, table)[:] = np.frombuffer(c.data, np.uint8)


def _copy(c: Copy, table: tuple[Buffer, ...]) -> None:
    _view(c.target, table)[:] = _view(c.source, table)


def _dispatch(c: Dispatch, table: tuple[Buffer, ...]) -> None:
    views = [_view(r, table) for r in c.bindings]
    export = c.export
    constants = tuple(np.float32(v) if type(v) is float else v for v in c.constants)  # what a GPU sees
    c.executable.functions[c.ordinal](
        DispatchContext(views, export.readonly, constants, c.workgroups, export.workgroup_size))


_RUN = {Fill: _fill, Update: _update, Copy: _copy, Dispatch: _dispatch}
