"""What a submission checks of a recording (compiled): that nothing it uses was released since it was recorded
(buffers bound without a slot, executables, communicators), and that the commands using slots hold for a new
binding table. Checked once per table: a table like the last one (the same buffers, or buffers of the same sizes and
usage aliasing alike) passes without a look at the commands.
"""

from libcpp.vector cimport vector

from hal.accesses cimport access_range, refs_and_writes
from hal.buffer cimport (Buffer, BufferRef, USAGE_ANY, USAGE_DISPATCH_STORAGE, USAGE_TRANSFER_SOURCE,
                         USAGE_TRANSFER_TARGET)
from hal.commands cimport Call, Collective, Command, Copy, Dispatch, Fill, Region
from hal.program cimport Program
from hal.races cimport RaceDetector

from hal.argument_checks import check_range, foreign
from hal.communicator import same_or_disjoint
from hal.errors import ValidationError


cdef class SubmitChecks:
    """The checks of one recording, made at end() (`check_released`) and at each submit; what they found once
    (the buffers bound directly, the executables dispatched, the slot commands' segments) is kept."""

    def __init__(self, device, caps, Py_ssize_t binding_capacity, bint validate):
        self.device, self.caps = device, caps
        self.binding_capacity, self.validate = binding_capacity, validate
        # The device's release token when nothing the recording uses was released: at begin(), then at each check
        # that found it so. Until the token changes, no check is needed.
        self.live_token = device.release_token
        self.forget()

    cdef void forget(self):
        """Forget what was found of the commands (end() failed: they may change before the next)."""
        self.direct_buffers = None  # bound without a slot, when first needed
        self.dispatched = None  # executable -> first command, when first needed
        self.slot_index = None

    cdef void ended(self, Program program, list slot_commands, list collective_commands, Py_ssize_t slots_needed):
        self.program, self.slot_commands, self.collective_commands = program, slot_commands, collective_commands
        self.slots_needed = slots_needed

    cdef void check_table(self, tuple table, object token, tuple last) except *:
        """Check `table` against the recording. `token`: the device's release token, read once by the caller, so
        every check of one submission answers for the same moment; `last`: the last table checked under that token
        (else empty)."""
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
                raise ValidationError(f"queue_execute: binding_table[{i}] {foreign(b, self.device)}")
            if (<Buffer>b).released:
                raise ValidationError(f"queue_execute: binding_table[{i}] is a released buffer")
        self.check_released("queue_execute", self.program.commands, self.collective_commands, token)
        if not self.slot_commands:
            return
        segment_of, direct = self.slot_index or self.index_slots()
        users = self.program.slot_users
        commands = self.program.commands
        cdef vector[Py_ssize_t] changed  # the slots whose buffer changed since the last table
        for i in range(n):
            if i >= len(last) or table[i] is not last[i]:
                changed.push_back(i)
        if changed.empty() or same_answers(table, last, n, changed, direct):
            return
        seen = {}  # the commands using a slot whose buffer changed since the last table
        for i in changed:
            seen.update(dict.fromkeys(users.get(i, ())))
        segments = set()
        for index in seen:
            c = commands[index]
            check_slot_command(c, table, self.caps)
            segments.add((<Command>c).segment)
        if self.validate:
            for index in segments:
                check_races(segment_of[index], table)
            for index in seen:
                if type(commands[index]) is Region:  # alone in its segment; its body's segments may race
                    check_body_races(<Region>commands[index], table)

    cdef tuple index_slots(self):
        """The segments holding slot commands, and the buffers bound without a slot: so a new table re-checks
        only the commands of the slots whose buffer changed."""
        wanted = {(<Command>c).segment for c in self.slot_commands}
        segment_of = {index: commands for index, commands in segments_of(self.program.commands).items()
                      if index in wanted}
        self.slot_index = (segment_of, frozenset(self.direct(self.program.commands)))
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

    cdef void check_released(self, str what, tuple commands, list collectives, object token) except *:
        """Refuse a recording that uses a buffer, an executable or a communicator (of the commands at the indices
        `collectives`) released since it was recorded (each reference was checked as it was recorded: only a release
        since then can matter); `token`: the device's release token now."""
        if token is self.live_token:
            return
        closed = closed_communicator(commands, collectives)  # a closed communicator released its order tokens
        if closed is not None:
            raise ValidationError(f"{what}: command {closed.index} ({closed.kind}) uses a communicator that was closed "
                                  f"after recording; record the command buffer again with an open one")
        for b in self.direct(commands):
            if (<Buffer>b).released:
                user = next(c.index for c in commands for r in refs_and_writes(c)[0] if (<BufferRef>r).buffer is b)
                raise ValidationError(f"{what}: command {user} uses a buffer that was released after recording; "
                                      f"record the command buffer again")
        if self.dispatched is None:
            self.dispatched = {}
            for c in dispatches_in(commands):
                self.dispatched.setdefault((<Dispatch>c).executable, (<Dispatch>c).index)
        for exe, user in self.dispatched.items():
            if exe.released:
                raise ValidationError(f"{what}: command {user} dispatches an executable that was released after "
                                      f"recording; record the command buffer again")
        self.live_token = token




cdef Collective closed_communicator(tuple commands, object collectives):
    """The first collective whose communicator is closed, of the commands at the indices `collectives` (a region
    among them: of its body's)."""
    cdef Collective found
    for i in collectives:
        c = commands[i]
        if type(c) is Region:
            found = closed_communicator((<Region>c).body.commands, (<Region>c).body.collectives)
            if found is not None:
                return found
        elif (<Collective>c).communicator.closed:
            return <Collective>c
    return None


