"""CommandBuffer: the recording API and record-time validation (compiled: this is the hot path).

Recording appends one typed record per command to one list and notes where the current segment (the
commands between two barriers) begins; segments() shows them as hal.commands' linked list of segments, and
the planner reads each segment as a run of commands with the same barrier count. Every check that keeps
bad input away from a driver happens here, when the command is recorded, so the error can name the
command index, the argument and the limit; a rejected command leaves the command buffer as it was. At
end() the planner (hal.dependencies) freezes the recording into a Program and the backend's emitter
(hal.program.Emitter) takes it from there: `deferred` command buffers plan and emit everything at end(),
`single_pass` ones plan each command as it is recorded and hand it to the emitter at once.
"""

from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.math cimport isinf, isnan
from libc.stdint cimport uint32_t
from libcpp.vector cimport vector

from collections.abc import Iterator, Sequence
from typing import Any

import networkx as nx
import numpy as np

from hal.buffer cimport Buffer, BufferRef, ConstantSlot
from hal.commands cimport (Collective, Command, Dispatch, Entries, Entry, Fill, Region, Segment, checked_word,
                           hide_from_collector, new_collective, new_copy, new_dispatch, new_fill, new_region,
                           new_segment, new_update, with_arguments)
from hal.dependencies cimport (Planner, RaceDetector, access_range, give_back_race_detector, refs_and_writes,
                               take_race_detector)
from hal.program cimport Program

from hal.buffer import MAX_SLOTS, BufferUsage, bytes_view, slot_count
from hal.commands import constant_word, restore
from hal.communicator import Communicator, check_collective, same_or_disjoint
from hal.errors import ValidationError, integer
from hal.executable import Executable
from hal.nesting import Resolver, check_nested, replay
from hal.transients import Transient, plan_transients

MAX_UPDATE_BYTES = 65536
TRANSIENT_ALIGNMENT = 16  # at least: what 16-byte vector loads need
cdef double FLOAT32_MAX = 3.4028234663852886e38
cdef int SOURCE = BufferUsage.TRANSFER_SOURCE
cdef int TARGET = BufferUsage.TRANSFER_TARGET
cdef int STORAGE = BufferUsage.DISPATCH_STORAGE
cdef int ANY = BufferUsage.DEFAULT
_USAGE_NAMES = {int(BufferUsage.TRANSFER_SOURCE): "TRANSFER_SOURCE", int(BufferUsage.TRANSFER_TARGET): "TRANSFER_TARGET",
                int(BufferUsage.DISPATCH_STORAGE): "DISPATCH_STORAGE"}
cdef int INITIAL = 0, RECORDING = 1, ENDED = 2
_PHASES = ("initial", "recording", "ended")
cdef tuple _WRITE = (True,), _READ_WRITE = (False, True)  # what fill/update and copy do to their references


