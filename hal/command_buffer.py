"""CommandBuffer: the recording API and record-time validation.

Recording appends one slotted record per command to the current segment of a linked list of
segments (see hal.commands). Every check that keeps bad input away from a driver happens here, when
the command is recorded, so the error can name the command index, the argument and the limit; a
rejected command leaves the command buffer as it was. Backends subclass this and implement the `_on_`
hooks: `deferred` backends see the whole list at `end()`, `single_pass` ones each command as recorded.
"""

from __future__ import annotations

import gc
import itertools
import operator
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import networkx as nx
import numpy as np

from hal.buffer import Buffer, BufferRef, BufferUsage, _bytes_view
from hal.commands import READ, WRITE, Command, Copy, Dispatch, Fill, Segment, Update, constant_word
from hal.dependencies import DependencyTracker, RaceDetector, access_range, refs_and_writes, to_networkx
from hal.errors import ValidationError, integer
from hal.executable import Executable

if TYPE_CHECKING:
    from hal.device import Device

MAX_UPDATE_BYTES = 65536
_SOURCE = int(BufferUsage.TRANSFER_SOURCE)
_TARGET = int(BufferUsage.TRANSFER_TARGET)
_STORAGE = int(BufferUsage.DISPATCH_STORAGE)
_USAGE_NAMES = {_SOURCE: "TRANSFER_SOURCE", _TARGET: "TRANSFER_TARGET", _STORAGE: "DISPATCH_STORAGE"}
_INITIAL, _RECORDING, _ENDED = "initial", "recording", "ended"
_WRITE, _READ_WRITE = (WRITE,), (READ, WRITE)  # what fill/update and copy do to their references


