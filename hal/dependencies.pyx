"""The planner: which recorded commands wait for which, and how a backend lays that out (compiled).

`Planner` turns the recorded commands into a Program (hal.program), for both dependency modes and both
recording strategies: deferred command buffers plan every segment at end(), single_pass ones each
command as it is recorded (the backend may emit it at once). Three things come out:

- the DAG: each command's predecessor *group*, a set of earlier commands it waits for. Commands sharing
  a set share one group, so an m-to-n barrier step costs m + n, not m * n.
  - barriers mode (Vulkan semantics): a command waits for every command of the previous non-empty segment.
  - hazards mode (XLA style): a command waits for an earlier command of an earlier segment only if their
    byte ranges overlap and one writes; the result is transitively reduced. Ranges are indexed per buffer
    in interval maps holding, for each piece of a buffer, its last writers and the readers since, so the
    work per command depends on what it overlaps, not on the length of the program. Slot references may
    be bound to any buffer, so once one appears every range is tracked in one shared map (conservative).
- barrier flags for a replay in recording order: before a command (deferred: a segment) that waits for
  one recorded since the last barrier;
- the graph layout: the commands of a segment run in at most `lanes` chains (command j waits for command
  j - width of its segment, which only adds order: they are unordered anyway), what waits for a segment
  waits for the last command of each lane, and a group with several members shared by several commands
  goes through one empty join node. deferred sees each segment whole and uses the fewest lanes of the
  same depth (98 commands: 49 lanes of 2, not 64).

`RaceDetector` is the record-time validation twin: inside one segment nothing is ordered, so two
overlapping accesses of which one writes are a race.
"""

from bisect import bisect_left, bisect_right

from libcpp.algorithm cimport lower_bound, upper_bound
from hal.commands cimport Copy, Dispatch, Fill, Update

from hal.errors import ValidationError

END = 1 << 62  # the open end of a slot range whose length only the bound buffer will tell
SEARCH_BUDGET = 256  # commands a transitive-reduction search may visit per new command
_UNIVERSE = "all buffers"


cpdef tuple access_range(BufferRef ref, tuple table=None):
    """(key, start, end) of a reference: key is the Buffer, or the slot index for slot references
    (the bound Buffer when a binding table is given)."""
    cdef Buffer b = ref.buffer
    if b is None:
        if table is None:
            return ref.slot, ref.offset, ref.offset + ref.nbytes if ref.bounded else END
        b = table[ref.slot]
        return b, ref.offset, ref.offset + ref.nbytes if ref.bounded else b.size
    return b, ref.offset, ref.offset + ref.nbytes


cpdef tuple refs_and_writes(Command command):
    """The references `command` accesses and, for each, whether it writes it."""
    cdef type kind = type(command)
    if kind is Dispatch:
        return (<Dispatch>command).bindings, (<Dispatch>command).writes
    if kind is Copy:
        return ((<Copy>command).source, (<Copy>command).target), (False, True)
    if kind is Fill:
        return ((<Fill>command).target,), (True,)
    return ((<Update>command).target,), (True,)


cpdef Py_ssize_t lane_width(Py_ssize_t size, Py_ssize_t lanes):
    """The lanes a segment of `size` commands runs in under a limit of `lanes` (0: none): the fewest that
    are as deep as `lanes` lanes would be (98 commands: 49 lanes of 2, not 64)."""
    if lanes == 0 or size <= lanes:
        return size
    cdef Py_ssize_t depth = (size + lanes - 1) // lanes
    return (size + depth - 1) // depth