cdef class CommandBuffer:
    """A recorded list of commands, run by `Device.queue_execute`.

    Created by `Device.create_command_buffer(mode, binding_capacity, strategy, dependencies, validate,
    constant_capacity)`: `one_shot` runs once, `reusable` any number of times (`reset()` allows re-recording);
    slots below `binding_capacity` are bound, and constant slots below `constant_capacity` given, at each
    submit; `deferred` leaves emission to `end()`, `single_pass`
    emits while recording; `barriers` or `hazards` picks the dependency rediscovery. `validate=False`
    drops the race check, the one check whose cost depends on what a segment holds; the checks that
    keep bad input from a driver (types, ranges, usage, alignment, limits) always run.
    """

    def __init__(self, device, str mode, binding_capacity, str strategy, str dependencies, validate, emitter_for,
                 constant_capacity=0):
        if mode not in ("one_shot", "reusable"):
            raise ValidationError(f"mode must be 'one_shot' or 'reusable', got {mode!r}")
        if strategy not in ("deferred", "single_pass"):
            raise ValidationError(f"strategy must be 'deferred' or 'single_pass', got {strategy!r}")
        if dependencies not in ("barriers", "hazards"):
            raise ValidationError(f"dependencies must be 'barriers' or 'hazards', got {dependencies!r}")
        binding_capacity = slot_count(binding_capacity, "binding_capacity", MAX_SLOTS)
        constant_capacity = slot_count(constant_capacity, "constant_capacity", MAX_SLOTS)
        if not isinstance(validate, bool):
            raise ValidationError(f"validate must be True or False, got {validate!r}")
        self.device = device
        self.mode = mode
        self.binding_capacity = binding_capacity
        self.constant_capacity = constant_capacity
        self.strategy = strategy
        self.dependencies = dependencies
        self.validate = validate
        self.single_pass = strategy == "single_pass"
        caps = self.caps = device.capabilities
        self.max_groups_x, self.max_groups_y, self.max_groups_z = caps.max_workgroup_count
        self.max_constant_bytes = caps.max_push_constants_size
        self.storage_alignment = caps.storage_buffer_offset_alignment
        self.max_storage_range = caps.max_storage_buffer_range
        self.fill_alignment = caps.fill_buffer_alignment
        self.update_alignment = caps.update_buffer_alignment
        self.copy_alignment = caps.copy_buffer_alignment
        self.emitter = emitter_for(self)
        self.clear()

    cdef void clear(self):
        if self.transients:
            self.release_transients()
        self.transients = []
        self.transient_plan = None
        self.transients_of = None
        self.phase = INITIAL
        self.sequence = []
        self.segment_start = 0
        self.count = 0
        self.barriers = 0
        self.planner = None
        if self.races is not None:
            give_back_race_detector(self.races)
        self.races = take_race_detector()
        self.recorded = None
        self.slot_commands = []
        self.slots_needed = 0
        self.constant_commands = []
        self.constants_needed = 0
        self.indirect_commands = []
        self.region_commands = []
        self.collective_commands = []
        self.nested_commands = []
        self.levels = []  # per open region, the enclosing level's recording state (see _open_region)
        self.uses_slot = False
        self.direct_buffers = None  # bound without a slot, when first needed
        self.dispatched = None  # executable -> first command, when first needed
        # The device's release token when nothing the recording uses was released: at begin(), then at
        # each check that found it so. Until the token changes, no check is needed.
        self.live_token = None
        self.slot_index = None
        self.ran = False  # submitted: a one_shot command buffer may not be again
        self.table = ()
        self.table_token = None

    # State.
    @property
    def state(self) -> str:
        return _PHASES[self.phase]

    @property
    def commands(self) -> tuple:
        """The recorded commands in recording order (complete after end())."""
        return self.recorded.commands if self.phase == ENDED else ()

    @property
    def program(self) -> Program:
        """The frozen Program end() made: what the backend runs, and what tools inspect."""
        if self.phase != ENDED:
            raise ValidationError(f"program: the command buffer is {self.state}; call end() first")
        return self.recorded

    def segments(self) -> Iterator[Segment]:
        """The segment linked list so far, from the head (made when asked: the recorder keeps one list of commands
        and where the current segment begins). The last one is empty after a barrier that no command followed
        yet, and so is the only one before any command."""
        cdef list found = []
        for index, commands in _segments_of(self.sequence).items():
            found.append(new_segment(index))
            (<Segment>found[-1]).commands.extend(commands)
        if self.segment_start == len(self.sequence):
            found.append(new_segment(self.barriers))
        for k in range(len(found) - 1):
            (<Segment>found[k]).next = found[k + 1]
        return iter(found)

    def begin(self) -> None:
        self.device.check_open()
        if self.phase != INITIAL:
            raise ValidationError(f"begin: the command buffer is {self.state}; call reset() to record it again")
        self.phase = RECORDING
        self.live_token = self.device.release_token
        self.planner = Planner(self.dependencies, self.emitter.lanes, self.single_pass, self.emitter.graph_layout)
        if self.single_pass:
            self.recorded = self.planner.program
            self.emitter.begin(self.recorded)

    def end(self) -> None:
        """Finish recording: the planner freezes the Program (a deferred command buffer is planned here, in
        one pass over the segments) and the backend emits it."""
        if self.phase != RECORDING:
            raise ValidationError(f"end: the command buffer is {self.state}, not recording")
        if self.levels:
            raise ValidationError(f"end: {len(self.levels)} region(s) still open; leave their `with` blocks first")
        self.device.check_open()  # the backend emits into the device's objects
        cdef tuple commands = tuple(self.sequence)
        try:
            if not self.single_pass:
                self.planner.plan(commands)
            self.check_released("end", commands, self.device.release_token)
            slot_users, constant_users = _users(self.slot_commands, self.constant_commands)
            self.slots_needed = _needed(slot_users)
            self.constants_needed = _needed(constant_users)
            self.recorded = self.planner.finish(commands, slot_users, self.slots_needed, constant_users,
                                                self.constants_needed, tuple(self.indirect_commands),
                                                tuple(self.region_commands), tuple(self.collective_commands),
                                                tuple(self.nested_commands))
            if self.transients and not self.single_pass:
                self.transient_plan = plan_transients(self.recorded, self.transients, self.device,
                                                      max(self.storage_alignment, TRANSIENT_ALIGNMENT),
                                                      self.mode == "reusable")
                self.recorded.transients = self.transient_plan
            self.emitter.end(self.recorded)
        except BaseException:  # the backend failed to emit: stay recording, as before end()
            if self.transient_plan is not None:  # the commands point at their transients again; the next end()
                restore(self.transient_plan.moved)  # places them anew
                self.release_transients()
                self.transient_plan = None
            self.direct_buffers = self.dispatched = None
            if not self.single_pass:
                self.planner = Planner(self.dependencies, self.emitter.lanes, False, self.emitter.graph_layout)
                self.recorded = None
            raise
        self.phase = ENDED
        give_back_race_detector(self.races)  # recording is over: its tables serve the next command buffer
        self.races = None

    def reset(self) -> None:
        """Forget everything recorded; the command buffer can be begun again."""
        self.emitter.reset()
        self.clear()

    def __enter__(self) -> CommandBuffer:
        self.begin()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.end()

    def dependency_graph(self) -> nx.DiGraph:
        """The rediscovered DAG: nodes are command indices (`kind`, `segment`), edge u -> v: v waits for u."""
        if self.phase != ENDED:
            raise ValidationError(f"dependency_graph: the command buffer is {self.state}; call end() first")
        return self.recorded.dependency_graph()

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.mode} {self.strategy}/{self.dependencies} "
                f"{self.count} commands, {self.state}>")

    # Recording.
    def fill_buffer(self, target: Buffer | BufferRef, pattern: Any) -> None:
        """Repeat `pattern` (1, 2 or 4 bytes) over the target range."""
        if self.phase != RECORDING:
            self.not_recording("fill_buffer")
        cdef Py_ssize_t index = self.count
        cdef BufferRef t = self.check_ref(target, index, "fill_buffer", "target", -1, TARGET)
        p = _pattern(pattern, index)
        cdef Py_ssize_t align = max(len(p), self.fill_alignment)
        if t.offset % align or (t.bounded and t.nbytes % align):
            raise ValidationError(
                f"command {index} (fill_buffer): target offset {t.offset} and length {t.length} must be "
                f"multiples of {align} (the {len(p)}-byte pattern and the device's fill_buffer_alignment "
                f"{self.fill_alignment})")
        self.record(new_fill(index, self.barriers, t, p), (t,), _WRITE)

    def update_buffer(self, target: Buffer | BufferRef, data: Any) -> None:
        """Write `data` (at most 64 KiB, copied now) at the target offset."""
        if self.phase != RECORDING:
            self.not_recording("update_buffer")
        cdef Py_ssize_t index = self.count
        cdef BufferRef t = self.check_ref(target, index, "update_buffer", "target", -1, TARGET)
        view = bytes_view(data, f"command {index} (update_buffer): data")
        cdef Py_ssize_t n = view.nbytes
        if not 0 < n <= MAX_UPDATE_BYTES:
            raise ValidationError(f"command {index} (update_buffer): data has {n} bytes; it must hold "
                                  f"1 to {MAX_UPDATE_BYTES} (use a staging buffer and copy_buffer for more)")
        if t.bounded and n > t.nbytes:
            raise ValidationError(f"command {index} (update_buffer): {n} bytes of data do not fit the "
                                  f"target range of {t.nbytes} bytes at offset {t.offset}")
        cdef Py_ssize_t align = self.update_alignment
        if t.offset % align or n % align:
            raise ValidationError(f"command {index} (update_buffer): target offset {t.offset} and data size {n} "
                                  f"must be multiples of the device's update_buffer_alignment {align}")
        if not t.bounded or t.nbytes != n:
            t = BufferRef(t.buffer, t.slot, t.offset, n)
        self.record(new_update(index, self.barriers, t, view.tobytes()), (t,), _WRITE)

    def copy_buffer(self, source: Buffer | BufferRef, target: Buffer | BufferRef) -> None:
        """Copy the source range (or, for a slot of unknown length, the target range's length)."""
        if self.phase != RECORDING:
            self.not_recording("copy_buffer")
        cdef Py_ssize_t index = self.count
        cdef BufferRef s = self.check_ref(source, index, "copy_buffer", "source", -1, SOURCE)
        cdef BufferRef t = self.check_ref(target, index, "copy_buffer", "target", -1, TARGET)
        if not s.bounded and not t.bounded:
            raise ValidationError(f"command {index} (copy_buffer): both ranges are slots of unknown length; "
                                  f"give one a length: hal.slot(i, offset, length)")
        cdef Py_ssize_t n = s.nbytes if s.bounded else t.nbytes
        if n == 0:
            raise ValidationError(f"command {index} (copy_buffer): the source range is empty")
        if t.bounded and n > t.nbytes:
            raise ValidationError(f"command {index} (copy_buffer): {n} source bytes do not fit the target "
                                  f"range of {t.nbytes} bytes at offset {t.offset}")
        cdef Py_ssize_t align = self.copy_alignment
        if s.offset % align or t.offset % align or n % align:
            raise ValidationError(f"command {index} (copy_buffer): offsets {s.offset}, {t.offset} and length {n} "
                                  f"must be multiples of the device's copy_buffer_alignment {align}")
        if s.buffer is t.buffer and s.slot == t.slot and s.offset < t.offset + n and t.offset < s.offset + n:
            raise ValidationError(f"command {index} (copy_buffer): source [{s.offset}, {s.offset + n}) and target "
                                  f"[{t.offset}, {t.offset + n}) overlap in one buffer; copy through a second buffer")
        if not s.bounded or s.nbytes != n:
            s = BufferRef(s.buffer, s.slot, s.offset, n)
        if not t.bounded or t.nbytes != n:
            t = BufferRef(t.buffer, t.slot, t.offset, n)
        self.record(new_copy(index, self.barriers, s, t), (s, t), _READ_WRITE)

    def execution_barrier(self) -> None:
        """Everything recorded after waits for everything recorded before."""
        if self.phase != RECORDING:
            self.not_recording("execution_barrier")
        self.barriers += 1
        self.segment_start = len(self.sequence)

    def dispatch(self, executable: Executable, name: str, workgroups: Any = (1, 1, 1),
                 constants: Sequence[Any] = (), bindings: Sequence[Buffer | BufferRef] = ()) -> None:
        """Run export `name` over `workgroups` with 32-bit `constants` and buffer `bindings`."""
        if self.phase != RECORDING:
            self.not_recording("dispatch")
        self.add_dispatch("dispatch", executable, name, workgroups, constants, bindings, None, False)

    def dispatch_indirect(self, executable: Executable, name: str, parameters: Buffer | BufferRef,
                          constants: Sequence[Any] = (), bindings: Sequence[Buffer | BufferRef] = (),
                          dynamic: bool = False) -> None:
        """Run export `name` over the workgroup counts found at `parameters`: three uint32 (x, y, z) at a 4-byte
        aligned reference of at least 12 bytes (a slot is allowed). A zero count runs nothing; counts above the
        device's max_workgroup_count run nothing and fail the work (DeviceError).

        `dynamic=False`: the counts are read when the submission starts to run (after its waits), so they may not
        be written by an earlier command of this command buffer. `dynamic=True`: earlier commands may write them
        (across a barrier or a dependency); they count as a read in dependency and race analysis either way."""
        if self.phase != RECORDING:
            self.not_recording("dispatch_indirect")
        cdef Py_ssize_t index = self.count
        if not isinstance(dynamic, bool):
            raise ValidationError(f"command {index} (dispatch_indirect {name}): dynamic must be True or False, "
                                  f"got {dynamic!r}")
        cdef BufferRef p = self.check_parameters(parameters, index, name)
        if not p.bounded or p.nbytes != 12:
            p = BufferRef(p.buffer, p.slot, p.offset, 12)
        if not dynamic:
            if self.levels:
                self.uses_slot = False
                raise ValidationError(f"command {index} (dispatch_indirect {name}): inside while_nonzero or if_nonzero "
                                      f"the counts must be dynamic=True (read when the dispatch runs, each time)")
            self.check_static_parameters(p, index, name)
        self.add_dispatch("dispatch_indirect", executable, name, (1, 1, 1), constants, bindings, p, dynamic)

    cdef BufferRef check_parameters(self, object parameters, Py_ssize_t index, str name):
        """Check a dispatch_indirect's parameters reference: 12 bytes or more at a 4-byte aligned offset of a
        buffer with DISPATCH_STORAGE usage (the GPU backends' guard reads them as storage), or of a slot."""
        # Any usage passes check_ref (which also skips the storage offset alignment); the usage is checked below.
        cdef BufferRef p = self.check_ref(parameters, index, "dispatch_indirect", "parameters", -1, ANY)
        if p.offset % 4 or (p.bounded and p.nbytes < 12):
            raise ValidationError(f"command {index} (dispatch_indirect {name}): parameters at offset {p.offset} "
                                  f"with length {p.length} must be 4-byte aligned and hold at least 12 bytes "
                                  f"(three uint32 workgroup counts)")
        if p.buffer is not None and not p.buffer.usage_bits & STORAGE:
            raise ValidationError(f"command {index} (dispatch_indirect {name}): parameters lack "
                                  f"BufferUsage.DISPATCH_STORAGE (the buffer was allocated with {p.buffer.usage!r})")
        return p

    cdef void check_static_parameters(self, BufferRef p, Py_ssize_t index, str name) except *:
        """Static counts are read when the submission starts: refuse them if an earlier command writes them
        (the same buffer, or the same slot, overlapping)."""
        cdef BufferRef r
        for c in self.sequence:
            refs, writes = refs_and_writes(c)
            for i in range(len(refs)):
                r = refs[i]
                if writes[i] and r.buffer is p.buffer and (r.buffer is not None or r.slot == p.slot) and \
                        r.offset < p.offset + 12 and (not r.bounded or p.offset < r.offset + r.nbytes):
                    raise ValidationError(
                        f"command {index} (dispatch_indirect {name}): its parameters [{p.offset}, "
                        f"{p.offset + 12}) are written by command {(<Command>c).index} ({c.kind}) of this "
                        f"command buffer, but static counts are read when the submission starts; pass "
                        f"dynamic=True to read what earlier commands write")

    cdef void add_dispatch(self, str command, object executable, object name, object workgroups, object constants,
                           object bindings, BufferRef parameters, bint dynamic) except *:
        """Check and record a dispatch (`command`: "dispatch", or "dispatch_indirect" with its `parameters`)."""
        cdef Py_ssize_t index = self.count, i
        cdef Entry entry = None
        cdef dict entries = (<Entries>executable).entries if isinstance(executable, Entries) else None
        if entries is not None and isinstance(name, str):  # (a name of another type names no export)
            entry = entries.get(name)
        if entry is None or entry.device is not self.device:
            _bad_export(executable, name, self.device, index, command)
        if not (type(workgroups) is tuple and len(<tuple>workgroups) == 3 and self.workgroups_fit(workgroups)):
            workgroups = _workgroups(workgroups, index, name, (self.max_groups_x, self.max_groups_y,
                                                               self.max_groups_z))
            self.workgroups_fit(workgroups)  # (they do now: it keeps them in `groups`)
        if type(constants) is not tuple:
            constants = _sequence(constants, index, name, "constants", command)
        cdef Py_ssize_t n = len(<tuple>constants)
        if n != entry.constants:
            raise ValidationError(f"command {index} ({command} {name}): {n} constants given, "
                                  f"the export takes {entry.constants}")
        if 4 * n > self.max_constant_bytes:
            raise ValidationError(f"command {index} ({command} {name}): {4 * n} bytes of constants "
                                  f"exceed the device's max_push_constants_size {self.max_constant_bytes}")
        cdef bint constant_slots = False
        cdef bint hidden = parameters is None  # from the collector (hal.commands.hide_from_collector)
        self.words.resize(n)
        for i in range(n):
            if not _plain_word((<tuple>constants)[i], &self.words[i]):
                constant_slots = _check_constants(constants, index, name, self.constant_capacity, command)
                hidden = False
                break
        if type(bindings) is not tuple:
            bindings = _sequence(bindings, index, name, "bindings", command)
        n = len(<tuple>bindings)
        if n != entry.bindings:
            raise ValidationError(f"command {index} ({command} {name}): {n} bindings given, "
                                  f"the export takes {entry.bindings}")
        cdef tuple resolved = PyTuple_New(n)  # filled below: a tuple built in place, not from a list
        cdef BufferRef r
        cdef bint buffers = True  # every binding a buffer, none a slot
        self.ranges.resize(n)
        for i in range(n):
            r = self.check_ref((<tuple>bindings)[i], index, command, None, i, STORAGE)
            Py_INCREF(r)  # PyTuple_SET_ITEM steals a reference
            PyTuple_SET_ITEM(resolved, i, r)
            if r.buffer is None:
                buffers = False
            elif r.buffer.device is not self.device:
                hidden = False  # a transient, whose device is a command buffer
            else:
                self.ranges[i].handle, self.ranges[i].offset, self.ranges[i].size = r.buffer.handle, r.offset, r.nbytes
        cdef Dispatch d = new_dispatch(index, self.barriers, executable, entry, workgroups, constants, resolved,
                                       parameters, dynamic)
        if hidden:
            hide_from_collector(d)
            if buffers and self.emitter.reads_arguments:
                with_arguments(d, self.groups, self.ranges.data(), self.words.data())
        if parameters is None:
            self.record(d, d.bindings, d.writes)
        else:
            self.record(d, d.bindings + (parameters,), d.writes + (False,))
            self.indirect_commands.append(index)
        if constant_slots:
            self.constant_commands.append(d)

    cdef bint workgroups_fit(self, tuple workgroups):
        """The common case: three ints within the device's limits, then kept in `groups` (anything else takes
        _workgroups' path)."""
        cdef long long x = 0, y = 0, z = 0
        if _int_within(workgroups[0], 1, self.max_groups_x, &x) and \
                _int_within(workgroups[1], 1, self.max_groups_y, &y) and \
                _int_within(workgroups[2], 1, self.max_groups_z, &z):
            self.groups[0], self.groups[1], self.groups[2] = x, y, z
            return True
        return False

    cdef BufferRef check_ref(self, object r, Py_ssize_t index, str command, str name, Py_ssize_t binding, int usage):
        """Check reference `r` for use as `name` of command `index` (None: as its bindings[binding]); returns it as a
        BufferRef. Each refusal is raised by `_refuse` (or `_check_range`), off the common path."""
        cdef BufferRef ref
        if type(r) is BufferRef:
            ref = <BufferRef>r
        elif isinstance(r, Buffer):
            ref = (<Buffer>r).whole
        else:
            _refuse(index, command, name, binding, f"must be a hal.Buffer or a reference from hal.ref()/hal.slot(), "
                                                   f"got {type(r).__name__}")
        cdef Buffer b = ref.buffer
        if b is None:
            return self.check_slot_ref(ref, index, command, name, binding, usage)
        # A transient's device is its command buffer (or, for execute_commands' scratch, the outer one).
        if b.device is not self.device and b.device is not self and b.device is not self.transients_of:
            _refuse(index, command, name, binding, _foreign(b))
        if b.released:
            _refuse(index, command, name, binding, "is a released buffer")
        if ref.nbytes <= 0 or ref.offset + ref.nbytes > b.size or not b.usage_bits & usage or (
                usage == STORAGE and (ref.offset % self.storage_alignment or ref.nbytes > self.max_storage_range)):
            _check_range(ref.offset, ref.nbytes, b, self.caps, index, command, _name(name, binding), usage)
        return ref

    cdef BufferRef check_slot_ref(self, BufferRef ref, Py_ssize_t index, str command, str name, Py_ssize_t binding,
                                  int usage):
        """check_ref's part for a slot reference (resolved through the binding table at each submit)."""
        if ref.slot >= self.binding_capacity:
            _refuse(index, command, name, binding, f"uses slot {ref.slot}, but the command buffer's binding_capacity "
                                                   f"is {self.binding_capacity}")
        if ref.bounded and ref.nbytes <= 0:
            _refuse(index, command, name, binding, f"has offset {ref.offset} and length {ref.nbytes}; the length must "
                                                   f"be > 0")
        if usage == STORAGE and ref.offset % self.storage_alignment:
            _refuse(index, command, name, binding, f"offset {ref.offset} is not a multiple of the device's "
                                                   f"storage_buffer_offset_alignment {self.storage_alignment}")
        self.uses_slot = True
        return ref

    # Collectives (hal.communicator).
    def all_reduce(self, communicator: Communicator, source: Buffer | BufferRef, target: Buffer | BufferRef,
                   dtype: Any, op: str = "sum") -> None:
        """Every rank's `target` gets the reduction (`op`: sum, prod, max, min, avg) of all ranks' `source`
        (elements of `dtype`; the ranges are the same size; in place when they are the same range)."""
        self.add_collective("all_reduce", communicator, source, target, dtype, op, None, None)

    def all_gather(self, communicator: Communicator, source: Buffer | BufferRef, target: Buffer | BufferRef,
                   dtype: Any) -> None:
        """Every rank's `target` gets all ranks' `source`, in rank order (`target` holds size x `source`)."""
        self.add_collective("all_gather", communicator, source, target, dtype, None, None, None)

    def reduce_scatter(self, communicator: Communicator, source: Buffer | BufferRef, target: Buffer | BufferRef,
                       dtype: Any, op: str = "sum") -> None:
        """Rank r's `target` gets part r of the reduction of all ranks' `source` (size x `target`)."""
        self.add_collective("reduce_scatter", communicator, source, target, dtype, op, None, None)

    def broadcast(self, communicator: Communicator, source: Buffer | BufferRef | None, target: Buffer | BufferRef,
                  root: int) -> None:
        """Every rank's `target` gets rank `root`'s `source` (bytes; other ranks may pass source=None)."""
        self.add_collective("broadcast", communicator, source, target, "uint8", None, root, None)

    def send(self, communicator: Communicator, source: Buffer | BufferRef, peer: int) -> None:
        """Send `source` to rank `peer`, whose matching recv receives it. On NCCL a send may wait for its recv:
        ranks that both send and receive use send_recv."""
        self.add_collective("send", communicator, source, None, "uint8", None, peer, None)

    def recv(self, communicator: Communicator, target: Buffer | BufferRef, peer: int) -> None:
        """Receive into `target` what rank `peer` sends (the same number of bytes)."""
        self.add_collective("recv", communicator, None, target, "uint8", None, peer, None)

    def send_recv(self, communicator: Communicator, source: Buffer | BufferRef, peer: int,
                  target: Buffer | BufferRef, source_peer: int) -> None:
        """Send `source` to rank `peer` and receive as many bytes from rank `source_peer` into `target`, as one
        operation (a ring shift or a pairwise exchange, which separate send and recv would deadlock)."""
        self.add_collective("send_recv", communicator, source, target, "uint8", None, peer, source_peer)

    cdef void add_collective(self, str operation, object communicator, object source, object target, object dtype,
                             object reduction, object peer, object source_peer) except *:
        if self.phase != RECORDING:
            self.not_recording(operation)
        cdef Py_ssize_t index = self.count
        cdef BufferRef s = None, t = None, order
        try:
            if self.levels:
                raise ValidationError(f"command {index} ({operation}): collectives cannot be recorded inside "
                                      f"while_nonzero or if_nonzero yet; record them outside the region")
            if source is not None:
                s = self.check_ref(source, index, operation, "source", -1, ANY)
            if target is not None:
                t = self.check_ref(target, index, operation, "target", -1, ANY)
            details = check_collective(operation, communicator, self.device, s, t, dtype, reduction, peer,
                                       source_peer, index)
            order = communicator.order_ref(self.device)
            for other in self.sequence[self.segment_start:]:
                if type(other) is Collective and (<Collective>other).communicator is communicator:
                    raise ValidationError(
                        f"command {index} ({operation}): command {(<Command>other).index} ({other.kind}) uses the same "
                        f"communicator in this segment; its collectives run one at a time in recording order on "
                        f"every rank: put an execution_barrier between them (send_recv exchanges in one command)")
        except BaseException:
            self.uses_slot = False
            raise
        cdef Collective collective = new_collective(index, self.barriers, communicator, operation, s, t, order,
                                                    details)
        refs, writes = refs_and_writes(collective)
        self.record(collective, refs, writes)
        self.collective_commands.append(index)

    # Transient memory (hal.transients).
    def alloca(self, nbytes: int) -> BufferRef:
        """A reference to `nbytes` of memory that lives for one execution of this command buffer (contents
        undefined at its start): the commands of this command buffer use it like a buffer. At end(), transients
        whose lifetimes cannot overlap share memory (`transient_bytes`: the peak); a single_pass command buffer,
        whose commands the backend takes as they come, gives each its own memory."""
        if self.phase != RECORDING:
            self.not_recording("alloca")
        nbytes = integer(nbytes, "alloca: nbytes", 1, self.max_storage_range)
        if self.single_pass:
            buffer = self.device.allocate(nbytes)
        else:
            buffer = Transient(self, nbytes)
        self.transients.append(buffer)
        return buffer.whole

    @property
    def transient_bytes(self) -> int:
        """The memory the transients (alloca) of the ended recording take: the peak of the shared arena."""
        if self.phase != ENDED:
            raise ValidationError(f"transient_bytes: the command buffer is {self.state}; call end() first")
        if self.single_pass:
            return sum([b.size for b in self.transients])
        return 0 if self.transient_plan is None else self.transient_plan.peak

    cdef void release_transients(self):
        """Give the transients' memory back, once the work submitted so far is done with it."""
        if self.transient_plan is not None and self.transient_plan.arena is not None:
            self.transient_plan.arena.release()
        for buffer in self.transients:
            if not isinstance(buffer, Transient):  # single_pass: memory of its own
                buffer.release()

    # Nesting (hal.nesting).
    def execute_commands(self, other: CommandBuffer, binding_table: Sequence[Buffer | BufferRef] = ()) -> None:
        """Record the commands of `other`, an ended reusable command buffer of this device, here as it holds them
        now, between two execution barriers: its slot i is `binding_table[i]` (a buffer, a hal.ref() or a
        hal.slot() of this command buffer), its constant slots are this one's. All or nothing: a command refused
        leaves this command buffer as it was."""
        if self.phase != RECORDING:
            self.not_recording("execute_commands")
        if not isinstance(other, CommandBuffer):
            raise ValidationError(f"execute_commands: expected a hal.CommandBuffer, got {type(other).__name__}")
        table = Resolver(check_nested(self, other, binding_table))
        commands = other.program.commands
        scratch = self.device.create_command_buffer(
            mode="one_shot", binding_capacity=self.binding_capacity, strategy="deferred",
            dependencies=self.dependencies, validate=self.validate, constant_capacity=self.constant_capacity)
        scratch.begin()
        (<CommandBuffer>scratch).transients_of = self  # the table may bind this one's transients
        try:
            replay(scratch, commands, table)
            # The scratch sees only the nested commands: static counts must not be written by this one's, either.
            for i in other.program.indirect:
                if not commands[i].dynamic:
                    self.check_static_parameters(table(commands[i].parameters), i,
                                                 commands[i].export.name)
        except ValidationError as e:
            raise ValidationError(f"execute_commands: in the nested command buffer, {e}") from None
        self.execution_barrier()
        start = self.count
        replay(self, commands, table)
        if self.count > start:
            self.nested_commands.append((start, self.count))
        self.execution_barrier()

    # Regions.
    def while_nonzero(self, condition: Buffer | BufferRef) -> RegionScope:
        """`with cb.while_nonzero(ref):` records a loop: its commands run while the uint32 at `ref` (4-byte
        aligned; a slot is allowed) is non-zero, checked before each iteration. The commands before the region
        happen before it and the commands after it wait for it (it sits between two execution barriers);
        barriers inside work as anywhere; regions nest. An exception leaving the `with` block (a command
        rejected inside, say) drops the whole region. Inside, commands are numbered from 0 (in messages too), and
        dispatch_indirect counts must be dynamic."""
        return RegionScope(self, True, self.check_condition(condition, "while_nonzero"))

    def if_nonzero(self, condition: Buffer | BufferRef) -> RegionScope:
        """`with cb.if_nonzero(ref):` records commands that run once if the uint32 at `ref` is non-zero when the
        region is reached (see while_nonzero)."""
        return RegionScope(self, False, self.check_condition(condition, "if_nonzero"))

    @property
    def regions_open(self) -> int:
        """How many regions are open where the next command is recorded."""
        return len(self.levels)

    cdef BufferRef check_condition(self, object condition, str what):
        if self.phase != RECORDING:
            self.not_recording(what)
        cdef Py_ssize_t index = self.count
        cdef BufferRef r = self.check_ref(condition, index, what, "condition", -1, ANY)  # usage: below
        self.uses_slot = False  # the region's slots are found from its refs when it closes
        if r.offset % 4 or (r.bounded and r.nbytes < 4):
            raise ValidationError(f"command {index} ({what}): the condition at offset {r.offset} with length "
                                  f"{r.length} must be a 4-byte aligned uint32")
        if r.buffer is not None and not r.buffer.usage_bits & STORAGE:
            raise ValidationError(f"command {index} ({what}): the condition lacks BufferUsage.DISPATCH_STORAGE (the "
                                  f"buffer was allocated with {r.buffer.usage!r})")
        return r if r.bounded and r.nbytes == 4 else BufferRef(r.buffer, r.slot, r.offset, 4)

    def _open_region(self, bint loop, BufferRef condition) -> int:
        """Begin a region's body (`condition` checked by check_condition): after a barrier, a level of its own
        (segments, indices from 0, race checks); returns the number of open regions, this one included."""
        if self.phase != RECORDING:
            self.not_recording("while_nonzero" if loop else "if_nonzero")
        self.execution_barrier()
        self.levels.append((self.sequence, self.segment_start, self.count, self.barriers, self.races,
                            self.slot_commands, self.constant_commands, self.indirect_commands, self.region_commands,
                            self.nested_commands, loop, condition))
        self.sequence = []
        self.count = self.barriers = self.segment_start = 0
        self.races = RaceDetector()
        self.slot_commands, self.constant_commands, self.indirect_commands, self.region_commands = [], [], [], []
        self.nested_commands = []
        return len(self.levels)

    def _close_region(self, bint keep) -> None:
        """End the innermost region's body; `keep`: record it as one command of the enclosing level (else it is
        dropped, as after an error inside). A kept region must hold a command."""
        if not self.levels:
            raise ValidationError("no region is open here (the command buffer was reset or ended inside it)")
        cdef tuple commands = tuple(self.sequence)
        body_slots, body_constants, body_indirect, body_regions, body_nested = (
            self.slot_commands, self.constant_commands, self.indirect_commands, self.region_commands,
            self.nested_commands)
        (self.sequence, self.segment_start, self.count, self.barriers, self.races, self.slot_commands,
         self.constant_commands, self.indirect_commands, self.region_commands, self.nested_commands, loop,
         condition) = self.levels.pop()
        what = "while_nonzero" if loop else "if_nonzero"
        if not keep:
            return
        if not commands:
            raise ValidationError(f"command {self.count} ({what}): the region holds no command; record one in it "
                                  f"or leave the region out")
        planner = Planner(self.dependencies, self.emitter.lanes, False, self.emitter.graph_layout)
        planner.plan(commands)
        slot_users, constant_users = _users(body_slots, body_constants)
        body = planner.finish(commands, slot_users, _needed(slot_users), constant_users, _needed(constant_users),
                              tuple(body_indirect), tuple(body_regions), (), tuple(body_nested))
        accessed = {(condition, False): None}
        for c in commands:
            refs, writes = refs_and_writes(c)
            accessed.update(dict.fromkeys(zip(refs, writes)))
        refs = tuple([r for r, _ in accessed])
        writes = tuple([w for _, w in accessed])
        cdef Region region = new_region(self.count, self.barriers, loop, condition, body, refs, writes)
        self.uses_slot = any([(<BufferRef>r).buffer is None for r in refs])
        self.record(region, refs, writes)
        self.region_commands.append(region.index)
        if constant_users:
            self.constant_commands.append(region)
        self.execution_barrier()

    cdef void record(self, Command command, tuple refs, tuple writes) except *:
        """Append `command`, which accesses `refs` (`writes`: which it writes), to the current segment once it
        is known not to race; a single_pass command buffer plans it and hands it to the emitter."""
        cdef list commands = self.sequence
        cdef Py_ssize_t earlier = len(commands) - self.segment_start  # of the current segment
        if earlier and self.validate:  # the first command of a segment cannot race
            if earlier == 1:  # the second command: index the first, forgetting the last segment
                self.races.rebuild(commands, self.segment_start)
            self.races.add(command, refs, writes, commands, self.segment_start)
        if self.single_pass and not self.levels:  # a region's body is planned when the region closes
            self.planner.add(command)
            self.emitter.command(self.recorded, command)
        commands.append(command)
        if self.uses_slot:
            self.slot_commands.append(command)
            self.uses_slot = False
        self.count += 1

    cdef void not_recording(self, str what) except *:
        hint = "call begin() first" if self.phase == INITIAL else "call reset() to record it again"
        raise ValidationError(f"command {self.count} ({what}): the command buffer is {self.state}, "
                              f"not recording; {hint}")

    # Submission (Device.queue_execute calls these).
    cpdef bint accepts(self, object table, object token):
        """Would a submission with `table` pass every check now without a look? Yes for a reusable command
        buffer submitted again with the very table it was last checked with, nothing released since."""
        return table is self.table and token is self.table_token

    def submitted(self) -> None:
        """Note a submission (a one_shot command buffer runs once: its transients go once that run is done)."""
        self.ran = True
        if self.transients and self.mode == "one_shot":
            self.release_transients()

    def prepare_submit(self, binding_table: Sequence[Buffer]) -> tuple:
        """Check the command buffer can run against `binding_table`; returns the table as a tuple."""
        if self.phase != ENDED:
            raise ValidationError(f"queue_execute: the command buffer is {self.state}; call end() before submitting")
        if self.ran and self.mode == "one_shot":
            raise ValidationError("queue_execute: a one_shot command buffer runs once; create it with "
                                  "mode='reusable' to submit it again")
        table = binding_table if type(binding_table) is tuple else _table(binding_table)
        token = self.device.release_token
        last = self.table
        if token is self.table_token and _same_entries(table, last):
            return table
        self.check_table(table, token)
        self.table = table
        if self.mode == "reusable":  # accepted again without a look (see `accepts`)
            self.table_token = token
        return table

    def prepare_constants(self, constants: Sequence[Any]) -> tuple:
        """Check the values given for the constant slots at a submit (as literal constants are checked when
        recorded); returns them as a tuple."""
        cdef uint32_t word
        values = constants if type(constants) is tuple else _constant_values(constants)
        if len(values) > self.constant_capacity:
            raise ValidationError(f"queue_execute: {len(values)} constants given, more than the command buffer's "
                                  f"constant_capacity {self.constant_capacity}")
        if len(values) < self.constants_needed:
            raise ValidationError(f"queue_execute: {len(values)} constants given; the command buffer needs "
                                  f"{self.constants_needed} (it reads constant slot {self.constants_needed - 1})")
        for i, value in enumerate(values):
            if not _plain_word(value, &word):
                try:
                    constant_word(value)
                except (TypeError, OverflowError) as e:
                    raise ValidationError(f"queue_execute: constants[{i}] = {value!r}: {e}") from None
        return values

    cdef void check_table(self, tuple table, object token) except *:
        """Check `table` against the recording. `token`: the device's release token, read once by the caller, so
        every check of one submission answers for the same moment."""
        if len(table) > self.binding_capacity:
            raise ValidationError(f"queue_execute: the binding table has {len(table)} entries, more than the "
                                  f"command buffer's binding_capacity {self.binding_capacity}")
        if len(table) < self.slots_needed:
            raise ValidationError(f"queue_execute: the binding table has {len(table)} entries; the command "
                                  f"buffer uses slots up to {self.slots_needed - 1}")
        cdef Py_ssize_t i, n = self.slots_needed
        for i in range(len(table)):
            b = table[i]
            if not isinstance(b, Buffer):
                raise ValidationError(f"queue_execute: binding_table[{i}] must be a hal.Buffer, got {type(b).__name__}")
            if (<Buffer>b).device is not self.device:
                raise ValidationError(f"queue_execute: binding_table[{i}] {_foreign(b)}")
            if (<Buffer>b).released:
                raise ValidationError(f"queue_execute: binding_table[{i}] is a released buffer")
        self.check_released("queue_execute", self.recorded.commands, token)
        if not self.slot_commands:
            return
        segment_of, direct = self.slot_index or self.index_slots()
        users = self.recorded.slot_users
        commands = self.recorded.commands
        cdef tuple last = self.table if self.table_token is token else ()
        cdef vector[Py_ssize_t] changed  # the slots whose buffer changed since the last table
        for i in range(n):
            if i >= len(last) or table[i] is not last[i]:
                changed.push_back(i)
        if changed.empty() or _same_answers(table, last, n, changed, direct):
            return
        seen = {}  # the commands using a slot whose buffer changed since the last table
        for i in changed:
            seen.update(dict.fromkeys(users.get(i, ())))
        segments = set()
        for index in seen:
            c = commands[index]
            _check_slot_command(c, table, self.caps)
            segments.add((<Command>c).segment)
        if self.validate:
            for index in segments:
                _check_races(segment_of[index], table)
            for index in seen:
                if type(commands[index]) is Region:  # alone in its segment; its body's segments may race
                    _check_body_races(<Region>commands[index], table)

    cdef tuple index_slots(self):
        """The segments holding slot commands, and the buffers bound without a slot: so a new table re-checks
        only the commands of the slots whose buffer changed."""
        wanted = {(<Command>c).segment for c in self.slot_commands}
        segment_of = {index: commands for index, commands in _segments_of(self.recorded.commands).items()
                      if index in wanted}
        self.slot_index = (segment_of, frozenset(self.direct(self.recorded.commands)))
        return self.slot_index

    cdef tuple direct(self, tuple commands):
        """The buffers the commands bind without a slot."""
        if self.direct_buffers is None:
            found = {}
            for c in commands:
                for r in refs_and_writes(c)[0]:
                    found[(<BufferRef>r).buffer] = None
            found.pop(None, None)  # slot references
            self.direct_buffers = tuple(found)
        return self.direct_buffers

    cdef void check_released(self, str what, tuple commands, object token) except *:
        """Refuse a recording that uses a buffer or an executable released since it was recorded (each
        reference was checked as it was recorded: only a release since then can matter); `token`: the device's
        release token now."""
        if token is self.live_token:
            return
        for i in self.collective_commands:  # a closed communicator released its order tokens
            if (<Collective>commands[i]).communicator.closed:
                raise ValidationError(f"{what}: command {i} ({commands[i].kind}) uses a communicator that was closed "
                                      f"after recording; record the command buffer again with an open one")
        for b in self.direct(commands):
            if (<Buffer>b).released:
                user = next(c.index for c in commands for r in refs_and_writes(c)[0] if (<BufferRef>r).buffer is b)
                raise ValidationError(f"{what}: command {user} uses a buffer that was released after recording; "
                                      f"record the command buffer again")
        if self.dispatched is None:
            self.dispatched = {}
            for c in _dispatches(commands):
                self.dispatched.setdefault((<Dispatch>c).executable, (<Dispatch>c).index)
        for exe, user in self.dispatched.items():
            if exe.released:
                raise ValidationError(f"{what}: command {user} dispatches an executable that was released after "
                                      f"recording; record the command buffer again")
        self.live_token = token