class CommandBuffer:
    """A recorded list of commands, run by `Device.queue_execute`.

    Created by `Device.create_command_buffer(mode, binding_capacity, strategy, dependencies, validate)`:
    `one_shot` runs once, `reusable` any number of times (`reset()` allows re-recording); slots below
    `binding_capacity` are bound at each submit; `deferred` leaves emission to `end()`, `single_pass`
    emits while recording; `barriers` or `hazards` picks the dependency rediscovery. `validate=False`
    drops the race check, the one check whose cost depends on what a segment holds; the checks that
    keep bad input from a driver (types, ranges, usage, alignment, limits) always run.
    """

    __slots__ = ("device", "mode", "binding_capacity", "strategy", "dependencies", "validate",
                 "_caps", "_state", "_head", "_tail", "_count", "_barriers", "_tracker", "_analysed", "_races",
                 "_single_pass", "_commands", "_slot_commands", "_slot_seen", "_slots_needed", "_live_token",
                 "_direct_buffers", "_dispatched", "_slot_index", "_ran", "_table", "_table_token",
                 "_workgroups_seen", "_constants_seen", "__weakref__")

    def __init__(self, device: Device, mode: str, binding_capacity: int, strategy: str, dependencies: str,
                 validate: bool) -> None:
        if mode not in ("one_shot", "reusable"):
            raise ValidationError(f"mode must be 'one_shot' or 'reusable', got {mode!r}")
        if strategy not in ("deferred", "single_pass"):
            raise ValidationError(f"strategy must be 'deferred' or 'single_pass', got {strategy!r}")
        if dependencies not in ("barriers", "hazards"):
            raise ValidationError(f"dependencies must be 'barriers' or 'hazards', got {dependencies!r}")
        binding_capacity = integer(binding_capacity, "binding_capacity", 0)
        if not isinstance(validate, bool):
            raise ValidationError(f"validate must be True or False, got {validate!r}")
        self.device = device
        self.mode = mode
        self.binding_capacity = binding_capacity
        self.strategy = strategy
        self.dependencies = dependencies
        self.validate = validate
        self._caps = device.capabilities
        self._single_pass = strategy == "single_pass"
        self._workgroups_seen: tuple[int, int, int] | None = None  # the last workgroups and constants checked
        self._constants_seen: tuple[Any, ...] | None = None
        self._clear()

    def _clear(self) -> None:
        self._state = _INITIAL
        self._head = self._tail = Segment(0)
        self._count = 0
        self._barriers = 0
        self._tracker = DependencyTracker(self.dependencies)
        self._analysed = self._single_pass  # single_pass feeds the tracker as commands come
        self._races = RaceDetector()
        self._commands: list[Command] = []
        self._slot_commands: list[Command] = []
        self._slot_seen = -1
        self._slots_needed = 0
        self._direct_buffers: tuple[Buffer, ...] | None = None  # bound without a slot, when first needed
        self._dispatched: dict[Executable, int] | None = None  # executable -> first command, when first needed
        # The device's release token when nothing the recording uses was released: at begin(), then at
        # each check that found it so. Until the token changes, no check is needed.
        self._live_token: object = None
        self._slot_index: tuple[dict[int, list[Command]], dict[int, Segment], frozenset[Buffer]] | None = None
        self._ran = False  # submitted: a one_shot command buffer may not be again
        self._table: tuple[Buffer, ...] = ()
        self._table_token: object = None

    # State.
    @property
    def state(self) -> str:
        return self._state

    @property
    def commands(self) -> list[Command]:
        """The recorded commands in recording order (complete after end())."""
        return self._commands

    def segments(self) -> Iterator[Segment]:
        """The segment linked list, from the head."""
        seg: Segment | None = self._head
        while seg is not None:
            yield seg
            seg = seg.next

    def begin(self) -> None:
        self.device._check_open()
        if self._state is not _INITIAL:
            raise ValidationError(f"begin: the command buffer is {self._state}; call reset() to record it again")
        self._state = _RECORDING
        self._live_token = self.device._release_token
        self._on_begin()

    def end(self) -> None:
        """Finish recording: a deferred command buffer rediscovers its dependencies here, in one pass
        over the segments (unless its backend does without them: then dependency_graph() does it), and
        the backend emits its commands; single_pass ones only close up."""
        if self._state is not _RECORDING:
            raise ValidationError(f"end: the command buffer is {self._state}, not recording")
        commands = self._commands
        tracker = self._tracker
        analyse = not self._analysed and self._wants_dependencies()
        collecting = gc.isenabled()
        gc.disable()  # the analysis only adds long-lived objects: scanning them again and again is waste
        try:
            segments = [seg.commands for seg in self.segments()]
            if analyse:
                tracker.segments(segments)
            commands.extend(itertools.chain.from_iterable(segments))
            self._analysed = self._analysed or analyse
            self._check_released("end")
            self._slots_needed = max((r._slot + 1 for c in self._slot_commands for r, _ in c.accesses()), default=0)
            self._on_end()
        except BaseException:  # the backend failed to emit: stay recording, as before end()
            self._commands = []
            self._direct_buffers = self._dispatched = None
            if not self._single_pass:
                self._tracker = DependencyTracker(self.dependencies)
                self._analysed = False
            raise
        finally:
            if collecting:
                gc.enable()
        self._state = _ENDED

    def reset(self) -> None:
        """Forget everything recorded; the command buffer can be begun again."""
        self._on_reset()
        self._clear()

    def __enter__(self) -> CommandBuffer:
        self.begin()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.end()

    def dependency_graph(self) -> nx.DiGraph:
        """The rediscovered DAG: nodes are command indices (`kind`, `segment`), edge u -> v: v waits for u."""
        if self._state is not _ENDED:
            raise ValidationError(f"dependency_graph: the command buffer is {self._state}; call end() first")
        if not self._analysed:
            self._tracker.segments(seg.commands for seg in self.segments())
            self._analysed = True
        return to_networkx(self._commands, self._tracker)

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.mode} {self.strategy}/{self.dependencies} "
                f"{self._count} commands, {self._state}>")

    # Recording.
    def fill_buffer(self, target: Buffer | BufferRef, pattern: Any) -> None:
        """Repeat `pattern` (1, 2 or 4 bytes) over the target range."""
        if self._state is not _RECORDING:
            self._not_recording("fill_buffer")
        index = self._count
        t = self._ref(target, index, "fill_buffer", "target", _TARGET)
        p = _pattern(pattern, index)
        align = max(len(p), self._caps.fill_buffer_alignment)
        if t._offset % align or (t._length is not None and t._length % align):
            raise ValidationError(
                f"command {index} (fill_buffer): target offset {t._offset} and length {t._length} must be "
                f"multiples of {align} (the {len(p)}-byte pattern and the device's fill_buffer_alignment "
                f"{self._caps.fill_buffer_alignment})")
        self._record(Fill(index, self._tail.index, t, p), (t,), _WRITE)

    def update_buffer(self, target: Buffer | BufferRef, data: Any) -> None:
        """Write `data` (at most 64 KiB, copied now) at the target offset."""
        if self._state is not _RECORDING:
            self._not_recording("update_buffer")
        index = self._count
        t = self._ref(target, index, "update_buffer", "target", _TARGET)
        view = _bytes_view(data, f"command {index} (update_buffer): data")
        n = view.nbytes
        if not 0 < n <= MAX_UPDATE_BYTES:
            raise ValidationError(f"command {index} (update_buffer): data has {n} bytes; it must hold "
                                  f"1 to {MAX_UPDATE_BYTES} (use a staging buffer and copy_buffer for more)")
        if t._length is not None and n > t._length:
            raise ValidationError(f"command {index} (update_buffer): {n} bytes of data do not fit the "
                                  f"target range of {t._length} bytes at offset {t._offset}")
        align = self._caps.update_buffer_alignment
        if t._offset % align or n % align:
            raise ValidationError(f"command {index} (update_buffer): target offset {t._offset} and data size {n} "
                                  f"must be multiples of the device's update_buffer_alignment {align}")
        if t._length != n:
            t = BufferRef(t._buffer, t._slot, t._offset, n)
        self._record(Update(index, self._tail.index, t, view.tobytes()), (t,), _WRITE)

    def copy_buffer(self, source: Buffer | BufferRef, target: Buffer | BufferRef) -> None:
        """Copy the source range (or, for a slot of unknown length, the target range's length)."""
        if self._state is not _RECORDING:
            self._not_recording("copy_buffer")
        index = self._count
        s = self._ref(source, index, "copy_buffer", "source", _SOURCE)
        t = self._ref(target, index, "copy_buffer", "target", _TARGET)
        n = s._length if s._length is not None else t._length
        if n is None:
            raise ValidationError(f"command {index} (copy_buffer): both ranges are slots of unknown length; "
                                  f"give one a length: hal.slot(i, offset, length)")
        if n == 0:
            raise ValidationError(f"command {index} (copy_buffer): the source range is empty")
        if t._length is not None and n > t._length:
            raise ValidationError(f"command {index} (copy_buffer): {n} source bytes do not fit the target "
                                  f"range of {t._length} bytes at offset {t._offset}")
        align = self._caps.copy_buffer_alignment
        if s._offset % align or t._offset % align or n % align:
            raise ValidationError(f"command {index} (copy_buffer): offsets {s._offset}, {t._offset} and length {n} "
                                  f"must be multiples of the device's copy_buffer_alignment {align}")
        if s._buffer is t._buffer and s._slot == t._slot and s._offset < t._offset + n and t._offset < s._offset + n:
            raise ValidationError(f"command {index} (copy_buffer): source [{s._offset}, {s._offset + n}) and target "
                                  f"[{t._offset}, {t._offset + n}) overlap in one buffer; copy through a second buffer")
        if s._length != n:
            s = BufferRef(s._buffer, s._slot, s._offset, n)
        if t._length != n:
            t = BufferRef(t._buffer, t._slot, t._offset, n)
        self._record(Copy(index, self._tail.index, s, t), (s, t), _READ_WRITE)

    def execution_barrier(self) -> None:
        """Everything recorded after waits for everything recorded before."""
        if self._state is not _RECORDING:
            self._not_recording("execution_barrier")
        barriers = self._barriers = self._barriers + 1
        tail = self._tail
        if tail.commands:
            tail.next = self._tail = Segment(barriers)
            if self._single_pass:
                self._tracker.barrier()
                self._on_barrier()
        else:
            tail.index = barriers

    def dispatch(self, executable: Executable, name: str, workgroups: Any = (1, 1, 1),
                 constants: Sequence[Any] = (), bindings: Sequence[Buffer | BufferRef] = ()) -> None:
        """Run export `name` over `workgroups` with 32-bit `constants` and buffer `bindings`."""
        if self._state is not _RECORDING:
            self._not_recording("dispatch")
        index = self._count
        try:  # one lookup serves the common case; the errors are sorted out on the slow path
            ordinal, export = executable._by_name[name]
            mine = executable.device is self.device
        except (AttributeError, KeyError, TypeError):
            mine = False
        if not mine:
            _bad_export(executable, name, self.device, index)
        # A tuple of ints cannot change: the one checked last (a literal in a recording loop is one object)
        # needs no second look.
        if workgroups is not self._workgroups_seen:
            caps = self._caps
            if type(workgroups) is not tuple or len(workgroups) != 3:
                workgroups = _workgroups(workgroups, index, name, caps.max_workgroup_count)
            x, y, z = workgroups
            lx, ly, lz = caps.max_workgroup_count
            if type(x) is not int or type(y) is not int or type(z) is not int or \
                    not (0 < x <= lx and 0 < y <= ly and 0 < z <= lz):
                workgroups = _workgroups(workgroups, index, name, caps.max_workgroup_count)
            self._workgroups_seen = workgroups
        if type(constants) is not tuple:
            constants = _sequence(constants, index, name, "constants")
        if len(constants) != export.constants:
            raise ValidationError(f"command {index} (dispatch {name}): {len(constants)} constants given, "
                                  f"the export takes {export.constants}")
        if constants is not self._constants_seen:  # as for workgroups: a tuple checked once stays valid
            limit = self._caps.max_push_constants_size
            if 4 * len(constants) > limit:
                raise ValidationError(f"command {index} (dispatch {name}): {4 * len(constants)} bytes of constants "
                                      f"exceed the device's max_push_constants_size {limit}")
            for c in constants:
                if type(c) is not int or not -2147483648 <= c <= 4294967295:
                    _check_constants(constants, index, name)
            self._constants_seen = constants
        if type(bindings) is not tuple:
            bindings = _sequence(bindings, index, name, "bindings")
        if len(bindings) != export.bindings:
            raise ValidationError(f"command {index} (dispatch {name}): {len(bindings)} bindings given, "
                                  f"the export takes {export.bindings}")
        token = self.device._release_token
        resolved = []
        for r in bindings:
            if type(r) is not BufferRef:
                if not isinstance(r, Buffer):
                    self._ref(r, index, "dispatch", len(resolved), _STORAGE)  # raises: not a buffer or reference
                r = r._whole
            if r._bindable is not token:  # not checked as a binding since the last release on the device
                r = self._ref(r, index, "dispatch", len(resolved), _STORAGE)
            resolved.append(r)
        # _record, inlined: this is the hot path.
        tail = self._tail
        command = Dispatch(index, tail.index, executable, export, ordinal, workgroups, constants, tuple(resolved))
        commands = tail.commands
        if commands and self.validate:  # the first command of a segment cannot race
            races = self._races
            if len(commands) == 1:  # the second command: index the first, forgetting the last segment
                races.rebuild(commands)
            races.add(command, command.bindings, export.writes, commands)
        if self._single_pass:
            self._on_command(command, self._tracker.add(command))
        commands.append(command)
        if self._slot_seen == index:
            self._slot_commands.append(command)
        self._count = index + 1

    def _ref(self, r: Any, index: int, command: str, arg: str | int, usage: int) -> BufferRef:
        """Check reference `r` for use as `arg` (a name, or a binding position) of command `index`;
        returns it as a BufferRef. Messages are only formatted on the error path."""
        if type(r) is not BufferRef:
            if not isinstance(r, Buffer):
                raise ValidationError(f"command {index} ({command}): {_name(arg)} must be a hal.Buffer or a reference "
                                      f"from hal.ref()/hal.slot(), got {type(r).__name__}")
            r = r._whole
        b = r._buffer
        if b is None:
            if r._slot >= self.binding_capacity:
                raise ValidationError(f"command {index} ({command}): {_name(arg)} uses slot {r._slot}, but the command "
                                      f"buffer's binding_capacity is {self.binding_capacity}")
            if r._offset < 0 or (r._length is not None and r._length <= 0):
                raise ValidationError(f"command {index} ({command}): {_name(arg)} has offset {r._offset} and length "
                                      f"{r._length}; the offset must be >= 0 and the length > 0")
            if usage == _STORAGE and r._offset % self._caps.storage_buffer_offset_alignment:
                raise ValidationError(f"command {index} ({command}): {_name(arg)} offset {r._offset} is not a "
                                      f"multiple of the device's storage_buffer_offset_alignment "
                                      f"{self._caps.storage_buffer_offset_alignment}")
            self._slot_seen = index
            return r
        if b.device is not self.device:
            raise ValidationError(f"command {index} ({command}): {_name(arg)} is a buffer of another device "
                                  f"({b.device!r})")
        if b._released:
            raise ValidationError(f"command {index} ({command}): {_name(arg)} is a released buffer")
        if not r._checked & usage:
            _check_range(r, b, self._caps, index, command, arg, usage)
            r._checked |= usage
        if usage == _STORAGE:
            r._bindable = self.device._release_token
        return r

    def _record(self, command: Command, refs: tuple[BufferRef, ...], writes: tuple[bool, ...]) -> None:
        """Append `command`, which accesses `refs` (`writes`: which it writes), to the current segment
        once it is known not to race. Dispatch inlines this."""
        commands = self._tail.commands
        if commands and self.validate:  # the first command of a segment cannot race
            races = self._races
            if len(commands) == 1:  # the second command: index the first, forgetting the last segment
                races.rebuild(commands)
            races.add(command, refs, writes, commands)
        if self._single_pass:
            self._on_command(command, self._tracker.add(command))
        commands.append(command)
        if self._slot_seen == command.index:
            self._slot_commands.append(command)
        self._count += 1

    def _not_recording(self, what: str) -> None:
        hint = "call begin() first" if self._state is _INITIAL else "call reset() to record it again"
        raise ValidationError(f"command {self._count} ({what}): the command buffer is {self._state}, "
                              f"not recording; {hint}")

    # Submission.
    def _prepare_submit(self, binding_table: Sequence[Buffer]) -> tuple[Buffer, ...]:
        """Check the command buffer can run against `binding_table`; returns the table as a tuple.

        A table identical to the last one, with no buffer released since, is accepted in O(1) (and, the
        same object, by queue_execute without calling this).
        """
        if self._state is not _ENDED:
            raise ValidationError(f"queue_execute: the command buffer is {self._state}; call end() before submitting")
        if self._ran and self.mode == "one_shot":
            raise ValidationError("queue_execute: a one_shot command buffer runs once; create it with "
                                  "mode='reusable' to submit it again")
        table = binding_table if type(binding_table) is tuple else _table(binding_table)
        token = self.device._release_token
        last = self._table
        if token is self._table_token and (table is last or (
                len(table) == len(last) and all(map(operator.is_, table, last)))):
            return table
        self._check_table(table)
        self._table = table
        if self.mode == "reusable":  # queue_execute accepts the same table again without a call here
            self._table_token = token
        return table

    def _check_table(self, table: tuple[Buffer, ...]) -> None:
        if len(table) > self.binding_capacity:
            raise ValidationError(f"queue_execute: the binding table has {len(table)} entries, more than the "
                                  f"command buffer's binding_capacity {self.binding_capacity}")
        if len(table) < self._slots_needed:
            raise ValidationError(f"queue_execute: the binding table has {len(table)} entries; the command "
                                  f"buffer uses slots up to {self._slots_needed - 1}")
        for i, b in enumerate(table):
            if not isinstance(b, Buffer):
                raise ValidationError(f"queue_execute: binding_table[{i}] must be a hal.Buffer, got {type(b).__name__}")
            if b.device is not self.device:
                raise ValidationError(f"queue_execute: binding_table[{i}] is a buffer of another device")
            if b._released:
                raise ValidationError(f"queue_execute: binding_table[{i}] is a released buffer")
        self._check_released("queue_execute")
        if not self._slot_commands:
            return
        users, segment_of, direct = self._slot_index or self._index_slots()
        n = self._slots_needed
        last = self._table if self._table_token is self.device._release_token else ()
        changed = [i for i in range(n) if i >= len(last) or table[i] is not last[i]]
        if not changed or _same_answers(table[:n], last[:n], changed, direct):
            return
        commands: dict[Command, None] = {}  # those using a slot whose buffer changed since the last table
        for i in changed:
            commands.update(dict.fromkeys(users.get(i, ())))
        segments = set()
        for c in commands:
            self._check_slot_command(c, table)
            segments.add(c.segment)
        if self.validate:
            for index in segments:
                seg = segment_of[index]
                if len(seg.commands) > 1:  # a lone command cannot race
                    races = RaceDetector()
                    for c in seg.commands:
                        races.add(c, *refs_and_writes(c), seg.commands, table)

    def _index_slots(self) -> tuple[dict[int, list[Command]], dict[int, Segment], frozenset[Buffer]]:
        """Which commands use each slot, and the segments they are in: so a new table re-checks (and a
        backend re-resolves) only the commands of the slots whose buffer changed."""
        users: dict[int, list[Command]] = {}
        for c in self._slot_commands:
            for r, _ in c.accesses():
                if r._buffer is None and c not in users.setdefault(r._slot, [])[-1:]:
                    users[r._slot].append(c)
        wanted = {c.segment for c in self._slot_commands}
        self._slot_index = (users, {seg.index: seg for seg in self.segments() if seg.index in wanted},
                            frozenset(self._direct()))
        return self._slot_index

    def _slot_users(self) -> dict[int, list[Command]]:
        """Slot index -> the commands using it, each once, in recording order."""
        return (self._slot_index or self._index_slots())[0]

    def _direct(self) -> tuple[Buffer, ...]:
        """The buffers the commands bind without a slot."""
        if self._direct_buffers is None:
            direct: dict[Buffer | None, None] = {}
            for c in self._commands:
                for r in c.bindings if type(c) is Dispatch else (r for r, _ in c.accesses()):
                    direct[r._buffer] = None
            direct.pop(None, None)  # slot references
            self._direct_buffers = tuple(direct)
        return self._direct_buffers

    def _check_released(self, what: str) -> None:
        """Refuse a recording that uses a buffer or an executable released since it was recorded (each
        reference was checked as it was recorded: only a release since then can matter)."""
        token = self.device._release_token
        if token is self._live_token:
            return
        for b in self._direct():
            if b._released:
                user = next(c.index for c in self._commands for r, _ in c.accesses() if r._buffer is b)
                raise ValidationError(f"{what}: command {user} uses a buffer that was released after recording; "
                                      f"record the command buffer again")
        if self._dispatched is None:
            self._dispatched = {}
            for c in self._commands:
                if type(c) is Dispatch:
                    self._dispatched.setdefault(c.executable, c.index)
        for exe, user in self._dispatched.items():
            if exe._released:
                raise ValidationError(f"{what}: command {user} dispatches an executable that was released after "
                                      f"recording; record the command buffer again")
        self._live_token = token

    def _check_slot_command(self, c: Command, table: tuple[Buffer, ...]) -> None:
        """The record-time reference checks, for the slot references of `c` resolved through `table`."""
        ranges = []
        caps = self._caps
        for i, (r, write) in enumerate(c.accesses()):
            key, start, end = access_range(r, table)
            if r._buffer is None:
                usage = _STORAGE if c.kind == "dispatch" else (_TARGET if write else _SOURCE)
                if not (0 <= start < end <= key.size and key._usage_bits & usage and (usage != _STORAGE or (
                        start % caps.storage_buffer_offset_alignment == 0
                        and end - start <= caps.max_storage_buffer_range))):
                    arg = f"slot {r._slot} (binding_table[{r._slot}])"  # the message, on the failing path only
                    if c.kind == "dispatch":
                        arg = f"bindings[{i}] = {arg}"
                    try:
                        _check_range(BufferRef(key, -1, start, end - start), key, caps, c.index, c.kind, arg, usage)
                    except ValidationError as e:
                        raise ValidationError(f"queue_execute: {e}") from None
                if c.kind == "fill" and (end - start) % max(len(c.pattern), caps.fill_buffer_alignment):
                    raise ValidationError(f"queue_execute: command {c.index} (fill_buffer) fills {end - start} bytes "
                                          f"of slot {r._slot}, not a multiple of the pattern and fill alignment")
            ranges.append((key, start, end))
        if c.kind == "copy" and ranges[0][0] is ranges[1][0] and \
                ranges[0][1] < ranges[1][2] and ranges[1][1] < ranges[0][2]:
            raise ValidationError(f"queue_execute: command {c.index} (copy_buffer) copies between overlapping "
                                  f"ranges of one buffer through the binding table")

    # Backend hooks.
    def _on_begin(self) -> None:
        """Recording starts."""

    def _on_command(self, command: Command, group: int) -> None:
        """single_pass: emit `command`, which waits for the commands of `self._tracker.groups[group]`."""

    def _on_barrier(self) -> None:
        """single_pass: a barrier closed a non-empty segment."""

    def _wants_dependencies(self) -> bool:
        """Does `_on_end` read the tracker's groups? (A backend that orders work by the barriers alone
        skips the analysis; dependency_graph() still has it.)"""
        return True

    def _on_end(self) -> None:
        """Recording is complete: `commands` and, if `_wants_dependencies()`, the tracker's groups are final."""

    def _on_reset(self) -> None:
        """Release what the backend built; the command buffer will be recorded again."""