cdef class Planner:
    """Builds a Program: `add()` command by command (single_pass), or `plan()` whole segments at end()
    (deferred); `program` is the result."""

    def __init__(self, str dependencies, Py_ssize_t lanes, bint single_pass):
        if dependencies not in ("barriers", "hazards"):
            raise ValidationError(f"dependencies must be 'barriers' or 'hazards', got {dependencies!r}")
        self.program = Program(dependencies, lanes)
        self.hazards = dependencies == "hazards"
        self.single_pass = single_pass
        self.lanes = lanes
        self.tracker = HazardTracker() if self.hazards else None
        self.interned = {}
        self.dag_segment = self.barrier_segment = self.layout_segment = -1
        self.open_start = 0
        self.open_group = -1
        self.fence = 0
        self.joins = {}

    cpdef add(self, Command command):
        """single_pass: plan `command` (the next in recording order): its group, its barrier flag (a barrier
        before it when it waits for a command since the last one) and its graph node(s)."""
        self.dag(command)
        cdef Program program = self.program
        cdef Py_ssize_t g = program.group_of[command.index]
        cdef bint needs
        if self.hazards:
            needs = g >= 0 and program.group_last[g] >= self.fence
        else:
            needs = command.segment != self.barrier_segment and self.barrier_segment >= 0
        self.barrier_segment = command.segment
        if needs:
            self.fence = command.index
        program.barrier.push_back(needs)
        self.lay_out(command, -1, True)

    cpdef plan(self, list segments):
        """deferred: plan every command of `segments` (lists of commands, in order) at once."""
        cdef Program program = self.program
        cdef list commands
        cdef Command c
        cdef Py_ssize_t g
        cdef bint needs, first = True
        for commands in segments:
            for c in commands:
                self.dag(c)
        for commands in segments:
            if not commands:
                continue
            if self.hazards:
                needs = False
                for c in commands:
                    g = program.group_of[c.index]
                    if g >= 0 and program.group_last[g] >= self.fence:
                        needs = True
                        break
            else:
                needs = not first
            first = False
            if needs:
                self.fence = (<Command>commands[0]).index
            program.barrier.push_back(needs)
            for _ in range(len(commands) - 1):
                program.barrier.push_back(False)
        self.uses.resize(program.group_last.size())
        for g in program.group_of:
            if g >= 0:
                self.uses[g] += 1
        for commands in segments:
            for c in commands:
                self.lay_out(c, len(commands), False)

    cdef void dag(self, Command command):
        cdef Program program = self.program
        cdef vector[Py_ssize_t] preds
        cdef Py_ssize_t i, g
        if self.hazards:
            found = self.tracker.add(command, program)
            if not found:
                g = -1
            else:
                g = self.interned.get(found, -1)
                if g < 0:
                    for i in found:
                        preds.push_back(i)
                    g = program.add_group(preds)
                    self.interned[found] = g
            program.group_of.push_back(g)
            return
        if command.segment != self.dag_segment:  # the first command of a new non-empty segment
            if self.dag_segment >= 0:
                for i in range(self.open_start, command.index):
                    preds.push_back(i)
                self.open_group = program.add_group(preds)
            self.open_start = command.index
            self.dag_segment = command.segment
        program.group_of.push_back(self.open_group)

    cdef void lay_out(self, Command command, Py_ssize_t size, bint shared):
        """Add the graph node of `command` (after a join node, if it is the first to wait on a shared group).
        `size`: its segment's length when known (deferred), else -1."""
        cdef Program program = self.program
        cdef Py_ssize_t index = command.index, g, behind, width
        cdef vector[Py_ssize_t] deps
        if command.segment != self.layout_segment:
            self.layout_segment = command.segment
            self.layout_start = index
            if size >= 0:
                width = lane_width(size, self.lanes)
            else:
                width = self.lanes if self.lanes else END
            self.layout_width = width
            program.segment_start.push_back(index)
            program.segment_width.push_back(width if width != END else 0)
        g = program.group_of[index]
        behind = index - self.layout_width  # the command before this one in its lane, if of this segment
        if behind >= self.layout_start and (g < 0 or program.group_of[behind] == g):
            deps.push_back(program.command_node[behind])  # it waited for what this one waits for
        else:
            if behind >= self.layout_start:
                deps.push_back(program.command_node[behind])
            if g >= 0:
                self.fan_in(g, deps, shared or self.uses[g] > 1)
        program.add_node(index, deps)

    cdef void fan_in(self, Py_ssize_t group, vector[Py_ssize_t]& deps, bint shared):
        """Append to `deps` the nodes a command of `group` waits on: of each lane only its last command in
        the group (the others come before it); through one join node when the group is `shared`."""
        cdef Program program = self.program
        cdef Py_ssize_t first = program.group_start[group], stop = program.group_start[group + 1], k, p, i, start
        cdef vector[Py_ssize_t] preds
        if stop - first == 1:  # a chain
            deps.push_back(program.command_node[program.members[first]])
            return
        join = self.joins.get(group)
        if join is not None:
            deps.push_back(join)
            return
        for i in range(first, stop):
            preds.push_back(program.members[i])
        if self.lanes and <Py_ssize_t>preds.size() > self.lanes:
            k = _segment_of(program, preds.back())
            if program.segment_start[k] <= preds.front() and \
                    preds.back() - preds.front() == <Py_ssize_t>preds.size() - 1:
                # A run of one segment (a whole segment, in barriers mode): any `width` commands in a row hold
                # one of each lane, so the last `width` of the run end the lanes.
                preds.erase(preds.begin(), preds.end() - program.segment_width[k])
        if self.lanes and <Py_ssize_t>preds.size() > self.lanes:
            seen = set()
            tails = []
            for i in range(preds.size() - 1, -1, -1):
                p = preds[i]
                k = _segment_of(program, p)
                start = program.segment_start[k]
                lane = (start, (p - start) % program.segment_width[k])
                if lane not in seen:
                    seen.add(lane)
                    tails.append(p)
            preds.clear()
            for p in reversed(tails):
                preds.push_back(p)
        cdef vector[Py_ssize_t] nodes
        for p in preds:
            nodes.push_back(program.command_node[p])
        if preds.size() == 1 or not shared:
            for p in nodes:
                deps.push_back(p)
            return
        join = program.node_command.size()
        program.add_node(-1, nodes)
        self.joins[group] = join
        deps.push_back(join)

    def finish(self, tuple commands, dict slot_users, Py_ssize_t slots_needed) -> Program:
        """Freeze the program: `commands` in recording order, and which commands use each slot."""
        self.program.freeze(commands, slot_users, slots_needed)
        return self.program