cdef inline bint _int_within(object value, long long low, long long high, long long* got=NULL):
    """Is `value` an int (not a subclass) from `low` to `high`? If so and `got` is given, it is set to it."""
    cdef int overflow = 0
    if type(value) is not int:
        return False
    cdef long long v = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow or not low <= v <= high:
        return False
    if got != NULL:
        got[0] = v
    return True


cdef int _plain_word(object c, uint32_t* word) except -1:
    """Is `c` a constant that is certainly a valid 32-bit word (an int in range, or a float within float32's range)?
    If so, `word` is set to it."""
    cdef long long n = 0
    cdef double v
    if type(c) is int:
        if not _int_within(c, -2147483648, 4294967295, &n):
            return False
        word[0] = <uint32_t>n
        return True
    if type(c) is float:
        v = c
        if -FLOAT32_MAX <= v <= FLOAT32_MAX or isinf(v) or isnan(v):
            word[0] = checked_word(c)
            return True
    return False


def _check_slot_command(Command c, tuple table, caps) -> None:
    """The record-time reference checks, for the slot references of `c` resolved through `table`."""
    if type(c) is Region:  # its condition, then the body's commands that use a slot
        _check_slot_condition(<Region>c, table)
        body = (<Region>c).body
        for index in sorted({i for users in body.slot_users.values() for i in users}):
            _check_slot_command(body.commands[index], table, caps)
        return
    ranges = []
    refs, writes = refs_and_writes(c)
    cdef BufferRef r
    for i in range(len(refs)):
        r = refs[i]
        write = writes[i]
        key, start, end = access_range(r, table)
        if r.buffer is None:
            usage = STORAGE if c.kind == "dispatch" else ANY if type(c) is Collective else (TARGET if write else SOURCE)
            parameters = c.kind == "dispatch" and i == len((<Dispatch>c).bindings)  # dispatch_indirect's counts
            if not (0 <= start < end <= key.size and key.usage_bits & usage and (usage != STORAGE or parameters or (
                    start % caps.storage_buffer_offset_alignment == 0
                    and end - start <= caps.max_storage_buffer_range))):
                arg = f"slot {r.slot} (binding_table[{r.slot}])"  # the message, on the failing path only
                if parameters:
                    arg = f"parameters = {arg}"
                elif usage == STORAGE:
                    arg = f"bindings[{i}] = {arg}"
                try:
                    _check_range(start, end - start, key, caps, c.index, c.kind, arg, usage)
                except ValidationError as e:
                    raise ValidationError(f"queue_execute: {e}") from None
            if c.kind == "fill" and (end - start) % max(len((<Fill>c).pattern), caps.fill_buffer_alignment):
                raise ValidationError(f"queue_execute: command {c.index} (fill_buffer) fills {end - start} bytes "
                                      f"of slot {r.slot}, not a multiple of the pattern and fill alignment")
        ranges.append((key, start, end))
    if c.kind == "copy" and ranges[0][0] is ranges[1][0] and \
            ranges[0][1] < ranges[1][2] and ranges[1][1] < ranges[0][2]:
        raise ValidationError(f"queue_execute: command {c.index} (copy_buffer) copies between overlapping "
                              f"ranges of one buffer through the binding table")
    if type(c) is Collective and (<Collective>c).source is not None and (<Collective>c).target is not None and \
            not same_or_disjoint(c.operation, ranges[0], ranges[1]):
        raise ValidationError(f"queue_execute: command {c.index} ({c.kind}): through the binding table its source "
                              f"and target ranges overlap; they must be the same range (in place: all_reduce, "
                              f"broadcast) or disjoint")