def _check_range(r: BufferRef, b: Buffer, caps: Any, index: int, command: str, arg: str | int, usage: int) -> None:
    """The checks of a direct reference that never change once passed (see BufferRef._checked)."""
    if r._offset < 0 or r._length <= 0 or r._end > b.size:
        raise ValidationError(f"command {index} ({command}): {_name(arg)} range [{r._offset}, {r._end}) is empty or "
                              f"outside the buffer's {b.size} bytes")
    if not b._usage_bits & usage:
        raise ValidationError(f"command {index} ({command}): {_name(arg)} lacks BufferUsage.{_USAGE_NAMES[usage]} "
                              f"(it was allocated with {b.usage!r})")
    if usage == _STORAGE:
        if r._offset % caps.storage_buffer_offset_alignment:
            raise ValidationError(f"command {index} ({command}): {_name(arg)} offset {r._offset} is not a multiple "
                                  f"of the device's storage_buffer_offset_alignment "
                                  f"{caps.storage_buffer_offset_alignment}")
        if r._length > caps.max_storage_buffer_range:
            raise ValidationError(f"command {index} ({command}): {_name(arg)} spans {r._length} bytes, more than the "
                                  f"device's max_storage_buffer_range {caps.max_storage_buffer_range}")


def _same_answers(table: tuple[Buffer, ...], last: tuple[Buffer, ...], changed: list[int],
                  direct: frozenset[Buffer]) -> bool:
    """Would every check of the slot commands answer for `table` as it did for `last`? Yes when each
    changed slot holds a buffer of the same size and usage as before, no buffer used directly enters or
    leaves the table, and the slots alias each other as before (ranges, alignment and races depend on
    nothing else)."""
    if len(last) < len(table):
        return False
    for i in changed:
        new, old = table[i], last[i]
        if new.size != old.size or new._usage_bits != old._usage_bits or new in direct or old in direct:
            return False
    return len(table) < 2 or _aliasing(table) == _aliasing(last)


