"""Record-time race detection: inside one segment nothing is ordered, so two overlapping accesses of which one
writes are a race (compiled). The recorder (hal.command_buffer) feeds it the commands of each segment.
"""

cimport cython
from cpython.object cimport PyObject
from cython.operator cimport dereference as deref
from libcpp.algorithm cimport lower_bound, upper_bound
from libcpp.vector cimport vector

from hal.accesses cimport OPEN_END, refs_and_writes
from hal.buffer cimport Buffer, BufferRef
from hal.commands cimport Call, Collective, Command, Copy, Dispatch, Region

from hal.errors import ValidationError


cdef class RaceDetector:
    """The accesses of the current segment: per key (a buffer's serial; a slot's, -1 - slot, without a binding
    table), the unions of its written and of its read ranges.

    The first command of a segment cannot race, so the recorder indexes it (`rebuild`) only when a second
    command arrives: a chain of one command per segment pays nothing for the check. A reference read with
    no write of the segment overlapping it stays in `quiet` until its key is written again, so reading
    it again (a weight every dispatch of a segment reads) costs one lookup. Everything is kept in C tables
    whose memory serves the next segment.
    """

    def __init__(self):
        self.used = 0
        self.held = []

    cpdef reset(self):
        cdef Py_ssize_t k
        for k in range(self.used):
            self.keys[k].ws.clear()
            self.keys[k].we.clear()
            self.keys[k].rs.clear()
            self.keys[k].re.clear()
            self.keys[k].quiet.clear()
        self.used = 0
        self.index.clear()
        self.quiet.clear()
        self.held.clear()

    cpdef rebuild(self, list commands, Py_ssize_t first=0, tuple table=None):
        """Index exactly the segment's commands, commands[first:], accepted ones: nothing among them is searched
        for."""
        self.reset()
        cdef Py_ssize_t i
        for i in range(first, len(commands)):
            refs, writes = refs_and_writes(commands[i])
            self.add(commands[i], refs, writes, commands, len(commands), table)

    @cython.boundscheck(False)  # i runs over refs, and writes holds a flag for each (refs_and_writes)
    @cython.wraparound(False)
    cdef int add(self, Command command, tuple refs, tuple writes, list commands, Py_ssize_t first=0,
                 tuple table=None) except -1:
        """Check `command`, which accesses `refs[i]` (writing it if `writes[i]`), against the ranges indexed
        so far, then index it. With a binding table, slots are keyed by the buffers bound to them. On a
        race, the segment, commands[first:], is searched for the partner and indexed again (the command's
        earlier accesses are forgotten), then ValidationError is raised.

        One pass: ranges are merged as they are checked. An overlap found may be with the command's own
        earlier access (legal); only on that rare path are the other commands searched.
        """
        cdef BufferRef r
        cdef Py_ssize_t i, k, key, start, end
        cdef bint write, clash
        cdef KeyRanges* state
        cdef PyObject* quiet
        cdef unordered_map[Py_ssize_t, Py_ssize_t].iterator found
        for i in range(len(refs)):
            r = <BufferRef>refs[i]  # (checked when recorded)
            write = writes[i]
            if not write and self.quiet.count(<PyObject*>r):
                continue
            key = _race_key(r, table, &start, &end)
            found = self.index.find(key)
            if found == self.index.end():  # the key's first access in the segment
                k = self.used
                self.used += 1
                if <Py_ssize_t>self.keys.size() < self.used:
                    self.keys.resize(self.used)
                self.index[key] = k
                state = &self.keys[k]
                clash = False
            else:
                state = &self.keys[deref(found).second]
                clash = _overlaps(state.ws, state.we, start, end) or \
                    (write and _overlaps(state.rs, state.re, start, end))
            if clash:
                other = _partner(command, key, start, end, write, commands, first, table)
                if other is not None:
                    self.rebuild(commands, first, table)
                    _raise_race(command, i, key, start, end, write, other)
            if write:
                for quiet in state.quiet:  # this write may overlap them
                    self.quiet.erase(quiet)
                state.quiet.clear()
                _union(state.ws, state.we, start, end)
            else:
                if not clash:  # an overlap with the command's own write must not be skipped later
                    self.held.append(r)  # first: a pointer in `quiet` is always held
                    self.quiet.insert(<PyObject*>r)
                    state.quiet.push_back(<PyObject*>r)
                _union(state.rs, state.re, start, end)
        return 0


cdef RaceDetector _spare_detector = None  # one a command buffer gave back at end(), reset: its tables serve the next


cdef RaceDetector take_race_detector():
    """A detector for a command buffer that begins recording: the spare one if any (a fresh detector's tables are
    allocated anew, a cost a short recording feels), else a new one."""
    global _spare_detector
    cdef RaceDetector detector = _spare_detector
    if detector is None:
        return RaceDetector()
    _spare_detector = None
    return detector