def _check_races(list segment, tuple table) -> None:
    """Raise the race among the commands of one segment, their slots resolved through `table`, if any."""
    if len(segment) < 2:  # a lone command cannot race
        return
    cdef RaceDetector races = RaceDetector()
    for c in segment:
        refs, writes = refs_and_writes(c)
        races.add(c, refs, writes, segment, 0, table)


def _check_body_races(Region region, tuple table) -> None:
    """_check_races for each segment of a region's body, and of the regions inside it."""
    for c in region.body.commands:
        if type(c) is Region:
            _check_body_races(<Region>c, table)
    for segment in _segments_of(region.body.commands).values():
        _check_races(segment, table)


cdef dict _segments_of(commands):
    """Each segment's commands (a list) by its count of barriers, in recording order (a segment's commands are
    consecutive, and the count grows from one segment to the next); `commands`: a list or tuple, in recording
    order."""
    cdef dict found = {}
    for c in commands:
        found.setdefault((<Command>c).segment, []).append(c)
    return found


def _check_slot_condition(Region c, tuple table) -> None:
    cdef BufferRef r = c.condition
    if r.buffer is None:
        b = <Buffer>table[r.slot]
        if r.offset + 4 > b.size or not b.usage_bits & STORAGE:
            raise ValidationError(f"queue_execute: command {c.index} ({c.kind}): the condition = slot {r.slot} "
                                  f"(binding_table[{r.slot}]) needs 4 bytes at offset {r.offset} of a buffer with "
                                  f"DISPATCH_STORAGE usage; the buffer bound has {b.size} bytes, usage {b.usage!r}")