cdef Py_ssize_t _segment_of(Program program, Py_ssize_t index):
    """The position in program.segment_start of the segment holding command `index`."""
    cdef Py_ssize_t lo = 0, hi = program.segment_start.size(), mid
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if program.segment_start[mid] <= index:
            lo = mid
        else:
            hi = mid
    return lo


cdef class HazardTracker:
    """Hazards mode: the earlier commands each new command must wait for (transitively reduced)."""

    def __init__(self):
        self.maps = {}
        self.shared = False
        self.segment_of = []
        self.touched = []  # per command: its ranges, flat (map, start, end)*

    cdef tuple add(self, Command command, Program program):
        """The predecessors of `command` (the next in recording order), in recording order."""
        cdef Py_ssize_t index = command.index, segment = command.segment
        cdef list segment_of = self.segment_of
        cdef BufferRef r
        cdef _AccessMap amap
        segment_of.append(segment)
        self.stamp.push_back(-1)
        refs, writes = refs_and_writes(command)
        if not self.shared:
            for r in refs:
                if r.buffer is None:
                    self._share()
                    break
        found = {}
        touched = []
        maps = self.maps
        for i in range(len(refs)):
            r = refs[i]
            write = writes[i]
            key, start, end = access_range(r)
            if self.shared:
                key = _UNIVERSE
            amap = maps.get(key)
            if amap is None:
                amap = maps[key] = _AccessMap()
            amap.collect(start, end, write, segment, segment_of, found)
            touched.append((amap, start, end, write))
        for amap, start, end, write in touched:
            amap.record(start, end, write, index, segment, segment_of)
        flat = []  # (map, start, end) triples, flat: one tracked object per command
        for amap, start, end, _ in touched:
            flat += (amap, start, end)
        self.touched.append(tuple(flat))
        if len(found) > 1:
            self._prune_read_writers(found)
        return self._reduce(found, index, program)

    def _share(self):
        """From the first slot reference on, every range may alias every other: merge the maps."""
        merged = _AccessMap()
        for amap in self.maps.values():
            merged.absorb(amap)
        self.maps = {_UNIVERSE: merged}
        self.shared = True

    def _prune_read_writers(self, dict found):
        """Drop writer w when another candidate d, recorded after w in a later segment, touched a range
        that w alone last wrote: d then waited for w. This settles in O(candidates) the common long-range
        case (weights written once, read by every step of a long chain) that a graph search would have to
        walk the whole chain for."""
        segment_of, touched_of = self.segment_of, self.touched
        for w, regions in list(found.items()):
            if not regions:
                continue
            sw = segment_of[w]
            for d in found:
                if d > w and segment_of[d] > sw and _touches(touched_of[d], regions):
                    del found[w]
                    break

    cdef tuple _reduce(self, dict found, Py_ssize_t index, Program program):
        """Drop candidates reachable from another candidate (transitive reduction of the new edges).

        Candidates are visited from the most recent; a backward search from each kept one marks its
        ancestors, never going below the oldest candidate, since nothing there can reach one. The search
        visits at most SEARCH_BUDGET commands per new command, so end() stays linear; an edge whose
        redundancy only a deeper search would show is kept (it orders nothing new).
        """
        if len(found) < 2:
            return tuple(found)
        order = sorted(found, reverse=True)
        cdef Py_ssize_t lowest = order[-1], budget = SEARCH_BUDGET, d, g, p, i
        cdef vector[Py_ssize_t] stack
        keep = []
        for d in order:
            if self.stamp[d] == index:
                continue
            keep.append(d)
            stack.push_back(d)
            while stack.size() and budget > 0:
                g = program.group_of[stack.back()]
                stack.pop_back()
                if g < 0:
                    continue
                for i in range(program.group_start[g], program.group_start[g + 1]):
                    p = program.members[i]
                    if p >= lowest and self.stamp[p] != index:
                        self.stamp[p] = index
                        stack.push_back(p)
                        budget -= 1
            stack.clear()
        keep.reverse()
        return tuple(keep)


