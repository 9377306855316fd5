"""CommandBuffer: a recording's lifecycle (begin, end, reset), regions, nesting, transients, collectives and what a
submission checks (compiled).

The recording of the plain commands and their checks is its base class's (hal.recorder.Recorder). At end() the
planner (hal.dependencies) freezes the recording into a Program and the backend's emitter (hal.program.Emitter)
takes it from there: `deferred` command buffers plan and emit everything at end(), `single_pass` ones plan each
command as it is recorded and hand it to the emitter at once. segments() shows the recording as hal.commands'
linked list of segments.
"""

from libc.stdint cimport uint32_t
from libcpp.vector cimport vector

from collections.abc import Iterator, Sequence
from typing import Any

import networkx as nx

from hal.accesses cimport needed, refs_and_writes, slot_users
from hal.argument_checks cimport plain_word
from hal.buffer cimport Buffer, BufferRef, USAGE_ANY, USAGE_DISPATCH_STORAGE
from hal.commands cimport Collective, Command, Region, Segment, new_collective, new_region, new_segment
from hal.dependencies cimport Planner
from hal.program cimport Program
from hal.races cimport RaceDetector, give_back_race_detector, take_race_detector
from hal.recorder cimport ENDED, INITIAL, RECORDING, Recorder
from hal.submit_checks cimport SubmitChecks, same_entries, segments_of

from hal.argument_checks import constant_values, table_of
from hal.buffer import MAX_SLOTS, slot_count
from hal.commands import constant_word, restore
from hal.constant_types import convert
from hal.communicator import Communicator, check_collective
from hal.errors import ValidationError, integer
from hal.nesting import Resolver, check_nested, replay
from hal.transients import Transient, plan_transients

from hal.recorder import MAX_UPDATE_BYTES  # (a name of this module too: the queue transfers' limit)

TRANSIENT_ALIGNMENT = 16  # at least: what 16-byte vector loads need