def _check_range(Py_ssize_t offset, Py_ssize_t nbytes, Buffer b, caps, index, command, what, usage) -> None:
    """Every check of a range of `b` used as `what` (words for the message), raising the first that fails (the
    recorder calls this only on its failing path, to word the error)."""
    if nbytes <= 0 or offset + nbytes > b.size:
        raise ValidationError(f"command {index} ({command}): {what} range [{offset}, {offset + nbytes}) "
                              f"is empty or outside the buffer's {b.size} bytes")
    if not b.usage_bits & usage:
        raise ValidationError(f"command {index} ({command}): {what} lacks BufferUsage.{_USAGE_NAMES[usage]} "
                              f"(it was allocated with {b.usage!r})")
    if usage == STORAGE:
        if offset % caps.storage_buffer_offset_alignment:
            raise ValidationError(f"command {index} ({command}): {what} offset {offset} is not a multiple "
                                  f"of the device's storage_buffer_offset_alignment "
                                  f"{caps.storage_buffer_offset_alignment}")
        if nbytes > caps.max_storage_buffer_range:
            raise ValidationError(f"command {index} ({command}): {what} spans {nbytes} bytes, more than the "
                                  f"device's max_storage_buffer_range {caps.max_storage_buffer_range}")


cdef bint _same_entries(tuple table, tuple last):
    """Do the two tables hold the very same buffers?"""
    if table is last:
        return True
    if len(table) != len(last):
        return False
    for i in range(len(table)):
        if table[i] is not last[i]:
            return False
    return True