def _aliasing(table: tuple[Buffer, ...]) -> tuple[int, ...]:
    """Per slot, the first slot bound to the same buffer."""
    first: dict[int, int] = {}
    return tuple(first.setdefault(id(b), i) for i, b in enumerate(table))


def _name(arg: str | int) -> str:
    return f"bindings[{arg}]" if type(arg) is int else arg


def _bad_export(executable: Any, name: Any, device: Device, index: int) -> None:
    if not isinstance(executable, Executable) or executable.device is not device:
        raise ValidationError(f"command {index} (dispatch): executable must be a hal.Executable loaded "
                              f"on this device, got {executable!r}")
    if executable._released:
        raise ValidationError(f"command {index} (dispatch {name}): the executable was released; load it again")
    raise ValidationError(f"command {index} (dispatch): no export {name!r}; the executable has "
                          f"{', '.join(executable._by_name)}")


def _check_constants(constants: tuple[Any, ...], index: int, name: str) -> None:
    for i, c in enumerate(constants):
        try:
            constant_word(c)
        except (TypeError, OverflowError) as e:
            raise ValidationError(f"command {index} (dispatch {name}): constants[{i}] = {c!r}: {e}") from None


def _pattern(pattern: Any, index: int) -> bytes:
    if isinstance(pattern, (bytes, bytearray, memoryview)):
        p = bytes(pattern)
    elif isinstance(pattern, np.generic):
        p = pattern.tobytes()
    else:
        raise ValidationError(f"command {index} (fill_buffer): pattern must be bytes or a numpy scalar "
                              f"(e.g. np.uint32(7), np.float32(1.0)), got {type(pattern).__name__}")
    if len(p) not in (1, 2, 4):
        raise ValidationError(f"command {index} (fill_buffer): pattern has {len(p)} bytes; it must have 1, 2 or 4")
    return p