def _touches(tuple flat, list regions):
    """Does a command's flat (map, start, end)* tuple overlap one of `regions`?"""
    for i in range(0, len(flat), 3):
        m, s2, e2 = flat[i], flat[i + 1], flat[i + 2]
        for am, s, e in regions:
            if m is am and s < e2 and s2 < e:
                return True
    return False


cdef class _AccessMap:
    """Disjoint sorted pieces of one buffer, each with its last writers and the readers since.

    `floors[i]`: the segment of the last write that covered piece i. Entries of segments below it are
    ordered before that write, so commands of later segments may skip them; commands of the floor
    segment itself are not ordered after that write and still see them."""

    cdef list starts, ends, writers, readers, floors

    def __init__(self):
        self.starts = []
        self.ends = []
        self.writers = []
        self.readers = []
        self.floors = []

    def collect(self, start, end, write, segment, list segment_of, dict found):
        """Add to `found` the commands of earlier segments that an access must wait for; a writer
        comes with the ranges it alone last wrote (see HazardTracker._prune_read_writers)."""
        starts, ends, writers, readers, floors = self.starts, self.ends, self.writers, self.readers, self.floors
        i = bisect_right(ends, start)
        n = len(starts)
        while i < n and starts[i] < end:
            low = 0 if floors[i] == segment else floors[i]
            ws = writers[i]
            for w in ws:
                if low <= segment_of[w] < segment:
                    regions = found.get(w)
                    if regions is None:
                        regions = found[w] = []
                    # Only a lone writer that set the piece's floor wrote all of it; entries kept
                    # through merges may have written only part of the merged range.
                    if len(ws) == 1 and floors[i] == segment_of[w]:
                        regions.append((self, max(start, starts[i]), min(end, ends[i])))
            if write:
                for r in readers[i]:
                    if low <= segment_of[r] < segment and r not in found:
                        found[r] = []
            i += 1

    def record(self, start, end, write, index, segment, list segment_of):
        lo = self._split(start)
        hi = self._split(end)
        if write:
            # Keep what commands of this segment can still see: accesses of this segment (a race when
            # not validated) and the earlier ones this write hides only from later segments.
            writers = [index]
            readers = []
            for j in range(lo, hi):
                low = 0 if self.floors[j] == segment else self.floors[j]
                writers += [w for w in self.writers[j] if w != index and low <= segment_of[w] <= segment]
                readers += [r for r in self.readers[j] if low <= segment_of[r] <= segment]
            if hi - lo > 1:  # pieces share entries: without this, merged lists could double each time
                writers = list(dict.fromkeys(writers))
                readers = list(dict.fromkeys(readers))
            self.starts[lo:hi] = [start]
            self.ends[lo:hi] = [end]
            self.writers[lo:hi] = [writers]
            self.readers[lo:hi] = [readers]
            self.floors[lo:hi] = [segment]
            return
        cursor, j = start, lo
        while j < hi:
            if self.starts[j] > cursor:
                self._insert(j, cursor, self.starts[j], [], [index], 0)
                j += 1
                hi += 1
            rs = self.readers[j]
            if not rs or rs[-1] != index:
                rs.append(index)
            cursor = self.ends[j]
            j += 1
        if cursor < end:
            self._insert(j, cursor, end, [], [index], 0)

    def absorb(self, _AccessMap other):
        """Union `other` into this map: every piece keeps the writers and readers of both."""
        for s, e, ws, rs, fl in zip(other.starts, other.ends, other.writers, other.readers, other.floors):
            lo = self._split(s)
            hi = self._split(e)
            cursor, j = s, lo
            while j < hi:
                if self.starts[j] > cursor:
                    self._insert(j, cursor, self.starts[j], [], [], fl)
                    hi += 1
                self.writers[j] = sorted(set(self.writers[j]).union(ws))
                self.readers[j] = sorted(set(self.readers[j]).union(rs))
                if self.floors[j] != fl:
                    self.floors[j] = 0  # hide nothing: each side hid different entries
                cursor = self.ends[j]
                j += 1
            if cursor < e:
                self._insert(j, cursor, e, list(ws), list(rs), fl)

    def _split(self, x):
        """Make x a piece boundary; returns the index of the first piece starting at or after x."""
        i = bisect_right(self.ends, x)
        if i < len(self.starts) and self.starts[i] < x:
            self._insert(i + 1, x, self.ends[i], self.writers[i][:], self.readers[i][:], self.floors[i])
            self.ends[i] = x
            return i + 1
        return i

    def _insert(self, i, start, end, writers, readers, floor):
        self.starts.insert(i, start)
        self.ends.insert(i, end)
        self.writers.insert(i, writers)
        self.readers.insert(i, readers)
        self.floors.insert(i, floor)