cdef bint _same_answers(tuple table, tuple last, Py_ssize_t n, vector[Py_ssize_t]& changed, frozenset direct):
    """Would every check of the slot commands answer for `table` as it did for `last` (their first n entries)?
    Yes when each changed slot holds a buffer of the same size and usage as before, no buffer used directly
    enters or leaves the table, and the slots alias each other as before (ranges, alignment and races depend
    on nothing else)."""
    cdef Buffer new, old
    if len(last) < n:
        return False
    for i in changed:
        new, old = table[i], last[i]
        if new.size != old.size or new.usage_bits != old.usage_bits or new in direct or old in direct:
            return False
    return n < 2 or _aliasing(table, n) == _aliasing(last, n)


cdef tuple _aliasing(tuple table, Py_ssize_t n):
    """Per slot of the first n, the first slot bound to the same buffer."""
    first = {}
    return tuple([first.setdefault(id(table[i]), i) for i in range(n)])


def _foreign(Buffer b) -> str:
    """What a buffer of another device, or a transient used outside its command buffer, is called in refusals."""
    if isinstance(b, Transient):
        return (f"is a transient (cb.alloca) of {b.device!r}: only that command buffer's own commands use it, "
                f"directly (not through a binding table)")
    return f"is a buffer of another device ({b.device!r})"