cdef class CommandBuffer(Recorder):
    """A recorded list of commands, run by `Device.queue_execute`.

    Made by `Device.create_command_buffer` (whose arguments these are), recorded in a `with cb:` block (or between
    `begin()` and `end()`).

    Args:
        mode: "one_shot" runs once; "reusable" any number of times (`reset()` allows re-recording).
        binding_capacity: Slots below it (`hal.slot(i)`) are bound at each submit, from its binding table.
        strategy: "deferred" leaves emission to `end()`; "single_pass" emits while recording.
        dependencies: "barriers" (every command waits for the segment before it) or "hazards" (only for the commands
            whose byte ranges it overlaps, one writing).
        validate: False drops the race check, the one check whose cost depends on what a segment holds; the checks
            that keep bad input from a driver (types, ranges, usage, alignment, limits) always run.
        constant_capacity: Constant slots below it (`hal.constant_slot(i)`) are given at each submit.

    Example:
        >>> cb = dev.create_command_buffer(mode="reusable")
        >>> with cb:
        ...     cb.fill_buffer(buf, np.uint32(0))
        >>> dev.queue_execute(cb)
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
        self.constant_slot_types = {}
        self.constants_needed = 0
        self.indirect_commands = []
        self.region_commands = []
        self.collective_commands = []
        self.nested_commands = []
        self.levels = []  # per open region, the enclosing level's recording state (see _open_region)
        self.uses_slot = False
        self.checks = None  # from begin()
        self.ran = False  # submitted: a one_shot command buffer may not be again
        self.table = ()
        self.table_token = None

    # State.
    @property
    def commands(self) -> tuple:
        """The recorded commands in recording order (complete after end()); each has `index`, `segment` and `kind`,
        a `hal.CommandKind`."""
        return self.recorded.commands if self.phase == ENDED else ()

    @property
    def program(self) -> Program:
        """The frozen Program end() made: what the backend runs, and what tools inspect."""
        if self.phase != ENDED:
            raise ValidationError(f"program: the command buffer is {self.state}; call end() first")
        return self.recorded

    def segments(self) -> Iterator[Segment]:
        """The segments recorded so far, from the first, as a linked list (each has `commands` and `next`).

        The last one is empty after a barrier that no command followed yet, and so is the only one before any
        command.

        Returns:
            An iterator over the segments.
        """
        cdef list found = []
        for index, commands in segments_of(self.sequence).items():
            found.append(new_segment(index))
            (<Segment>found[-1]).commands.extend(commands)
        if self.segment_start == len(self.sequence):
            found.append(new_segment(self.barriers))
        for k in range(len(found) - 1):
            (<Segment>found[k]).next = found[k + 1]
        return iter(found)

    def begin(self) -> None:
        """Start recording (what `with cb:` does on entry; its exit calls `end()`).

        Raises:
            ValidationError: The device is closed, or the command buffer is not in its initial state (call `reset()`
                to record it again).
        """
        self.device.check_open()
        if self.phase != INITIAL:
            raise ValidationError(f"begin: the command buffer is {self.state}; call reset() to record it again")
        self.phase = RECORDING
        self.checks = SubmitChecks(self.device, self.caps, self.binding_capacity, self.validate)
        self.planner = Planner(self.dependencies, self.emitter.lanes, self.single_pass, self.emitter.graph_layout)
        if self.single_pass:
            self.recorded = self.planner.program
            self.emitter.begin(self.recorded)

    def end(self) -> None:
        """Finish recording: the planner freezes the Program (a deferred command buffer is planned here, in one pass
        over the segments) and the backend emits it (CUDA: builds and instantiates its graph).

        Raises:
            ValidationError: The command buffer is not recording, or a region is still open.
            DeviceError: The backend could not emit it (out of memory, a driver error).
        """
        if self.phase != RECORDING:
            raise ValidationError(f"end: the command buffer is {self.state}, not recording")
        if self.levels:
            raise ValidationError(f"end: {len(self.levels)} region(s) still open; leave their `with` blocks first")
        self.device.check_open()  # the backend emits into the device's objects
        cdef tuple commands = tuple(self.sequence)
        try:
            if not self.single_pass:
                self.planner.plan(commands)
            self.checks.check_released("end", commands, self.collective_commands, self.device.release_token)
            slots, constants = slot_users(self.slot_commands, self.constant_commands)
            self.slots_needed = needed(slots)
            self.constants_needed = needed(constants)
            self.recorded = self.planner.finish(commands, slots, self.slots_needed, constants,
                                                self.constants_needed, tuple(self.indirect_commands),
                                                tuple(self.region_commands), tuple(self.collective_commands),
                                                tuple(self.nested_commands))
            if self.transients and not self.single_pass:
                self.transient_plan = plan_transients(self.recorded, self.transients, self.device,
                                                      max(self.storage_alignment, TRANSIENT_ALIGNMENT),
                                                      self.mode == "reusable")
                self.recorded.transients = self.transient_plan
            self.checks.ended(self.recorded, self.slot_commands, self.collective_commands, self.slots_needed)
            self.emitter.end(self.recorded)
        except BaseException:  # the backend failed to emit: stay recording, as before end()
            if self.transient_plan is not None:  # the commands point at their transients again; the next end()
                restore(self.transient_plan.moved)  # places them anew
                self.release_transients()
                self.transient_plan = None
            self.checks.forget()
            if not self.single_pass:
                self.planner = Planner(self.dependencies, self.emitter.lanes, False, self.emitter.graph_layout)
                self.recorded = None
            raise
        self.phase = ENDED
        give_back_race_detector(self.races)  # recording is over: its tables serve the next command buffer
        self.races = None

    def reset(self) -> None:
        """Forget everything recorded; the command buffer can be begun again (a reusable one on CUDA then updates
        its graph in place when the new recording has the same topology). Its transients' memory is given back once
        the work submitted so far is done with it."""
        self.emitter.reset()
        self.clear()

    def __enter__(self) -> CommandBuffer:
        self.begin()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.end()

    def dependency_graph(self) -> nx.DiGraph:
        """The dependencies hal rediscovered, as a networkx DiGraph.

        Returns:
            Nodes are command indices (attributes `kind` and `segment`; a region's node has `body`, its commands'
            graph); an edge u -> v says v waits for u. Transitively reduced.

        Raises:
            ValidationError: The command buffer has not ended.
        """
        if self.phase != ENDED:
            raise ValidationError(f"dependency_graph: the command buffer is {self.state}; call end() first")
        return self.recorded.dependency_graph()

    def __repr__(self) -> str:
        return (f"<{type(self).__name__} {self.mode} {self.strategy}/{self.dependencies} "
                f"{self.count} commands, {self.state}>")

    # Collectives (hal.communicator).
    def all_reduce(self, communicator: Communicator, source: Buffer | BufferRef, target: Buffer | BufferRef,
                   dtype: Any, op: str = "sum") -> None:
        """Record an all-reduce: every rank's `target` gets the reduction of all ranks' `source`.

        Args:
            communicator: A `hal.Communicator` that has this command buffer's device as a rank.
            source: The rank's contribution (a buffer, `hal.ref` or `hal.slot` with a length).
            target: The same size as `source`; the same range reduces in place.
            dtype: The elements' type: int8, uint8, int32, uint32, int64, uint64, float16, float32 or float64.
            op: "sum", "prod", "max", "min" or "avg" (floating types only).

        Raises:
            ValidationError: The command buffer is not recording; the communicator is closed
                or lacks this device; a range, the dtype or the counts do not agree with the communicator's size; or
                another collective of the communicator is in this segment (put an execution barrier between them).
        """
        self.add_collective("all_reduce", communicator, source, target, dtype, op, None, None)

    def all_gather(self, communicator: Communicator, source: Buffer | BufferRef, target: Buffer | BufferRef,
                   dtype: Any) -> None:
        """Record an all-gather: every rank's `target` gets all ranks' `source`, in rank order.

        Args:
            communicator: A `hal.Communicator` that has this command buffer's device as a rank.
            source: The rank's part.
            target: size x `source` bytes.
            dtype: The elements' type (as for `all_reduce`).

        Raises:
            ValidationError: The command buffer is not recording; the communicator is closed
                or lacks this device; a range, the dtype or the counts do not agree with the communicator's size; or
                another collective of the communicator is in this segment (put an execution barrier between them).
        """
        self.add_collective("all_gather", communicator, source, target, dtype, None, None, None)

    def reduce_scatter(self, communicator: Communicator, source: Buffer | BufferRef, target: Buffer | BufferRef,
                       dtype: Any, op: str = "sum") -> None:
        """Record a reduce-scatter: rank r's `target` gets part r of the reduction of all ranks' `source`.

        Args:
            communicator: A `hal.Communicator` that has this command buffer's device as a rank.
            source: size x `target` bytes.
            target: The rank's part of the result.
            dtype: The elements' type (as for `all_reduce`).
            op: "sum", "prod", "max", "min" or "avg".

        Raises:
            ValidationError: The command buffer is not recording; the communicator is closed
                or lacks this device; a range, the dtype or the counts do not agree with the communicator's size; or
                another collective of the communicator is in this segment (put an execution barrier between them).
        """
        self.add_collective("reduce_scatter", communicator, source, target, dtype, op, None, None)

    def broadcast(self, communicator: Communicator, source: Buffer | BufferRef | None, target: Buffer | BufferRef,
                  root: int) -> None:
        """Record a broadcast: every rank's `target` gets rank `root`'s `source` (bytes).

        Args:
            communicator: A `hal.Communicator` that has this command buffer's device as a rank.
            source: The root's data; other ranks may pass None.
            target: The same size on every rank.
            root: The rank whose `source` is sent.

        Raises:
            ValidationError: The command buffer is not recording; the communicator is closed
                or lacks this device; a range, the dtype or the counts do not agree with the communicator's size; or
                another collective of the communicator is in this segment (put an execution barrier between them).
        """
        self.add_collective("broadcast", communicator, source, target, "uint8", None, root, None)

    def send(self, communicator: Communicator, source: Buffer | BufferRef, peer: int) -> None:
        """Record a send of `source` to rank `peer`, whose matching `recv` receives it.

        On NCCL a send may wait for its recv: ranks that both send and receive use `send_recv`.

        Args:
            communicator: A `hal.Communicator` that has this command buffer's device as a rank.
            source: The bytes to send.
            peer: The receiving rank (not this one).

        Raises:
            ValidationError: The command buffer is not recording; the communicator is closed
                or lacks this device; a range, the dtype or the counts do not agree with the communicator's size; or
                another collective of the communicator is in this segment (put an execution barrier between them).
        """
        self.add_collective("send", communicator, source, None, "uint8", None, peer, None)

    def recv(self, communicator: Communicator, target: Buffer | BufferRef, peer: int) -> None:
        """Record a receive into `target` of what rank `peer` sends (the same number of bytes).

        Args:
            communicator: A `hal.Communicator` that has this command buffer's device as a rank.
            target: Where the bytes land.
            peer: The sending rank (not this one).

        Raises:
            ValidationError: The command buffer is not recording; the communicator is closed
                or lacks this device; a range, the dtype or the counts do not agree with the communicator's size; or
                another collective of the communicator is in this segment (put an execution barrier between them).
        """
        self.add_collective("recv", communicator, None, target, "uint8", None, peer, None)

    def send_recv(self, communicator: Communicator, source: Buffer | BufferRef, peer: int,
                  target: Buffer | BufferRef, source_peer: int) -> None:
        """Record a send and a receive as one operation (a ring shift or a pairwise exchange, which separate send
        and recv could deadlock).

        Args:
            communicator: A `hal.Communicator` that has this command buffer's device as a rank.
            source: The bytes to send to `peer`.
            peer: The rank that receives `source`.
            target: Where as many bytes from `source_peer` land.
            source_peer: The rank whose bytes `target` receives.

        Raises:
            ValidationError: The command buffer is not recording; the communicator is closed
                or lacks this device; a range, the dtype or the counts do not agree with the communicator's size; or
                another collective of the communicator is in this segment (put an execution barrier between them).
        """
        self.add_collective("send_recv", communicator, source, target, "uint8", None, peer, source_peer)

    cdef void add_collective(self, str operation, object communicator, object source, object target, object dtype,
                             object reduction, object peer, object source_peer) except *:
        if self.phase != RECORDING:
            self.not_recording(operation)
        cdef Py_ssize_t index = self.count
        cdef BufferRef s = None, t = None, order
        try:
            if source is not None:
                s = self.check_ref(source, index, operation, "source", -1, USAGE_ANY)
            if target is not None:
                t = self.check_ref(target, index, operation, "target", -1, USAGE_ANY)
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
        """Transient memory for one execution of this command buffer, used by its own commands like a buffer.

        At end(), transients whose lifetimes cannot overlap share memory (`transient_bytes`: the peak); a single_pass
        command buffer, whose commands the backend takes as they come, gives each its own memory. Contents are
        undefined at the start of each execution.

        Args:
            nbytes: The size (0 allowed, as for `Device.allocate`; nothing can use it).

        Returns:
            A `hal.BufferRef` that this command buffer's commands (and its nested command buffers' tables) take.

        Raises:
            ValidationError: The command buffer is not recording, or `nbytes` is negative or above the device's
                max_storage_buffer_range.
        """
        if self.phase != RECORDING:
            self.not_recording("alloca")
        nbytes = integer(nbytes, "alloca: nbytes", 0, self.max_storage_range)  # 0, as allocate(0): nothing can use it
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
        """Record the commands of another command buffer here, as it holds them now, between two execution barriers.

        All or nothing: every check runs again, and a command refused leaves this command buffer as it was.

        Args:
            other: An ended reusable command buffer of this device.
            binding_table: `other`'s slot i is `binding_table[i]`: a buffer, a `hal.ref()` or a `hal.slot()` of this
                command buffer (so this one's table reaches the nested commands). Its constant slots are this one's.

        Raises:
            ValidationError: The command buffer is not recording; `other` is not an ended reusable command buffer of
                this device, or the table does not cover its slots; or one of its commands is refused here.
        """
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
            for i in other.program.static_indirect:
                self.check_static_parameters(table(commands[i].parameters), i, commands[i].export.name)
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
        """Open a loop region: `with cb.while_nonzero(ref):` records commands that run while a uint32 is non-zero.

        The flag is checked before each iteration. The commands before the region happen before it and the commands
        after it wait for it (it sits between two execution barriers); barriers inside work as anywhere; regions
        nest. An exception leaving the `with` block (a command rejected inside, say) drops the whole region; an
        empty region is refused. Inside, commands are numbered from 0 (in messages too), and dispatch_indirect
        counts must be dynamic.

        Args:
            condition: The flag: a 4-byte aligned range of a buffer with DISPATCH_STORAGE usage, or a slot.

        Returns:
            The region's context manager.

        Raises:
            ValidationError: The command buffer is not recording, or the condition is misaligned or lacks the usage.

        Example:
            >>> with cb:
            ...     with cb.while_nonzero(flag):
            ...         cb.dispatch(exe, "countdown", workgroups=1, bindings=(flag, count))
        """
        return RegionScope(self, True, self.check_condition(condition, "while_nonzero"))

    def if_nonzero(self, condition: Buffer | BufferRef) -> RegionScope:
        """Open a branch region: `with cb.if_nonzero(ref):` records commands that run once if a uint32 is non-zero
        when the region is reached (otherwise as `while_nonzero`).

        Args:
            condition: The flag: a 4-byte aligned range of a buffer with DISPATCH_STORAGE usage, or a slot.

        Returns:
            The region's context manager.

        Raises:
            ValidationError: The command buffer is not recording, or the condition is misaligned or lacks the usage.
        """
        return RegionScope(self, False, self.check_condition(condition, "if_nonzero"))

    @property
    def regions_open(self) -> int:
        """How many regions are open where the next command is recorded."""
        return len(self.levels)

    cdef BufferRef check_condition(self, object condition, str what):
        if self.phase != RECORDING:
            self.not_recording(what)
        cdef Py_ssize_t index = self.count
        cdef BufferRef r = self.check_ref(condition, index, what, "condition", -1, USAGE_ANY)  # usage: below
        self.uses_slot = False  # the region's slots are found from its refs when it closes
        if r.offset % 4 or (r.bounded and r.nbytes < 4):
            raise ValidationError(f"command {index} ({what}): the condition at offset {r.offset} with length "
                                  f"{r.length} must be a 4-byte aligned uint32")
        if r.buffer is not None and not r.buffer.usage_bits & USAGE_DISPATCH_STORAGE:
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
                            self.nested_commands, self.collective_commands, loop, condition))
        self.sequence = []
        self.count = self.barriers = self.segment_start = 0
        self.races = RaceDetector()
        self.slot_commands, self.constant_commands, self.indirect_commands, self.region_commands = [], [], [], []
        self.nested_commands, self.collective_commands = [], []
        return len(self.levels)

    def _close_region(self, bint keep) -> None:
        """End the innermost region's body; `keep`: record it as one command of the enclosing level (else it is
        dropped, as after an error inside). A kept region must hold a command."""
        if not self.levels:
            raise ValidationError("no region is open here (the command buffer was reset or ended inside it)")
        cdef tuple commands = tuple(self.sequence)
        body_slots, body_constants, body_indirect, body_regions, body_nested, body_collectives = (
            self.slot_commands, self.constant_commands, self.indirect_commands, self.region_commands,
            self.nested_commands, self.collective_commands)
        (self.sequence, self.segment_start, self.count, self.barriers, self.races, self.slot_commands,
         self.constant_commands, self.indirect_commands, self.region_commands, self.nested_commands,
         self.collective_commands, loop, condition) = self.levels.pop()
        what = "while_nonzero" if loop else "if_nonzero"
        if not keep:
            return
        if not commands:
            raise ValidationError(f"command {self.count} ({what}): the region holds no command; record one in it "
                                  f"or leave the region out")
        planner = Planner(self.dependencies, self.emitter.lanes, False, self.emitter.graph_layout)
        planner.plan(commands)
        slots, constants = slot_users(body_slots, body_constants)
        body = planner.finish(commands, slots, needed(slots), constants, needed(constants),
                              tuple(body_indirect), tuple(body_regions), tuple(body_collectives), tuple(body_nested))
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
        if body_collectives:  # (the released-communicator check looks into its body)
            self.collective_commands.append(region.index)
        if constants:
            self.constant_commands.append(region)
        self.execution_barrier()

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
        table = binding_table if type(binding_table) is tuple else table_of(binding_table)
        token = self.device.release_token
        last = self.table
        if token is self.table_token and same_entries(table, last):
            return table
        self.checks.check_table(table, token, last if self.table_token is token else ())
        self.table = table
        if self.mode == "reusable":  # accepted again without a look (see `accepts`)
            self.table_token = token
        return table

    def prepare_constants(self, constants: Sequence[Any]) -> tuple:
        """Check the values given for the constant slots at a submit (as literal constants are checked when
        recorded); returns them as a tuple."""
        cdef uint32_t word
        values = constants if type(constants) is tuple else constant_values(constants)
        if len(values) > self.constant_capacity:
            raise ValidationError(f"queue_execute: {len(values)} constants given, more than the command buffer's "
                                  f"constant_capacity {self.constant_capacity}")
        if len(values) < self.constants_needed:
            raise ValidationError(f"queue_execute: {len(values)} constants given; the command buffer needs "
                                  f"{self.constants_needed} (it reads constant slot {self.constants_needed - 1})")
        typed = self.constant_slot_types  # slots a typed export reads: converted as it reads them
        if typed:
            values = list(values)
        for i, value in enumerate(values):
            if i in typed:
                type_name, index, position = typed[i]
                try:
                    values[i] = convert(value, type_name)
                except (TypeError, OverflowError) as e:
                    raise ValidationError(f"queue_execute: constants[{i}] = {value!r} for constant slot {i}, a "
                                          f"{type_name} (command {index}'s constants[{position}]): {e}") from None
            elif not plain_word(value, &word):
                try:
                    constant_word(value)
                except (TypeError, OverflowError) as e:
                    raise ValidationError(f"queue_execute: constants[{i}] = {value!r}: {e}") from None
        if typed:
            values = tuple(values)
        return values


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
