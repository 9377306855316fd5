"""Nested command buffers: `cb.execute_commands(other, binding_table)` records `other`'s commands into `cb`.

The commands are recorded again, as `other` holds them when the call is made, through the recording API of
`cb`: so every backend runs them as its own commands (a CUDA graph gets their nodes, a Vulkan command buffer
their encoding, the host runs them), every check runs again against the real buffers, and a later reset of
`other` does not change `cb`. `other`'s slot i stands for `binding_table[i]`: a buffer, a `hal.ref()` of one,
or a `hal.slot()` of `cb` (so a table given to `cb` at submit reaches the nested commands); its constant slots
are `cb`'s. The block sits between two execution barriers, keeps `other`'s barriers, and is all or nothing: it
is first recorded into a scratch command buffer, so a refused command leaves `cb` as it was.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hal.buffer import Buffer, BufferRef, ref, slot
from hal.commands import Call, Collective, Command, Copy, Dispatch, Fill, Region, Update
from hal.errors import ValidationError


def check_nested(cb: Any, other: Any, binding_table: Sequence[Any]) -> tuple:
    """Check `other` (a hal.CommandBuffer) and the table for cb.execute_commands; returns the table as a tuple."""
    if other is cb:
        raise ValidationError("execute_commands: a command buffer cannot execute itself")
    if other.device is not cb.device:
        raise ValidationError(f"execute_commands: the command buffer belongs to another device ({other.device!r}), "
                              f"not to this one's ({cb.device!r})")
    if other.state != "ended":
        raise ValidationError(f"execute_commands: the command buffer is {other.state}; end() it first")
    if other.mode != "reusable":
        raise ValidationError("execute_commands: a one_shot command buffer cannot be nested; record it with "
                              "mode='reusable'")
    if isinstance(binding_table, (str, bytes)) or not isinstance(binding_table, Sequence):
        raise ValidationError(f"execute_commands: binding_table must be a sequence, got "
                              f"{type(binding_table).__name__}")
    table = tuple(binding_table)
    if len(table) < other.slots_needed:
        raise ValidationError(f"execute_commands: the nested command buffer uses slots 0..{other.slots_needed - 1}; "
                              f"the binding_table has {len(table)} entries")
    for i, entry in enumerate(table):
        if not isinstance(entry, (Buffer, BufferRef)):
            raise ValidationError(f"execute_commands: binding_table[{i}] must be a hal.Buffer, hal.ref() or "
                                  f"hal.slot(), got {type(entry).__name__}")
    program = other.program
    if cb.regions_open and program.static_indirect:
        raise ValidationError("execute_commands: inside a region the nested command buffer may not hold static "
                              "dispatch_indirect counts")
    return table


def replay(cb: Any, commands: Sequence[Command], table: Resolver) -> None:
    """Record `commands` (a Program's, in recording order) into `cb`, their slots resolved through `table`,
    with an execution barrier wherever their segment changes."""
    segment = None
    for c in commands:
        if segment is not None and c.segment != segment:
            cb.execution_barrier()
        segment = c.segment
        _REPLAY[type(c)](cb, c, table)


class Resolver:
    """The nested command buffer's references as references of the outer one, through the binding table; each
    reference once (a nested command buffer's commands share their references, and are replayed twice)."""

    def __init__(self, table: tuple) -> None:
        self.table = table
        self.resolved: dict[BufferRef, BufferRef] = {}

    def __call__(self, r: BufferRef | None) -> BufferRef | None:
        if r is None or r.buffer is not None:
            return r
        found = self.resolved.get(r)
        if found is None:
            found = self.resolved[r] = _resolve(r, self.table)
        return found


def _resolve(r: BufferRef, table: tuple) -> BufferRef:
    """Slot reference `r` of the nested command buffer as a reference of the outer one: its slot replaced by the
    table's entry."""
    entry = table[r.slot]
    base = entry.whole if isinstance(entry, Buffer) else entry
    if base.bounded and (r.offset > base.nbytes or r.bounded and r.offset + r.nbytes > base.nbytes):
        raise ValidationError(f"its slot {r.slot} is used at bytes [{r.offset}, "
                              f"{r.offset + r.nbytes if r.bounded else 'end'}), beyond the {base.nbytes} bytes of "
                              f"binding_table[{r.slot}]")
    length = r.nbytes if r.bounded else (base.nbytes - r.offset if base.bounded else None)
    if base.buffer is not None:
        return ref(base.buffer, base.offset + r.offset, length)
    return slot(base.slot, base.offset + r.offset, length)


def _fill(cb: Any, c: Fill, table: Resolver) -> None:
    cb.fill_buffer(table(c.target), c.pattern)


def _update(cb: Any, c: Update, table: Resolver) -> None:
    cb.update_buffer(table(c.target), c.data)


def _copy(cb: Any, c: Copy, table: Resolver) -> None:
    cb.copy_buffer(table(c.source), table(c.target))


def _dispatch(cb: Any, c: Dispatch, table: Resolver) -> None:
    bindings = [table(b) for b in c.bindings]
    if c.parameters is None:
        cb.dispatch(c.executable, c.export.name, c.workgroups, c.constants, bindings)
    else:
        cb.dispatch_indirect(c.executable, c.export.name, table(c.parameters), c.constants, bindings,
                             c.dynamic)


def _region(cb: Any, c: Region, table: Resolver) -> None:
    condition = table(c.condition)
    with cb.while_nonzero(condition) if c.loop else cb.if_nonzero(condition):
        replay(cb, c.body.commands, table)


def _collective(cb: Any, c: Collective, table: Resolver) -> None:
    source, target = table(c.source), table(c.target)
    op = c.operation
    if op in ("all_reduce", "reduce_scatter"):
        getattr(cb, op)(c.communicator, source, target, c.dtype, c.reduction)
    elif op == "all_gather":
        cb.all_gather(c.communicator, source, target, c.dtype)
    elif op == "broadcast":
        cb.broadcast(c.communicator, source, target, c.peer)
    elif op == "send":
        cb.send(c.communicator, source, c.peer)
    elif op == "recv":
        cb.recv(c.communicator, target, c.peer)
    else:
        cb.send_recv(c.communicator, source, c.peer, target, c.source_peer)


def _call(cb: Any, c: Call, table: Resolver) -> None:
    cb.call(c.function, [table(b) for b in c.bindings], writes=[i for i, w in enumerate(c.writes) if w],
            reads=[i for i, w in enumerate(c.writes) if not w], constants=c.constants)


_REPLAY = {Fill: _fill, Update: _update, Copy: _copy, Dispatch: _dispatch, Region: _region, Collective: _collective,
           Call: _call}