def _name(name, binding) -> str:
    return f"bindings[{binding}]" if name is None else name


def _refuse(index, command, name, binding, what) -> None:
    """Refuse reference `name` (None: bindings[binding]) of command `index`: it `what`."""
    raise ValidationError(f"command {index} ({command}): {_name(name, binding)} {what}")


def _bad_export(executable, name, device, index, command) -> None:
    if not isinstance(executable, Executable) or executable.device is not device:
        raise ValidationError(f"command {index} ({command}): executable must be a hal.Executable loaded "
                              f"on this device, got {executable!r}")
    if executable.released:
        raise ValidationError(f"command {index} ({command} {name}): the executable was released; load it again")
    raise ValidationError(f"command {index} ({command}): no export {name!r}; the executable has "
                          f"{', '.join(executable.entries)}")


def _check_constants(tuple constants, index, name, Py_ssize_t capacity, command) -> bool:
    """Check every constant (a 32-bit value or a constant slot below `capacity`); does one use a slot?"""
    slots = False
    for i, c in enumerate(constants):
        if type(c) is ConstantSlot:
            if (<ConstantSlot>c).index >= capacity:
                raise ValidationError(f"command {index} ({command} {name}): constants[{i}] uses constant slot "
                                      f"{(<ConstantSlot>c).index}, but the command buffer's constant_capacity is "
                                      f"{capacity}")
            slots = True
            continue
        try:
            constant_word(c)
        except (TypeError, OverflowError) as e:
            raise ValidationError(f"command {index} ({command} {name}): constants[{i}] = {c!r}: {e}") from None
    return slots