def _workgroups(workgroups: Any, index: int, name: str, limit: tuple[int, int, int]) -> tuple[int, int, int]:
    """The slow path: normalise 1 to 3 integers (numpy ones too) and check them against the limit."""
    if isinstance(workgroups, (int, np.integer)) and not isinstance(workgroups, bool):
        workgroups = (workgroups,)
    try:
        items = tuple(workgroups)
    except TypeError:
        items = ()
    if not 1 <= len(items) <= 3:
        raise ValidationError(f"command {index} (dispatch {name}): workgroups must be 1 to 3 integers, "
                              f"got {workgroups!r}")
    items += (1,) * (3 - len(items))
    for axis, w in enumerate(items):
        if not isinstance(w, (int, np.integer)) or isinstance(w, bool) or not 0 < w <= limit[axis]:
            raise ValidationError(f"command {index} (dispatch {name}): workgroups[{axis}] = {w!r} must be "
                                  f"an integer from 1 to the device's max_workgroup_count {limit[axis]}")
    return (int(items[0]), int(items[1]), int(items[2]))


def _sequence(items: Any, index: int, name: str, what: str) -> tuple[Any, ...]:
    if isinstance(items, (str, bytes)):
        raise ValidationError(f"command {index} (dispatch {name}): {what} must be a sequence, "
                              f"got {type(items).__name__}")
    try:
        return tuple(items)
    except TypeError:
        raise ValidationError(f"command {index} (dispatch {name}): {what} must be a sequence, "
                              f"got {type(items).__name__}") from None


def _table(binding_table: Any) -> tuple[Buffer, ...]:
    if isinstance(binding_table, Buffer):
        raise ValidationError("queue_execute: binding_table must be a sequence of buffers, got one buffer")
    try:
        return tuple(binding_table)
    except TypeError:
        raise ValidationError(f"queue_execute: binding_table must be a sequence of buffers, "
                              f"got {type(binding_table).__name__}") from None