cdef void give_back_race_detector(RaceDetector detector) except *:
    """Keep `detector`, reset, as the spare: a command buffer gives it back when its recording is over. Not kept if its
    tables grew past SPARE_KEYS keys or SPARE_RANGES ranges (their memory would stay held as long as the process)."""
    global _spare_detector
    cdef Py_ssize_t k, ranges = 0
    for k in range(detector.keys.size()):
        ranges += detector.keys[k].ws.capacity() + detector.keys[k].rs.capacity() + detector.keys[k].quiet.capacity()
    if <Py_ssize_t>detector.keys.size() <= SPARE_KEYS and ranges <= SPARE_RANGES:
        detector.reset()
        _spare_detector = detector


cdef Py_ssize_t _race_key(BufferRef r, tuple table, Py_ssize_t* start, Py_ssize_t* end) except? -2:
    """A reference's key in RaceDetector (see there), and its byte range in `start` and `end`."""
    cdef Buffer b = r.buffer
    start[0] = r.offset
    if b is None:
        if table is None:
            end[0] = r.offset + r.nbytes if r.bounded else OPEN_END
            return -1 - r.slot
        b = table[r.slot]
        end[0] = r.offset + r.nbytes if r.bounded else b.size
        return b.serial
    end[0] = r.offset + r.nbytes
    return b.serial


cdef bint _overlaps(vector[Py_ssize_t]& starts, vector[Py_ssize_t]& ends, Py_ssize_t start, Py_ssize_t end):
    """Does [start, end) overlap one of the intervals? The extents settle the common cases."""
    if starts.empty() or start >= end or start >= ends.back() or end <= starts.front():
        return False
    cdef Py_ssize_t i = upper_bound(ends.begin(), ends.end(), start) - ends.begin()  # the first ending past start
    return starts[i] < end


cdef void _union(vector[Py_ssize_t]& starts, vector[Py_ssize_t]& ends, Py_ssize_t start, Py_ssize_t end):
    """Add [start, end) to the intervals, merging those it overlaps or touches. Appending past the end, or
    growing the last interval, is the common case."""
    if start >= end:
        return
    if ends.empty() or start > ends.back():
        starts.push_back(start)
        ends.push_back(end)
        return
    if start >= starts.back():  # touches or overlaps the last interval only
        if end > ends.back():
            ends[ends.size() - 1] = end
        return
    cdef Py_ssize_t i = lower_bound(ends.begin(), ends.end(), start) - ends.begin()  # the first ending at or past start
    cdef Py_ssize_t j = upper_bound(starts.begin(), starts.end(), end) - starts.begin()  # the first starting past end
    if i < j:
        start = min(start, starts[i])
        end = max(end, ends[j - 1])
        starts.erase(starts.begin() + i, starts.begin() + j)
        ends.erase(ends.begin() + i, ends.begin() + j)
    starts.insert(starts.begin() + i, start)
    ends.insert(ends.begin() + i, end)


cdef object _partner(Command command, Py_ssize_t key, Py_ssize_t start, Py_ssize_t end, bint write, list commands,
                     Py_ssize_t first, tuple table):
    """The earlier command of the segment, commands[first:], whose access conflicts with this one, if any."""
    cdef Command other
    cdef Py_ssize_t ostart, oend
    for other in commands[first:]:
        if other.index >= command.index:
            break
        refs, writes = refs_and_writes(other)
        for position, (o, other_write) in enumerate(zip(refs, writes)):
            if _race_key(o, table, &ostart, &oend) == key and ostart < end and start < oend and \
                    (write or other_write):
                return other, position, ostart, oend, other_write
    return None


cdef void _raise_race(Command command, Py_ssize_t position, Py_ssize_t key, Py_ssize_t start, Py_ssize_t end,
                      bint write, tuple other) except *:
    o, other_position, ostart, oend, other_write = other
    what = f"slot {-1 - key}" if key < 0 else "one buffer"
    raise ValidationError(
        f"race: command {command.index} ({command.kind}) {'writes' if write else 'reads'} bytes "
        f"[{start}, {end if end != OPEN_END else 'end'}) of {what} that command {o.index} ({o.kind}) "
        f"{'writes' if other_write else 'reads'} ([{ostart}, {oend if oend != OPEN_END else 'end'})) in the same "
        f"segment; record an execution_barrier() between them (command {command.index}'s "
        f"{_reference_name(command, position)}, command {o.index}'s {_reference_name(o, other_position)})")


cdef str _reference_name(Command command, Py_ssize_t position):
    """What the user called reference `position` of refs_and_writes(command), and the slot it goes through."""
    refs, _ = refs_and_writes(command)
    cdef BufferRef r = refs[position]
    cdef type kind = type(command)
    if kind is Dispatch:
        name = f"bindings[{position}]" if position < len((<Dispatch>command).bindings) else "parameters"
    elif kind is Copy:
        name = ("source", "target")[position]
    elif kind is Region:
        name = "condition" if r is (<Region>command).condition else "body's reference"
    elif kind is Collective:
        name = "source" if r is (<Collective>command).source else "target"
    elif kind is Call:
        name = f"bindings[{position}]"
    else:
        name = "target"
    return name if r.buffer is not None else f"{name} = slot {r.slot}"