def _pattern(pattern, index) -> bytes:
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


def _workgroups(workgroups, index, name, limit) -> tuple:
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


def _sequence(items, index, name, what, command) -> tuple:
    if isinstance(items, (str, bytes)):
        raise ValidationError(f"command {index} ({command} {name}): {what} must be a sequence, "
                              f"got {type(items).__name__}")
    try:
        return tuple(items)
    except TypeError:
        raise ValidationError(f"command {index} ({command} {name}): {what} must be a sequence, "
                              f"got {type(items).__name__}") from None


def _users_by_slot(list uses) -> dict:
    """slot -> the commands using it, in recording order and each once, from (slot, command index) pairs in
    recording order."""
    users = {}
    for slot, index in uses:
        user = users.setdefault(slot, [])
        if not user or user[-1] != index:
            user.append(index)
    return {slot: tuple(user) for slot, user in users.items()}


def _constant_values(constants) -> tuple:
    """queue_execute's constants as a tuple: from a list, another sequence or a 1-d numpy array; not from a string,
    a mapping, a set or a lone value, whose order or meaning would be a guess."""
    if isinstance(constants, Sequence) and not isinstance(constants, (str, bytes, bytearray)) or \
            isinstance(constants, np.ndarray) and constants.ndim == 1:
        return tuple(constants)
    raise ValidationError(f"queue_execute: constants must be a sequence of 32-bit values (a tuple, list or 1-d "
                          f"numpy array), got {type(constants).__name__}")


def _table(binding_table) -> tuple:
    if isinstance(binding_table, Buffer):
        raise ValidationError("queue_execute: binding_table must be a sequence of buffers, got one buffer")
    try:
        return tuple(binding_table)
    except TypeError:
        raise ValidationError(f"queue_execute: binding_table must be a sequence of buffers, "
                              f"got {type(binding_table).__name__}") from None


class RegionScope:
    """What while_nonzero and if_nonzero return: entering opens the region, leaving closes it (an exception
    leaving the block drops the region and propagates). If the command buffer was reset inside, leaving does
    nothing."""

    __slots__ = ("cb", "loop", "condition", "depth")

    def __init__(self, cb: CommandBuffer, loop: bool, condition: BufferRef) -> None:
        self.cb, self.loop, self.condition, self.depth = cb, loop, condition, 0

    def __enter__(self) -> CommandBuffer:
        self.depth = self.cb._open_region(self.loop, self.condition)
        return self.cb

    def __exit__(self, exc_type, *exc) -> None:
        if self.cb.regions_open == self.depth:
            self.cb._close_region(exc_type is None)


cdef tuple _users(list slot_commands, list constant_commands):
    """slot -> the commands using it and constant slot -> the commands reading it (see _users_by_slot); a region
    uses the slots its body (or its condition) uses."""
    if not slot_commands and not constant_commands:
        return {}, {}
    slot_uses, constant_uses = [], []
    for c in slot_commands:
        for r in refs_and_writes(c)[0]:
            if (<BufferRef>r).buffer is None:
                slot_uses.append(((<BufferRef>r).slot, (<Command>c).index))
    for c in constant_commands:
        if type(c) is Region:
            constant_uses.extend([(slot, (<Command>c).index) for slot in sorted((<Region>c).body.constant_users)])
        else:
            constant_uses.extend([((<ConstantSlot>v).index, (<Command>c).index) for v in (<Dispatch>c).constants
                                  if type(v) is ConstantSlot])
    return _users_by_slot(slot_uses), _users_by_slot(constant_uses)


cdef Py_ssize_t _needed(dict users):
    """How many slots a table (or constants) must hold for `users`: 1 + the highest slot used."""
    return max(users) + 1 if users else 0


def _dispatches(commands):
    """The dispatches among `commands`, those in region bodies too."""
    for c in commands:
        if type(c) is Dispatch:
            yield c
        elif type(c) is Region:
            yield from _dispatches((<Region>c).body.commands)
