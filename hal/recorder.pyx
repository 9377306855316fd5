"""Recorder: the recording of the plain commands (fill, update, copy, barrier, dispatch, dispatch_indirect, call) and
their record-time checks (compiled: this is the hot path), over the state every command buffer keeps.

Recording appends one typed record per command to one list and notes where the current segment (the commands between
two barriers) begins; the planner reads each segment as a run of commands with the same barrier count. Every check
that keeps bad input away from a driver happens here, when the command is recorded, so the error can name the
command index, the argument and the limit; a rejected command leaves the command buffer as it was.
hal.command_buffer.CommandBuffer, the one subclass, adds the lifecycle (begin, end, reset), regions, nesting,
transients, collectives and submission.
"""

from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport uint32_t

from collections.abc import Callable, Sequence
from typing import Any

from hal.accesses cimport refs_and_writes
from hal.argument_checks cimport int_within, plain_word
from hal.buffer cimport (Buffer, BufferRef, USAGE_ANY, USAGE_DISPATCH_STORAGE, USAGE_TRANSFER_SOURCE,
                         USAGE_TRANSFER_TARGET)
from hal.commands cimport (Command, Dispatch, Entries, Entry, hide_from_collector, new_call, new_copy, new_dispatch,
                           new_fill, new_update, with_arguments)

from hal.argument_checks import (as_sequence, bad_export, binding_name, check_constants, check_range, fill_pattern,
                                 foreign, refuse, typed_constants, workgroup_counts)
from hal.buffer import bytes_view
from hal.errors import UnsupportedError, ValidationError
from hal.executable import Executable

MAX_UPDATE_BYTES = 65536
_PHASES = ("initial", "recording", "ended")
cdef tuple _WRITE = (True,), _READ_WRITE = (False, True)  # what fill/update and copy do to their references