cdef class RaceDetector:
    """The accesses of the current segment: per buffer (or slot) key, the unions of its written and of its
    read ranges.

    The first command of a segment cannot race, so the recorder indexes it (`rebuild`) only when a second
    command arrives: a chain of one command per segment pays nothing for the check. A reference read with
    no write of the segment overlapping it stays in `quiet` until its key is written again, so reading
    it again (a weight every dispatch of a segment reads) costs one set lookup.
    """

    def __init__(self):
        self.ranges = {}
        self.quiet = set()

    cpdef reset(self):
        self.ranges.clear()
        self.quiet.clear()

    cpdef rebuild(self, list segment, tuple table=None):
        """Index exactly the commands of `segment`, accepted ones: nothing among them is searched for."""
        self.reset()
        cdef Command c
        for c in segment:
            refs, writes = refs_and_writes(c)
            self.add(c, refs, writes, [], table)

    cpdef add(self, Command command, tuple refs, tuple writes, list segment, tuple table=None):
        """Check `command`, which accesses `refs[i]` (writing it if `writes[i]`), against the ranges indexed
        so far, then index it. With a binding table, slots are keyed by the buffers bound to them. On a
        race, `segment` is searched for the partner and indexed again (the command's earlier accesses are
        forgotten), then ValidationError is raised.

        One pass: ranges are merged as they are checked. An overlap found may be with the command's own
        earlier access (legal); only on that rare path are the other commands searched.
        """
        cdef dict ranges = self.ranges
        cdef set quiet = self.quiet
        cdef BufferRef r
        cdef Py_ssize_t i, start, end
        cdef bint write, clash
        cdef _Ranges state
        for i in range(len(refs)):
            r = refs[i]
            write = writes[i]
            if not write and r in quiet:
                continue
            key = r.buffer
            if key is None:
                key, start, end = access_range(r, table)
            else:
                start = r.offset
                end = r.offset + r.nbytes
            state = ranges.get(key)
            if state is None:
                state = ranges[key] = _Ranges.__new__(_Ranges)
                state.quiet = []
                clash = False
            else:
                clash = _overlaps(state.ws, state.we, start, end) or (write and _overlaps(state.rs, state.re, start, end))
            if clash:
                other = _partner(command, key, start, end, write, segment, table)
                if other is not None:
                    self.rebuild(segment, table)
                    _raise_race(command, key, start, end, write, other)
            if write:
                if state.quiet:  # this write may overlap them
                    quiet.difference_update(state.quiet)
                    state.quiet.clear()
                _union(state.ws, state.we, start, end)
            else:
                if not clash:  # an overlap with the command's own write must not be skipped later
                    quiet.add(r)
                    state.quiet.append(r)
                _union(state.rs, state.re, start, end)


cdef class _Ranges:
    """The unions of the written (ws, we) and of the read (rs, re) ranges of one key, each as sorted
    disjoint intervals; `quiet` lists the key's references in RaceDetector.quiet."""

    cdef vector[Py_ssize_t] ws, we, rs, re
    cdef list quiet


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


cdef object _partner(Command command, object key, Py_ssize_t start, Py_ssize_t end, bint write, list segment,
                     tuple table):
    """The earlier command of `segment` whose access conflicts with this one, if any."""
    cdef Command other
    for other in segment:
        if other.index >= command.index:
            break
        refs, writes = refs_and_writes(other)
        for o, other_write in zip(refs, writes):
            okey, ostart, oend = access_range(o, table)
            if okey == key and ostart < end and start < oend and (write or other_write):
                return other, ostart, oend, other_write
    return None


cdef void _raise_race(Command command, object key, Py_ssize_t start, Py_ssize_t end, bint write,
                      tuple other) except *:
    o, ostart, oend, other_write = other
    what = f"slot {key}" if type(key) is int else "one buffer"
    raise ValidationError(
        f"race: command {command.index} ({command.kind}) {'writes' if write else 'reads'} bytes "
        f"[{start}, {end if end != END else 'end'}) of {what} that command {o.index} ({o.kind}) "
        f"{'writes' if other_write else 'reads'} ([{ostart}, {oend if oend != END else 'end'})) in the same "
        f"segment; record an execution_barrier() between them")