def check_slot_command(Command c, tuple table, caps) -> None:
    """The record-time reference checks, for the slot references of `c` resolved through `table`."""
    if type(c) is Region:  # its condition, then the body's commands that use a slot
        check_slot_condition(<Region>c, table)
        body = (<Region>c).body
        for index in sorted({i for users in body.slot_users.values() for i in users}):
            check_slot_command(body.commands[index], table, caps)
        return
    ranges = []
    refs, writes = refs_and_writes(c)
    cdef BufferRef r
    for i in range(len(refs)):
        r = refs[i]
        write = writes[i]
        key, start, end = access_range(r, table)
        if r.buffer is None:
            if type(c) is Dispatch:
                usage = USAGE_DISPATCH_STORAGE
            elif type(c) is Collective or type(c) is Call:
                usage = USAGE_ANY
            else:
                usage = USAGE_TRANSFER_TARGET if write else USAGE_TRANSFER_SOURCE
            parameters = type(c) is Dispatch and i == len((<Dispatch>c).bindings)  # dispatch_indirect's counts
            if not (0 <= start < end <= key.size and key.usage_bits & usage and (
                    usage != USAGE_DISPATCH_STORAGE or parameters or (
                        start % caps.storage_buffer_offset_alignment == 0
                        and end - start <= caps.max_storage_buffer_range))):
                arg = f"slot {r.slot} (binding_table[{r.slot}])"  # the message, on the failing path only
                if parameters:
                    arg = f"parameters = {arg}"
                elif usage == USAGE_DISPATCH_STORAGE:
                    arg = f"bindings[{i}] = {arg}"
                try:
                    check_range(start, end - start, key, caps, c.index, c.kind, arg, usage)
                except ValidationError as e:
                    raise ValidationError(f"queue_execute: {e}") from None
            if type(c) is Fill and (end - start) % max(len((<Fill>c).pattern), caps.fill_buffer_alignment):
                raise ValidationError(f"queue_execute: command {c.index} (fill_buffer) fills {end - start} bytes "
                                      f"of slot {r.slot}, not a multiple of the pattern and fill alignment")
        ranges.append((key, start, end))
    if type(c) is Copy and ranges[0][0] is ranges[1][0] and \
            ranges[0][1] < ranges[1][2] and ranges[1][1] < ranges[0][2]:
        raise ValidationError(f"queue_execute: command {c.index} (copy_buffer) copies between overlapping "
                              f"ranges of one buffer through the binding table")
    if type(c) is Collective and (<Collective>c).source is not None and (<Collective>c).target is not None and \
            not same_or_disjoint(c.operation, ranges[0], ranges[1]):
        raise ValidationError(f"queue_execute: command {c.index} ({c.kind}): through the binding table its source "
                              f"and target ranges overlap; they must be the same range (in place: all_reduce, "
                              f"broadcast) or disjoint")


def check_races(list segment, tuple table) -> None:
    """Raise the race among the commands of one segment, their slots resolved through `table`, if any."""
    if len(segment) < 2:  # a lone command cannot race
        return
    cdef RaceDetector races = RaceDetector()
    for c in segment:
        refs, writes = refs_and_writes(c)
        races.add(c, refs, writes, segment, 0, table)


def check_body_races(Region region, tuple table) -> None:
    """check_races for each segment of a region's body, and of the regions inside it."""
    for c in region.body.commands:
        if type(c) is Region:
            check_body_races(<Region>c, table)
    for segment in segments_of(region.body.commands).values():
        check_races(segment, table)


cdef dict segments_of(commands):
    """Each segment's commands (a list) by its count of barriers, in recording order (a segment's commands are
    consecutive, and the count grows from one segment to the next); `commands`: a list or tuple, in recording
    order."""
    cdef dict found = {}
    for c in commands:
        found.setdefault((<Command>c).segment, []).append(c)
    return found


def check_slot_condition(Region c, tuple table) -> None:
    cdef BufferRef r = c.condition
    if r.buffer is None:
        b = <Buffer>table[r.slot]
        if r.offset + 4 > b.size or not b.usage_bits & USAGE_DISPATCH_STORAGE:
            raise ValidationError(f"queue_execute: command {c.index} ({c.kind}): the condition = slot {r.slot} "
                                  f"(binding_table[{r.slot}]) needs 4 bytes at offset {r.offset} of a buffer with "
                                  f"DISPATCH_STORAGE usage; the buffer bound has {b.size} bytes, usage {b.usage!r}")


cdef bint same_entries(tuple table, tuple last):
    """Do the two tables hold the very same buffers?"""
    if table is last:
        return True
    if len(table) != len(last):
        return False
    for i in range(len(table)):
        if table[i] is not last[i]:
            return False
    return True


cdef bint same_answers(tuple table, tuple last, Py_ssize_t n, vector[Py_ssize_t]& changed, frozenset direct):
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
    return n < 2 or aliasing(table, n) == aliasing(last, n)


cdef tuple aliasing(tuple table, Py_ssize_t n):
    """Per slot of the first n, the first slot bound to the same buffer."""
    first = {}
    return tuple([first.setdefault(id(table[i]), i) for i in range(n)])


def dispatches_in(commands):
    """The dispatches among `commands`, those in region bodies too."""
    for c in commands:
        if type(c) is Dispatch:
            yield c
        elif type(c) is Region:
            yield from dispatches_in((<Region>c).body.commands)