cdef class Recorder:
    """The recording state of a command buffer and its plain commands (see hal.command_buffer.CommandBuffer)."""

    @property
    def state(self) -> str:
        return _PHASES[self.phase]

    # Recording.
    def fill_buffer(self, target: Buffer | BufferRef, pattern: Any) -> None:
        """Record a fill: repeat `pattern` over the target range.

        Args:
            target: A buffer (its whole range), a `hal.ref` of one or a `hal.slot`, with TRANSFER_TARGET usage; its
                offset and length must be multiples of the pattern's size and of the device's fill_buffer_alignment.
            pattern: 1, 2 or 4 bytes: a numpy scalar (`np.uint32(7)`, `np.float32(1.0)`) or bytes.

        Raises:
            ValidationError: The command buffer is not recording; the pattern, the range, its alignment or its usage
                is wrong; or (validate=True) the fill races another command of its segment. Nothing is recorded.

        Example:
            >>> with dev.create_command_buffer() as cb:
            ...     cb.fill_buffer(buf, np.float32(1.0))
        """
        if self.phase != RECORDING:
            self.not_recording("fill_buffer")
        cdef Py_ssize_t index = self.count
        cdef BufferRef t = self.check_ref(target, index, "fill_buffer", "target", -1, USAGE_TRANSFER_TARGET)
        p = fill_pattern(pattern, index)
        cdef Py_ssize_t align = max(len(p), self.fill_alignment)
        if t.offset % align or (t.bounded and t.nbytes % align):
            raise ValidationError(
                f"command {index} (fill_buffer): target offset {t.offset} and length {t.length} must be "
                f"multiples of {align} (the {len(p)}-byte pattern and the device's fill_buffer_alignment "
                f"{self.fill_alignment})")
        self.record(new_fill(index, self.barriers, t, p), (t,), _WRITE)

    def update_buffer(self, target: Buffer | BufferRef, data: Any) -> None:
        """Record an update: write `data` at the target's offset when the command runs.

        Args:
            target: A buffer, a `hal.ref` or a `hal.slot` with TRANSFER_TARGET usage, large enough for the data.
            data: 1 byte to 64 KiB (a numpy array, bytes or anything with the buffer protocol), copied now: later
                changes to it do not reach the command. Offset and size must be multiples of the device's
                update_buffer_alignment. For more, use a staging buffer and `copy_buffer`, or `Device.queue_update`.

        Raises:
            ValidationError: The command buffer is not recording; the data is empty, too large or does not fit; the
                alignment or usage is wrong; or the update races another command of its segment.
        """
        if self.phase != RECORDING:
            self.not_recording("update_buffer")
        cdef Py_ssize_t index = self.count
        cdef BufferRef t = self.check_ref(target, index, "update_buffer", "target", -1, USAGE_TRANSFER_TARGET)
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
        """Record a copy from one range to another.

        Args:
            source: A buffer, `hal.ref` or `hal.slot` with TRANSFER_SOURCE usage. Its length is copied (for a slot of
                unknown length, the target's).
            target: A buffer, `hal.ref` or `hal.slot` with TRANSFER_TARGET usage; the two ranges may not overlap in
                one buffer. Offsets and length must be multiples of the device's copy_buffer_alignment.

        Raises:
            ValidationError: The command buffer is not recording; a range is empty, does not fit, overlaps the other
                or is misaligned; a usage is missing; or the copy races another command of its segment.
        """
        if self.phase != RECORDING:
            self.not_recording("copy_buffer")
        cdef Py_ssize_t index = self.count
        cdef BufferRef s = self.check_ref(source, index, "copy_buffer", "source", -1, USAGE_TRANSFER_SOURCE)
        cdef BufferRef t = self.check_ref(target, index, "copy_buffer", "target", -1, USAGE_TRANSFER_TARGET)
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
        """Record an execution barrier: everything recorded after it waits for everything recorded before it.

        The commands between two barriers form a segment; in `barriers` mode a command waits for the whole segment
        before it, in `hazards` mode only for the commands whose byte ranges it overlaps (one of them writing).

        Raises:
            ValidationError: The command buffer is not recording.
        """
        if self.phase != RECORDING:
            self.not_recording("execution_barrier")
        self.barriers += 1
        self.segment_start = len(self.sequence)

    def dispatch(self, executable: Executable, name: str, workgroups: Any = (1, 1, 1),
                 constants: Sequence[Any] = (), bindings: Sequence[Buffer | BufferRef] = ()) -> None:
        """Record a dispatch: run export `name` of `executable` over a grid of workgroups.

        Args:
            executable: An executable this command buffer's device loaded (`Device.load_executable`).
            name: The export to run.
            workgroups: One to three workgroup counts (`4` and `(4, 1)` mean `(4, 1, 1)`), each within the device's
                max_workgroup_count.
            constants: One value per constant of the export: 32-bit numbers (converted as the export's
                `constant_types` say, if it has them) or `hal.constant_slot(i)`, whose value comes with each
                `queue_execute`.
            bindings: One buffer, `hal.ref` or `hal.slot` per binding of the export, with DISPATCH_STORAGE usage and
                offsets aligned to the device's storage_buffer_offset_alignment.

        Raises:
            ValidationError: The command buffer is not recording; the executable or export is unknown to this device;
                a count, constant or binding is wrong (the message names the command, the argument and the limit);
                or (validate=True) the dispatch races another command of its segment. Nothing is recorded.

        Example:
            >>> with dev.create_command_buffer() as cb:
            ...     cb.dispatch(exe, "add", workgroups=16, constants=(1024,), bindings=(a, b, out))
        """
        if self.phase != RECORDING:
            self.not_recording("dispatch")
        self.add_dispatch("dispatch", executable, name, workgroups, constants, bindings, None, False)

    def dispatch_indirect(self, executable: Executable, name: str, parameters: Buffer | BufferRef,
                          constants: Sequence[Any] = (), bindings: Sequence[Buffer | BufferRef] = (),
                          dynamic: bool = False) -> None:
        """Record a dispatch whose workgroup counts are read from device memory.

        A zero count runs nothing; counts above the device's max_workgroup_count run nothing and fail the work
        (the next `synchronize()` raises DeviceError naming the command).

        Args:
            executable: An executable this command buffer's device loaded.
            name: The export to run.
            parameters: Three uint32 counts (x, y, z): a buffer with DISPATCH_STORAGE usage, `hal.ref` or `hal.slot`,
                4-byte aligned, at least 12 bytes.
            constants: As for `dispatch`.
            bindings: As for `dispatch`.
            dynamic: False (static counts): read as the submission starts (after its waits), so host writes made
                before `queue_execute` count and no earlier command of this command buffer may write them. True:
                read when the dispatch runs, so earlier commands may write them (across a barrier or a dependency);
                required inside regions. Either way they count as a read in dependency and race analysis.

        Raises:
            ValidationError: As for `dispatch`; or the parameters are misaligned, too short or lack the usage; or
                static counts are written by an earlier command, or recorded inside a region.
        """
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
        cdef BufferRef p = self.check_ref(parameters, index, "dispatch_indirect", "parameters", -1, USAGE_ANY)
        if p.offset % 4 or (p.bounded and p.nbytes < 12):
            raise ValidationError(f"command {index} (dispatch_indirect {name}): parameters at offset {p.offset} "
                                  f"with length {p.length} must be 4-byte aligned and hold at least 12 bytes "
                                  f"(three uint32 workgroup counts)")
        if p.buffer is not None and not p.buffer.usage_bits & USAGE_DISPATCH_STORAGE:
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
            bad_export(executable, name, self.device, index, command)
        if not (type(workgroups) is tuple and len(<tuple>workgroups) == 3 and self.workgroups_fit(workgroups)):
            workgroups = workgroup_counts(workgroups, index, name, (self.max_groups_x, self.max_groups_y,
                                                               self.max_groups_z))
            self.workgroups_fit(workgroups)  # (they do now: it keeps them in `groups`)
        if type(constants) is not tuple:
            constants = as_sequence(constants, index, name, "constants", command)
        cdef Py_ssize_t n = len(<tuple>constants)
        if n != entry.constants:
            raise ValidationError(f"command {index} ({command} {name}): {n} constants given, "
                                  f"the export takes {entry.constants}")
        if 4 * n > self.max_constant_bytes:
            raise ValidationError(f"command {index} ({command} {name}): {4 * n} bytes of constants "
                                  f"exceed the device's max_push_constants_size {self.max_constant_bytes}")
        if entry.constant_types:
            constants = typed_constants(constants, entry.constant_types, index, name, command,
                                        self.constant_slot_types)
        cdef bint constant_slots = False
        cdef bint hidden = parameters is None  # from the collector (hal.commands.hide_from_collector)
        self.words.resize(n)
        for i in range(n):
            if not plain_word((<tuple>constants)[i], &self.words[i]):
                constant_slots = check_constants(constants, index, name, self.constant_capacity, command)
                hidden = False
                break
        if type(bindings) is not tuple:
            bindings = as_sequence(bindings, index, name, "bindings", command)
        n = len(<tuple>bindings)
        if n != entry.bindings:
            raise ValidationError(f"command {index} ({command} {name}): {n} bindings given, "
                                  f"the export takes {entry.bindings}")
        # A tuple filled in place: building a list and then the tuple made recording a dispatch 14% slower (0.253 ->
        # 0.287 µs a command, bench.record's chain of 1000 on the CPU machine, 2026-11-29).
        cdef tuple resolved = PyTuple_New(n)
        cdef BufferRef r
        cdef bint buffers = True  # every binding a buffer, none a slot
        self.ranges.resize(n)
        for i in range(n):
            r = self.check_ref((<tuple>bindings)[i], index, command, None, i, USAGE_DISPATCH_STORAGE)
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
        workgroup_counts' path)."""
        cdef long long x = 0, y = 0, z = 0
        if int_within(workgroups[0], 1, self.max_groups_x, &x) and \
                int_within(workgroups[1], 1, self.max_groups_y, &y) and \
                int_within(workgroups[2], 1, self.max_groups_z, &z):
            self.groups[0], self.groups[1], self.groups[2] = x, y, z
            return True
        return False

    def call(self, fn: Callable[[Any], None], bindings: Sequence[Buffer | BufferRef] = (), reads: Sequence[int] = (),
             writes: Sequence[int] | None = None, constants: Sequence[Any] = ()) -> None:
        """Record foreign work: `fn(ctx)` records a library's work with the backend's own context (hal.calls says what
        `ctx` holds), over `bindings`, which take part in dependency and race analysis as a dispatch's do.

        Args:
            fn: Called with the context when the backend takes the command (the host: each time it runs; Vulkan:
                each time the command buffer is encoded, into the VkCommandBuffer being recorded; CUDA: once per
                set of buffer addresses and constants, its stream captured into the command buffer's graph).
            bindings: The buffers the work touches, or references to them from `hal.ref` or `hal.slot`.
            reads: The indices of the bindings `fn` only reads.
            writes: The indices of the bindings it writes; None: every binding not in `reads`.
            constants: 32-bit values, or `hal.constant_slot(i)`s, which `ctx.constants` gives `fn` as the values of
                the submission (on Vulkan a new value encodes the command buffer again, as for a dispatch; on CUDA
                it is captured again unless kept).

        Raises:
            UnsupportedError: The device records no foreign work (its capabilities' supports_foreign_calls).
            ValidationError: The command buffer is not recording; `fn` is not callable; a binding or a constant is
                wrong; an index is out of range, in both `reads` and `writes`, or a binding is in neither; or
                (validate=True) the call races another command of its segment. Nothing is recorded.

        Example:
            >>> with dev.create_command_buffer() as cb:
            ...     cb.call(lambda ctx: ctx.binding(0, np.float32).fill(1.0), bindings=(buf,))
        """
        if self.phase != RECORDING:
            self.not_recording("call")
        cdef Py_ssize_t index = self.count, i
        try:
            if not self.caps.supports_foreign_calls:
                raise UnsupportedError(f"command {index} (call): the {self.device.driver} device records no foreign "
                                       f"calls (capabilities.supports_foreign_calls is False)")
            if not callable(fn):
                raise ValidationError(f"command {index} (call): fn must be callable, got {type(fn).__name__}")
            given = _sequence(bindings, index, "bindings")
            refs = tuple([self.check_ref(given[i], index, "call", None, i, USAGE_ANY) for i in range(len(given))])
            read = set(_indices(reads, len(refs), index, "reads"))
            written = set(range(len(refs))) - read if writes is None else set(_indices(writes, len(refs), index,
                                                                                        "writes"))
            if read & written or len(read | written) != len(refs):
                raise ValidationError(f"command {index} (call): each binding is in reads or in writes, once; got "
                                      f"reads {sorted(read)} and writes {sorted(written)} for {len(refs)} bindings")
            values = _sequence(constants, index, "constants")
            constant_slots = check_constants(values, index, "fn", self.constant_capacity, "call")
        except BaseException:
            self.uses_slot = False
            raise
        flags = tuple([i in written for i in range(len(refs))])
        c = new_call(index, self.barriers, fn, refs, flags, values)
        self.record(c, refs, flags)
        if constant_slots:
            self.constant_commands.append(c)

    cdef BufferRef check_ref(self, object r, Py_ssize_t index, str command, str name, Py_ssize_t binding, int usage):
        """Check reference `r` for use as `name` of command `index` (None: as its bindings[binding]); returns it as a
        BufferRef. Each refusal is raised by `refuse` (or `check_range`), off the common path."""
        cdef BufferRef ref
        if type(r) is BufferRef:
            ref = <BufferRef>r
        elif isinstance(r, Buffer):
            ref = (<Buffer>r).whole
        else:
            refuse(index, command, name, binding, f"must be a hal.Buffer or a reference from hal.ref()/hal.slot(), "
                                                   f"got {type(r).__name__}")
        cdef Buffer b = ref.buffer
        if b is None:
            return self.check_slot_ref(ref, index, command, name, binding, usage)
        # A transient's device is its command buffer (or, for execute_commands' scratch, the outer one).
        if b.device is not self.device and b.device is not self and b.device is not self.transients_of:
            refuse(index, command, name, binding, foreign(b, self.device))
        if b.released:
            refuse(index, command, name, binding, "is a released buffer")
        if ref.nbytes <= 0 or ref.offset + ref.nbytes > b.size or not b.usage_bits & usage or (
                usage == USAGE_DISPATCH_STORAGE and (ref.offset % self.storage_alignment or
                                                     ref.nbytes > self.max_storage_range)):
            check_range(ref.offset, ref.nbytes, b, self.caps, index, command, binding_name(name, binding), usage)
        return ref

    cdef BufferRef check_slot_ref(self, BufferRef ref, Py_ssize_t index, str command, str name, Py_ssize_t binding,
                                  int usage):
        """check_ref's part for a slot reference (resolved through the binding table at each submit)."""
        if ref.slot >= self.binding_capacity:
            refuse(index, command, name, binding, f"uses slot {ref.slot}, but the command buffer's binding_capacity "
                                                   f"is {self.binding_capacity}")
        if ref.bounded and ref.nbytes <= 0:
            refuse(index, command, name, binding, f"has offset {ref.offset} and length {ref.nbytes}; the length must "
                                                   f"be > 0")
        if usage == USAGE_DISPATCH_STORAGE and ref.offset % self.storage_alignment:
            refuse(index, command, name, binding, f"offset {ref.offset} is not a multiple of the device's "
                                                   f"storage_buffer_offset_alignment {self.storage_alignment}")
        self.uses_slot = True
        return ref

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


cdef tuple _sequence(object given, Py_ssize_t index, str what):
    """call's `bindings`, `reads` or `writes` as a tuple."""
    if not isinstance(given, Sequence) or isinstance(given, (str, bytes)):
        raise ValidationError(f"command {index} (call): {what} must be a sequence, got {type(given).__name__}")
    return tuple(given)


cdef list _indices(object given, Py_ssize_t n, Py_ssize_t index, str what):
    """call's `reads` or `writes`: binding indices below n."""
    items = _sequence(given, index, what)
    for i in items:
        if type(i) is not int or not 0 <= i < n:
            raise ValidationError(f"command {index} (call): {what} holds {i!r}, not an index of its {n} bindings")
    return list(items)
