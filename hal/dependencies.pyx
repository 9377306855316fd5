"""The planner: which recorded commands wait for which, and how a backend lays that out (compiled).

`Planner` turns the recorded commands into a Program (hal.program), for both dependency modes and both
recording strategies: deferred command buffers plan every segment at end(), single_pass ones each
command as it is recorded (the backend may emit it at once). Three things come out:

- the DAG: each command's predecessor *group*, a set of earlier commands it waits for. Commands sharing
  a set share one group, so an m-to-n barrier step costs m + n, not m * n.
  - barriers mode (Vulkan semantics): a command waits for every command of the previous non-empty segment.
  - hazards mode (XLA style): a command waits for an earlier command of an earlier segment only if their
    byte ranges overlap and one writes; the result is transitively reduced (see HazardTracker). Ranges are
    indexed per buffer in interval maps holding, for each piece of a buffer, its last writers and the readers
    since, so the work per command depends on what it overlaps, not on the length of the program; a chain
    compares each command with the one before it alone. Slot references may be bound to any buffer, so once
    one appears every range is tracked in one shared map (conservative).
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

cimport cython
from cython.operator cimport dereference as deref
from libcpp.algorithm cimport lower_bound, reverse, sort, unique, upper_bound
from libcpp.utility cimport move
from hal.commands cimport Collective, Copy, Dispatch, Fill, Region, Update

from hal.errors import ValidationError

# The open end of a slot range whose length only the bound buffer will tell. Held in C: a module global is a dict
# lookup at every use on Python 3.12 and later (Cython caches it by the dict's version only before 3.12).
cdef Py_ssize_t END = 1 << 62
SEARCH_BUDGET = 256  # commands a transitive-reduction search may visit per new command


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
    cdef Dispatch d
    if kind is Dispatch:
        d = <Dispatch>command
        if d.parameters is None:
            return d.bindings, d.writes
        return d.bindings + (d.parameters,), d.writes + (False,)  # the workgroup counts are read
    if kind is Copy:
        return ((<Copy>command).source, (<Copy>command).target), (False, True)
    if kind is Fill:
        return ((<Fill>command).target,), (True,)
    if kind is Region:
        return (<Region>command).refs, (<Region>command).writes
    if kind is Collective:
        return _collective_accesses(<Collective>command)
    return ((<Update>command).target,), (True,)


cdef tuple _collective_accesses(Collective c):
    """A collective reads its source, writes its target and its communicator's order token."""
    if c.source is None:
        return (c.target, c.order), (True, True)
    if c.target is None:
        return (c.source, c.order), (False, True)
    return (c.source, c.target, c.order), (False, True, True)


cdef Py_ssize_t segment_end(tuple commands, Py_ssize_t start):
    """The end of the segment that begins at `start`: consecutive commands with the same `segment` (a barrier between
    two commands gives the later one a higher count)."""
    cdef Py_ssize_t stop = start + 1, segment = (<Command>commands[start]).segment
    while stop < len(commands) and (<Command>commands[stop]).segment == segment:
        stop += 1
    return stop


cpdef Py_ssize_t lane_width(Py_ssize_t size, Py_ssize_t lanes):
    """The lanes a segment of `size` commands runs in under a limit of `lanes` (0: none): the fewest that
    are as deep as `lanes` lanes would be (98 commands: 49 lanes of 2, not 64)."""
    if lanes == 0 or size <= lanes:
        return size
    cdef Py_ssize_t depth = (size + lanes - 1) // lanes
    return (size + depth - 1) // depth


@cython.auto_pickle(False)  # a copy would share its HazardTracker, given back by each
cdef class Planner:
    """Builds a Program: `add()` command by command (single_pass), or `plan()` whole segments at end()
    (deferred); `program` is the result."""

    def __init__(self, str dependencies, Py_ssize_t lanes, bint single_pass, bint layout=True):
        """`layout`: lay the graph out while planning (a backend building a graph wants it at end()); else the
        Program lays it out on first use, the same way."""
        if dependencies not in ("barriers", "hazards"):
            raise ValidationError(f"dependencies must be 'barriers' or 'hazards', got {dependencies!r}")
        self.program = Program(dependencies, lanes)
        self.hazards = dependencies == "hazards"
        self.single_pass = single_pass
        self.after_earlier, self.only_segment = True, False  # single_pass: what comes later is not known
        self.layout_now = layout
        if not layout:  # a function, not this planner: the Program must not keep its planner (nor it alive)
            self.program.layout_source = _lay_out_single_pass if single_pass else _lay_out_deferred
        self.lanes = lanes
        self.tracker = _take_tracker() if self.hazards else None
        self.dag_segment = self.barrier_segment = self.layout_segment = -1
        self.open_start = 0
        self.open_group = -1
        self.fence = 0
        self.joins = {}

    def __dealloc__(self):
        if self.tracker is not None:  # its tables' memory serves the next planner
            _give_back_tracker(self.tracker)

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
        if self.layout_now:
            self.lay_out(command, -1, True)

    cpdef plan(self, tuple commands):
        """deferred: plan every command of `commands` (in recording order) at once, segment by segment (a segment:
        the commands recorded between the same two barriers, a run of them with the same `segment`)."""
        cdef Program program = self.program
        cdef Command c
        cdef Py_ssize_t g, i, start = 0, stop, n = len(commands)
        cdef bint needs
        program.reserve(n, self.layout_now)
        if self.hazards:
            # Commands of the first segment wait for nothing; those of the only one note nothing either (else a
            # command's entries matter to the later ones of its own segment too, which may find more candidates
            # through pieces it merged: single_pass must find the same).
            self.only_segment = n == 0 or segment_end(commands, 0) == n
            self.tracker.reserve(n)
            self.lone_group.reserve(self.lone_group.size() + n)
        while start < n:
            stop = segment_end(commands, start)
            self.after_earlier = start > 0
            needs = start > 0 and not self.hazards  # barriers mode: after the first segment
            for i in range(start, stop):
                c = commands[i]
                self.dag(c)
                if self.hazards and not needs:  # a barrier when a command waits for one since the last barrier
                    g = program.group_of[c.index]
                    needs = g >= 0 and program.group_last[g] >= self.fence
            if needs:
                self.fence = (<Command>commands[start]).index
            program.barrier.push_back(needs)
            program.barrier.resize(program.barrier.size() + stop - start - 1, False)
            start = stop
        if self.layout_now:
            self.lay_out_segments(commands)

    cdef void lay_out_program(self) except *:
        """The graph layout of the whole Program, as planning would have laid it out (Program.need_layout)."""
        cdef Program program = self.program
        if self.single_pass:
            for c in program.commands:
                self.lay_out(c, -1, True)
            return
        self.lay_out_segments(program.commands)

    cdef void lay_out_segments(self, tuple commands) except *:
        """deferred: the graph layout, each segment seen whole."""
        cdef Program program = self.program
        cdef Py_ssize_t g, i, start = 0, stop
        self.uses.resize(program.group_last.size())
        for g in program.group_of:
            if g >= 0:
                self.uses[g] += 1
        while start < len(commands):
            stop = segment_end(commands, start)
            for i in range(start, stop):
                self.lay_out(commands[i], stop - start, False)
            start = stop

    cdef int dag(self, Command command) except -1:
        cdef Program program = self.program
        cdef Py_ssize_t i, g = -1
        cdef map[vector[Py_ssize_t], Py_ssize_t].iterator known
        if self.hazards:
            self.tracker.add(command, program, self.after_earlier, self.only_segment)
            self.lone_group.push_back(-1)
            if self.tracker.preds.size() == 1:  # a chain: look the group up by its member
                i = self.tracker.preds[0]
                if self.lone_group[i] < 0:
                    self.lone_group[i] = program.add_group(self.tracker.preds)
                g = self.lone_group[i]
            elif self.tracker.preds.size() > 1:
                known = self.interned.find(self.tracker.preds)
                if known != self.interned.end():
                    g = deref(known).second
                else:
                    g = program.add_group(self.tracker.preds)
                    self.interned[self.tracker.preds] = g
            program.group_of.push_back(g)
            return 0
        if command.segment != self.dag_segment:  # the first command of a new non-empty segment
            if self.dag_segment >= 0:
                self.previous.clear()
                for i in range(self.open_start, command.index):
                    self.previous.push_back(i)
                self.open_group = program.add_group(self.previous)
            self.open_start = command.index
            self.dag_segment = command.segment
        program.group_of.push_back(self.open_group)
        return 0

    cdef int lay_out(self, Command command, Py_ssize_t size, bint shared) except -1:
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
        return 0

    cdef int fan_in(self, Py_ssize_t group, vector[Py_ssize_t]& deps, bint shared) except -1:
        """Append to `deps` the nodes a command of `group` waits on: of each lane only its last command in
        the group (the others come before it); through one join node when the group is `shared`."""
        cdef Program program = self.program
        cdef Py_ssize_t first = program.group_start[group], stop = program.group_start[group + 1], k, p, i, start
        cdef vector[Py_ssize_t] preds
        if stop - first == 1:  # a chain
            deps.push_back(program.command_node[program.members[first]])
            return 0
        join = self.joins.get(group)
        if join is not None:
            deps.push_back(join)
            return 0
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
            return 0
        join = program.node_command.size()
        program.add_node(-1, nodes)
        self.joins[group] = join
        deps.push_back(join)
        return 0

    cpdef Program finish(self, tuple commands, dict slot_users, Py_ssize_t slots_needed, dict constant_users,
                         Py_ssize_t constants_needed, tuple indirect=(), tuple regions=(), tuple collectives=(),
                         tuple nested=()):
        """Freeze the program: `commands` in recording order, which commands use each slot and constant slot, the
        indirect dispatches, the regions, the collectives and the nested command buffers' ranges."""
        self.program.freeze(commands, slot_users, slots_needed, constant_users, constants_needed, indirect, regions,
                            collectives, nested)
        return self.program


def _lay_out_deferred(Program program) -> None:
    _lay_out_later(program, False)


def _lay_out_single_pass(Program program) -> None:
    _lay_out_later(program, True)


cdef void _lay_out_later(Program program, bint single_pass) except *:
    """The graph layout of a Program planned without it, by a planner of the same kind."""
    cdef Planner planner = Planner(program.dependencies, program.lane_limit, single_pass)
    planner.program = program
    planner.lay_out_program()


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
    """Hazards mode: the earlier commands each new command must wait for (transitively reduced).

    Each buffer's accesses are kept in an access map: disjoint pieces sorted by offset, each with its last
    writers and the readers since. `floor` of a piece: the segment of the last write that covered it.
    Entries of segments below it are ordered before that write, so commands of later segments may skip
    them; commands of the floor segment itself are not ordered after that write and still see them.

    Each command also keeps its `reach`: the commands below its segment, down to `reach`, that it waits for,
    every one (through its predecessors, whose reaches it joins). The candidates are gathered as met, repeats and
    all, and sorted out once (`settle`): one within the latest candidate's reach is dropped without a search; in a
    chain that settles every candidate, however long the chain (the reduction's search, which has a budget, is for
    what remains).

    A chain needs no map at all: a command that conflicts with the command before its segment, when that one was
    alone in its segment and reaches every command before it, waits for it alone (extends_chain compares their
    accesses). The maps then lag behind and catch up, in recording order, when a command needs them.
    """

    def __init__(self):
        self.reset()
        # Room for a typical command's candidates: growing one at a time costs more.
        self.found.reserve(16)
        self.wrote.reserve(8)
        self.preds.reserve(8)
        _make_room_in(self.kept_writers, self.kept_readers)  # record() swaps them into pieces

    cdef void reset(self) noexcept:
        """Track from scratch, keeping the tables' memory."""
        self.universe = -1
        self.applied = 0
        self.marks = 0
        self.segment = -1
        for i in range(RECENT):
            self.recent_buffer[i] = -1  # no serial
        self.maps.clear()
        self.map_of.clear()
        self.map_seen.clear()
        self.tracked.clear()
        self.touches.clear()
        # The scratch too: a plan that raised midway (out of memory) may have left some of it filled.
        self.found.clear()
        self.wrote.clear()
        self.preds.clear()
        self.dropped.clear()
        self.stack.clear()
        self.spans.clear()
        self.kept_writers.clear()
        self.kept_readers.clear()

    cdef int reserve(self, Py_ssize_t commands) except -1:
        """Room for `commands` more commands (deferred: known at end()), so the tables grow once."""
        self.tracked.reserve(self.tracked.size() + commands)
        self.touches.reserve(self.touches.size() + 3 * commands)  # three accesses each: a typical dispatch
        return 0

    cdef int add(self, Command command, Program program, bint earlier, bint alone) except -1:
        """Set `preds` to the predecessors of `command` (the next in recording order), in recording order.
        `earlier`: an earlier segment holds commands (else it waits for nothing); `alone`: its segment is the
        only one with commands (nothing to wait for, and no entry in the maps matters).

        The maps are brought up to date only for a command that needs them. One that waits for nothing by
        `earlier`, or one that extends a chain (see extends_chain), is answered without them and entered later
        (catch_up), in recording order, which leaves them as entering each at once would. From its first command
        on, a chain builds no map."""
        cdef Py_ssize_t segment = command.segment, first_touch = self.touches.size(), first, i, n
        cdef Touch* touch
        if segment != self.segment:
            self.segment, self.segment_first = segment, command.index
        first = self.segment_first
        self.current = command.index
        self.preds.clear()
        if alone:
            self.note(segment, first_touch)
            return 0
        _accesses(command, self.touches, first_touch)
        n = self.touches.size() - first_touch
        if self.universe < 0:
            for i in range(first_touch, first_touch + n):
                if self.touches[i].buffer < 0:  # the first slot reference
                    self.catch_up()  # the maps merge whole
                    self.share()
                    break
        for i in range(first_touch, first_touch + n):
            self.touches[i].range.map = self.map_for(self.touches[i].buffer)
        self.note(segment, first_touch)
        if not earlier:
            return 0
        if self.extends_chain(first, first_touch):
            self.preds.push_back(first - 1)
            self.tracked.back().reach = 0  # as reach_of_preds: its predecessor's, which is 0
            return 0
        self.catch_up()
        self.applied += 1  # entered below
        cdef bint distinct = True  # no two accesses share a map
        for i in range(first_touch, first_touch + n):
            touch = &self.touches[i]
            if self.map_seen[touch.range.map] == self.current:
                distinct = False
            self.map_seen[touch.range.map] = self.current
        self.found.clear()
        self.wrote.clear()
        self.latest = -1
        if distinct:  # an access's entries are then met by no other access of the command: one pass each
            for i in range(first_touch, first_touch + n):
                self.visit(self.touches[i].range, self.touches[i].write, segment)
        else:
            for i in range(first_touch, first_touch + n):
                self.collect(self.touches[i].range, self.touches[i].write, segment)
            for i in range(first_touch, first_touch + n):  # after every collect: a command never waits for itself
                self.record(self.touches[i].range, self.touches[i].write, segment)
        if not self.found.empty():
            if self.settle():
                self.reduce(program)
            else:
                self.preds.push_back(self.latest)
            self.tracked.back().reach = self.reach_of_preds(first)
        return 0

    cdef bint extends_chain(self, Py_ssize_t first, Py_ssize_t first_touch) noexcept:
        """Whether the command just noted, whose segment starts at `first` and whose accesses start at
        `first_touch`, waits for the command before its segment alone, told without the maps: that command, p,
        was alone in its segment and reaches every command before it (its `reach` is 0), and an access of the
        new command overlaps one of p's, one of the two writing. The maps would find p then (every access keeps
        its entries in the pieces over its range until a later segment hides them), as the latest candidate, and
        every other candidate within its reach: settle keeps p alone. Commands with many accesses (a region's) are
        left to the maps: comparing every pair would cost more than looking each access up."""
        cdef Py_ssize_t p = first - 1, i, k
        if p < 0 or self.tracked[p].first != p or self.tracked[p].reach != 0:
            return False
        if (<Py_ssize_t>self.touches.size() - first_touch) * (self.tracked[p].end_touch - self.tracked[p].first_touch) \
                > CHAIN_PAIRS:
            return False
        cdef Touch* mine
        cdef Touch* theirs
        for i in range(first_touch, <Py_ssize_t>self.touches.size()):
            mine = &self.touches[i]
            for k in range(self.tracked[p].first_touch, self.tracked[p].end_touch):
                theirs = &self.touches[k]
                if (mine.write or theirs.write) and _meet(mine.range, theirs.range):
                    return True
        return False

    cdef int catch_up(self) except -1:
        """Enter into the maps the accesses of the commands before the current one that add() left out."""
        cdef Py_ssize_t current = self.current, c, i
        cdef Tracked* t
        for c in range(self.applied, current):
            self.current = c  # record() enters the current command
            t = &self.tracked[c]
            for i in range(t.first_touch, t.end_touch):
                self.record(self.touches[i].range, self.touches[i].write, t.segment)
        self.current = current
        self.applied = current
        return 0

    cdef inline int note(self, Py_ssize_t segment, Py_ssize_t first_touch) except -1:
        """Append the entry of the command being added, whose accesses start at `first_touch`. Entries are filled in
        place: one built aside and copied in would be read back with wide loads just after its narrow stores,
        which stalls (no store forwarding) longer than the rest of the entry's work takes."""
        cdef Tracked* tracked = &self.tracked.emplace_back()
        tracked.segment = segment
        tracked.first = tracked.reach = self.segment_first
        tracked.visited_by = tracked.mark = -1
        tracked.first_touch = first_touch
        tracked.end_touch = self.touches.size()
        return 0

    cdef inline Py_ssize_t map_for(self, Py_ssize_t buffer) except -1:
        """The map tracking the buffer of serial `buffer`, made on first use (the shared one once a slot
        appeared)."""
        if self.universe >= 0:
            return self.universe
        cdef Py_ssize_t slot = buffer & (RECENT - 1)
        if self.recent_buffer[slot] == buffer:
            return self.recent_map[slot]
        return self.look_up_map(buffer)

    cdef Py_ssize_t look_up_map(self, Py_ssize_t buffer) except -1:
        """map_for() past its recent answers."""
        cdef Py_ssize_t slot = buffer & (RECENT - 1), m
        cdef unordered_map[Py_ssize_t, Py_ssize_t].iterator it = self.map_of.find(buffer)
        if it != self.map_of.end():
            m = deref(it).second
        else:
            m = self.maps.size()
            self.map_of[buffer] = m
            self.maps.resize(m + 1)
            self.map_seen.push_back(-1)
        self.recent_buffer[slot], self.recent_map[slot] = buffer, m
        return m

    cdef int share(self) except -1:
        """From the first slot reference on, every range may alias every other: merge the maps (in the order
        they were made) into a new one. Ranges recorded in the old maps no longer match any new range."""
        cdef vector[Piece] merged
        cdef Py_ssize_t m
        for m in range(self.maps.size()):
            _absorb(merged, self.maps[m])
            self.maps[m].clear()
        self.universe = self.maps.size()
        self.maps.push_back(move(merged))
        self.map_seen.push_back(-1)
        self.map_of.clear()
        return 0

    cdef int visit(self, Range& access, bint write, Py_ssize_t segment) except -1:
        """collect and record an access that no other access of the command shares a map with,
        in one pass over the lists when it covers exactly one piece (a whole buffer, the common case)."""
        cdef vector[Piece]* pieces = &self.maps[access.map]
        cdef Py_ssize_t i = _first_ending_after(deref(pieces), access.start), low, c, sc, kept
        cdef Piece* piece
        if i == <Py_ssize_t>pieces.size() or deref(pieces)[i].start != access.start or \
                deref(pieces)[i].end != access.end:
            self.collect(access, write, segment)
            return self.record(access, write, segment)
        piece = &deref(pieces)[i]
        low = 0 if piece.floor == segment else piece.floor
        if not write:
            for c in piece.writers:
                if low <= self.tracked[c].segment < segment:
                    self.add_candidate(c, piece, access)
            piece.readers.push_back(self.current)  # the command's own entries are in no list yet
            return 0
        # A write: the lists keep what record() keeps, in place.
        kept = 0
        for c in piece.writers:
            sc = self.tracked[c].segment
            if low <= sc < segment:
                self.add_candidate(c, piece, access)
            if low <= sc <= segment:
                piece.writers[kept] = c
                kept += 1
        piece.writers.resize(kept)
        kept = 0
        for c in piece.readers:
            sc = self.tracked[c].segment
            if low <= sc < segment:
                self.found.push_back(c)
                self.latest = max(self.latest, c)
            if low <= sc <= segment:
                piece.readers[kept] = c
                kept += 1
        piece.readers.resize(kept)
        piece.writers.push_back(self.current)
        piece.floor = segment
        return 0

    cdef inline int add_candidate(self, Py_ssize_t writer, Piece* piece, Range& access) except -1:
        """visit(): a writer found in `piece`, which `access` covers exactly."""
        cdef Wrote* wrote
        self.found.push_back(writer)
        self.latest = max(self.latest, writer)
        if piece.writers.size() == 1 and piece.floor == self.tracked[writer].segment:  # see collect
            wrote = &self.wrote.emplace_back()  # filled in place (see note)
            wrote.writer = writer
            wrote.range = access
        return 0

    cdef int collect(self, Range& access, bint write, Py_ssize_t segment) except -1:
        """Add to the candidates the commands of earlier segments that an access must wait for, and the ranges
        that writers among them alone last wrote (see settle)."""
        cdef vector[Piece]* pieces = &self.maps[access.map]
        cdef Py_ssize_t i = _first_ending_after(deref(pieces), access.start), low, w, r, sw
        cdef Piece* piece
        cdef Wrote* wrote
        while i < <Py_ssize_t>pieces.size() and deref(pieces)[i].start < access.end:
            piece = &deref(pieces)[i]
            low = 0 if piece.floor == segment else piece.floor
            for w in piece.writers:
                sw = self.tracked[w].segment
                if low <= sw < segment:
                    self.found.push_back(w)
                    self.latest = max(self.latest, w)
                    # Only a lone writer that set the piece's floor wrote all of it; entries kept
                    # through merges may have written only part of the merged range.
                    if piece.writers.size() == 1 and piece.floor == sw:
                        wrote = &self.wrote.emplace_back()  # filled in place (see note)
                        wrote.writer = w
                        wrote.range.map = access.map
                        wrote.range.start = max(access.start, piece.start)
                        wrote.range.end = min(access.end, piece.end)
            if write:
                for r in piece.readers:
                    if low <= self.tracked[r].segment < segment:
                        self.found.push_back(r)
                        self.latest = max(self.latest, r)
            i += 1
        return 0

    cdef int record(self, Range& access, bint write, Py_ssize_t segment) except -1:
        """Enter an access of the command being added into its map."""
        cdef vector[Piece]* pieces = &self.maps[access.map]
        cdef Py_ssize_t index = self.current, lo = _split(deref(pieces), access.start)
        cdef Py_ssize_t hi = _split(deref(pieces), access.end), j, low, cursor, c
        cdef Piece* piece
        cdef Piece fresh
        if write:
            # Keep what commands of this segment can still see: accesses of this segment (a race when
            # not validated) and the earlier ones this write hides only from later segments.
            if hi - lo == 1 and deref(pieces)[lo].start == access.start and deref(pieces)[lo].end == access.end:
                # One piece, exactly the range (the common case): its lists are kept in place.
                piece = &deref(pieces)[lo]
                low = 0 if piece.floor == segment else piece.floor
                self.keep_visible(piece.writers, low, segment + 1, index)
                self.keep_visible(piece.readers, low, segment + 1, -1)
                piece.writers.push_back(index)
                piece.floor = segment
                return 0
            self.kept_writers.clear()
            self.kept_readers.clear()
            for j in range(lo, hi):
                piece = &deref(pieces)[j]
                low = 0 if piece.floor == segment else piece.floor
                for c in piece.writers:
                    if c != index and low <= self.tracked[c].segment <= segment:
                        self.kept_writers.push_back(c)
                for c in piece.readers:
                    if low <= self.tracked[c].segment <= segment:
                        self.kept_readers.push_back(c)
            self.unique(self.kept_writers)  # pieces share entries: without this, merged lists could double
            self.unique(self.kept_readers)
            self.kept_writers.push_back(index)
            # The pieces become the first one (a new one if none), its lists swapped with the kept ones: the
            # scratch lists take the old ones' memory, reused next time.
            if lo == hi:
                _insert_empty(deref(pieces), lo)
            else:
                pieces.erase(pieces.begin() + lo + 1, pieces.begin() + hi)
            piece = &deref(pieces)[lo]
            piece.start, piece.end, piece.floor = access.start, access.end, segment
            piece.writers.swap(self.kept_writers)
            piece.readers.swap(self.kept_readers)
            return 0
        cursor, j = access.start, lo
        while j < hi:
            if deref(pieces)[j].start > cursor:
                _read_piece(fresh, cursor, deref(pieces)[j].start, index)
                pieces.insert(pieces.begin() + j, move(fresh))
                j += 1
                hi += 1
            piece = &deref(pieces)[j]
            if piece.readers.empty() or piece.readers.back() != index:
                piece.readers.push_back(index)
            cursor = piece.end
            j += 1
        if cursor < access.end:
            _read_piece(fresh, cursor, access.end, index)
            pieces.insert(pieces.begin() + j, move(fresh))
        return 0

    cdef int keep_visible(self, vector[Py_ssize_t]& commands, Py_ssize_t low, Py_ssize_t high,
                          Py_ssize_t other) except -1:
        """Keep, in order, the commands of segments in [low, high), but `other`."""
        cdef Py_ssize_t c, kept = 0, segment
        for c in commands:
            segment = self.tracked[c].segment
            if c != other and low <= segment < high:
                commands[kept] = c
                kept += 1
        commands.resize(kept)
        return 0

    cdef int unique(self, vector[Py_ssize_t]& commands) except -1:
        """Drop the repeats from `commands`, keeping first occurrences in order."""
        cdef Py_ssize_t c, kept = 0
        self.marks += 1
        for c in commands:
            if self.tracked[c].mark != self.marks:
                self.tracked[c].mark = self.marks
                commands[kept] = c
                kept += 1
        commands.resize(kept)
        return 0

    cdef Py_ssize_t reach_of_preds(self, Py_ssize_t first) except -1:
        """The `reach` of the command just added, whose segment starts at `first`: the lowest x such that
        its predecessors (`preds`) and what they reach cover every command in [x, first)."""
        cdef Py_ssize_t p, i, reach = first
        cdef Tracked* t
        if self.preds.size() == 1:  # a chain: no sort
            p = self.preds[0]
            t = &self.tracked[p]
            if p + 1 != first:
                return first
            return t.reach if t.first == p else p
        self.spans.clear()
        for p in self.preds:
            t = &self.tracked[p]
            self.spans.push_back(pair[Py_ssize_t, Py_ssize_t](p + 1, p))
            if t.reach < t.first:
                self.spans.push_back(pair[Py_ssize_t, Py_ssize_t](t.first, t.reach))
        sort(self.spans.begin(), self.spans.end())
        for i in range(<Py_ssize_t>self.spans.size() - 1, -1, -1):  # by end, descending: extend while touching
            if self.spans[i].first < reach:
                break
            reach = min(reach, self.spans[i].second)
        return reach

    cdef bint settle(self) except -1:
        """Drop the candidates that another one already waits for, found without a search; False when only the
        latest remains (`found` is then left as it is), else True with each remaining candidate once in `found`:
        - those within the latest candidate's reach: in a chain (each command waiting for the one before) that
          settles every candidate at once;
        - writer w when another candidate d, recorded after w in a later segment, touched a range that w alone last
          wrote: d then waited for w. This settles in O(candidates) the common long-range case (weights written
          once, read by every step of a long chain) that a graph search would have to walk the whole chain for.
          Any candidate serves as d, a dropped one too: it waited for w all the same.
        The latest candidate always stays (nothing is recorded after it, nor reaches it)."""
        cdef Py_ssize_t n = 0, a, b, c, w, d, sw, latest = self.latest, kept = 0
        cdef Tracked* t
        cdef Wrote wrote
        cdef Py_ssize_t low = self.tracked[latest].reach, high = self.tracked[latest].first
        for c in self.found:
            if c != latest and not low <= c < high:
                break
        else:  # a chain
            return False
        self.marks += 1
        self.dropped.resize(self.found.size())
        for c in self.found:
            t = &self.tracked[c]
            if t.mark != self.marks:
                t.mark = self.marks
                t.found_at = n
                self.found[n] = c
                self.dropped[n] = low <= c < high
                n += 1
        self.found.resize(n)
        for wrote in self.wrote:
            w = wrote.writer
            a = self.tracked[w].found_at
            if self.dropped[a]:
                continue
            sw = self.tracked[w].segment
            for b in range(n):
                d = self.found[b]
                if d > w and self.tracked[d].segment > sw and self.overlaps(d, wrote.range):
                    self.dropped[a] = True
                    break
        for a in range(n):
            if not self.dropped[a]:
                self.found[kept] = self.found[a]
                kept += 1
        self.found.resize(kept)
        return True

    cdef bint overlaps(self, Py_ssize_t command, Range& written) noexcept:
        """Does one of `command`'s accesses overlap `written` (in the same map)?"""
        cdef Py_ssize_t i
        for i in range(self.tracked[command].first_touch, self.tracked[command].end_touch):
            if _meet(self.touches[i].range, written):
                return True
        return False

    cdef int reduce(self, Program program) except -1:
        """Set `preds` to the candidates not reachable from another candidate (transitive reduction of the
        new edges), ascending.

        Candidates are visited from the most recent; a backward search from each kept one marks its
        ancestors, never going below the oldest candidate, since nothing there can reach one. The search
        visits at most SEARCH_BUDGET commands per new command, so end() stays linear; an edge whose
        redundancy only a deeper search would show is kept (it orders nothing new).
        """
        self.preds.clear()
        if self.found.size() < 2:
            self.preds.assign(self.found.begin(), self.found.end())
            return 0
        sort(self.found.begin(), self.found.end())
        cdef Py_ssize_t lowest = self.found.front(), budget = SEARCH_BUDGET, d, g, p, i, k
        for k in range(self.found.size() - 1, -1, -1):
            d = self.found[k]
            if self.tracked[d].visited_by == self.current:
                continue
            self.preds.push_back(d)
            self.stack.push_back(d)
            while self.stack.size() and budget > 0:
                g = program.group_of[self.stack.back()]
                self.stack.pop_back()
                if g < 0:
                    continue
                for i in range(program.group_start[g], program.group_start[g + 1]):
                    p = program.members[i]
                    if p >= lowest and self.tracked[p].visited_by != self.current:
                        self.tracked[p].visited_by = self.current
                        self.stack.push_back(p)
                        budget -= 1
            self.stack.clear()
        reverse(self.preds.begin(), self.preds.end())
        return 0


cdef HazardTracker _spare_tracker = None  # one from a dropped planner, reset: its tables' memory serves the next


cdef HazardTracker _take_tracker():
    """A tracker for a new planner: the spare one if any (a fresh tracker's tables are allocated anew and grown
    entry by entry, about a fifth of planning 10 commands), else a new one."""
    global _spare_tracker
    cdef HazardTracker tracker = _spare_tracker
    if tracker is None:
        return HazardTracker()
    _spare_tracker = None
    return tracker


cdef void _give_back_tracker(HazardTracker tracker) noexcept:
    """Keep `tracker` as the spare, reset, unless its largest tables grew past SPARE_COMMANDS commands' worth (their
    memory would stay held as long as the process)."""
    global _spare_tracker
    if tracker.tracked.capacity() <= SPARE_COMMANDS and tracker.touches.capacity() <= 4 * SPARE_COMMANDS and \
            tracker.found.capacity() <= SPARE_COMMANDS:
        tracker.reset()
        _spare_tracker = tracker


@cython.boundscheck(False)  # i runs over the bindings (refs); writes holds a flag for each by construction
@cython.wraparound(False)  # (Entry.writes, new_region)
cdef int _accesses(Command command, vector[Touch]& into, Py_ssize_t first) except -1:
    """Append to `into`, whose entries from `first` on are the command's, the accesses of `command`: refs_and_writes'
    references and flags as plain ranges (their maps left for the tracker to fill in)."""
    cdef type kind = type(command)
    cdef Dispatch dispatch
    cdef Py_ssize_t i
    if kind is Dispatch:
        dispatch = <Dispatch>command
        for i in range(len(dispatch.bindings)):  # BufferRefs, checked when recorded
            _add_access(into, first, <BufferRef>dispatch.bindings[i], dispatch.writes[i])
        if dispatch.parameters is not None:
            _add_access(into, first, dispatch.parameters, False)
    elif kind is Copy:
        _add_access(into, first, (<Copy>command).source, False)
        _add_access(into, first, (<Copy>command).target, True)
    elif kind is Fill:
        _add_access(into, first, (<Fill>command).target, True)
    elif kind is Region:
        for i in range(len((<Region>command).refs)):
            _add_access(into, first, <BufferRef>(<Region>command).refs[i], (<Region>command).writes[i])
    elif kind is Collective:
        refs, writes = _collective_accesses(<Collective>command)
        for i in range(len(refs)):
            _add_access(into, first, <BufferRef>refs[i], writes[i])
    else:
        _add_access(into, first, (<Update>command).target, True)
    return 0


cdef inline int _add_access(vector[Touch]& into, Py_ssize_t first, BufferRef ref, bint write) except -1:
    """Append an access, unless it repeats the command's previous one, `into[first:]` being the command's (a range
    bound twice in a row, as in x + x): found and entered again, it would change nothing."""
    cdef Py_ssize_t buffer = -1 if ref.buffer is None else ref.buffer.serial
    cdef Py_ssize_t start = ref.offset, end = ref.offset + ref.nbytes if ref.bounded else END
    if <Py_ssize_t>into.size() > first and into.back().buffer == buffer and into.back().range.start == start and \
            into.back().range.end == end and into.back().write == write:
        return 0
    cdef Touch* access = &into.emplace_back()  # filled in place (see HazardTracker.note)
    access.buffer, access.range.start, access.range.end, access.write = buffer, start, end, write
    return 0


cdef inline bint _meet(Range& a, Range& b) noexcept:
    """Do two ranges of one access map overlap?"""
    return a.map == b.map and a.start < b.end and b.start < a.end


cdef inline Py_ssize_t _first_ending_after(vector[Piece]& pieces, Py_ssize_t x) noexcept:
    """The index of the first piece ending after x (bisect_right on the ends)."""
    cdef Py_ssize_t lo = 0, hi = pieces.size(), mid
    if hi == 0 or x >= pieces.back().end:  # at or past the end of every piece: ranges often come in order
        return hi
    while lo < hi:
        mid = (lo + hi) // 2
        if x < pieces[mid].end:
            hi = mid
        else:
            lo = mid + 1
    return lo


cdef inline Py_ssize_t _split(vector[Piece]& pieces, Py_ssize_t x) except -1:
    """Make x a piece boundary; returns the index of the first piece starting at or after x."""
    cdef Py_ssize_t i = _first_ending_after(pieces, x)
    if i < <Py_ssize_t>pieces.size() and pieces[i].start < x:
        _cut(pieces, i, x)
        return i + 1
    return i


cdef int _cut(vector[Piece]& pieces, Py_ssize_t i, Py_ssize_t x) except -1:
    """Cut piece i in two at x (apart from _split, whose common case then makes no Piece)."""
    cdef Piece tail = pieces[i]
    tail.start = x
    pieces[i].end = x
    pieces.insert(pieces.begin() + i + 1, move(tail))
    return 0


cdef int _absorb(vector[Piece]& pieces, vector[Piece]& other) except -1:
    """Union the map `other` into the map `pieces`: every piece keeps the writers and readers of both."""
    cdef Py_ssize_t lo, hi, j, cursor
    cdef Piece theirs, gap, rest
    cdef Piece* piece
    for theirs in other:
        lo = _split(pieces, theirs.start)
        hi = _split(pieces, theirs.end)
        cursor, j = theirs.start, lo
        while j < hi:
            if pieces[j].start > cursor:
                gap.start, gap.end, gap.floor = cursor, pieces[j].start, theirs.floor
                pieces.insert(pieces.begin() + j, gap)
                hi += 1
            piece = &pieces[j]
            _sorted_union(piece.writers, theirs.writers)
            _sorted_union(piece.readers, theirs.readers)
            if piece.floor != theirs.floor:
                piece.floor = 0  # hide nothing: each side hid different entries
            cursor = piece.end
            j += 1
        if cursor < theirs.end:
            rest = theirs
            rest.start = cursor
            pieces.insert(pieces.begin() + j, rest)
    return 0


cdef int _insert_empty(vector[Piece]& pieces, Py_ssize_t i) except -1:
    """Insert an empty piece at i (apart from HazardTracker.record, whose common case then makes no Piece)."""
    cdef Piece fresh
    _make_room_in(fresh.writers, fresh.readers)
    pieces.insert(pieces.begin() + i, move(fresh))
    return 0


cdef int _read_piece(Piece& piece, Py_ssize_t start, Py_ssize_t end, Py_ssize_t reader) except -1:
    """Make `piece` (moved from, or new) one that only `reader` accessed. Filled where it is, then moved into its
    map: a Piece returned by value is copied, and a copied list loses its room."""
    piece.start, piece.end, piece.floor = start, end, 0
    piece.writers.clear()
    piece.readers.clear()
    _make_room_in(piece.writers, piece.readers)
    piece.readers.push_back(reader)
    return 0


cdef inline int _make_room_in(vector[Py_ssize_t]& writers, vector[Py_ssize_t]& readers) except -1:
    """Room in a new piece's lists for a typical few entries: grown one entry at a time, they would be allocated
    and copied three times over in the first commands."""
    writers.reserve(2)
    readers.reserve(4)
    return 0


cdef int _sorted_union(vector[Py_ssize_t]& into, vector[Py_ssize_t]& other) except -1:
    """`into` becomes the sorted union of both, without repeats."""
    into.insert(into.end(), other.begin(), other.end())
    sort(into.begin(), into.end())
    into.erase(unique(into.begin(), into.end()), into.end())
    return 0


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
                    _raise_race(command, key, start, end, write, other)
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
    allocated anew, about a tenth of recording a fan of 10 dispatches), else a new one."""
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
            end[0] = r.offset + r.nbytes if r.bounded else END
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
        for o, other_write in zip(refs, writes):
            if _race_key(o, table, &ostart, &oend) == key and ostart < end and start < oend and \
                    (write or other_write):
                return other, ostart, oend, other_write
    return None


cdef void _raise_race(Command command, Py_ssize_t key, Py_ssize_t start, Py_ssize_t end, bint write,
                      tuple other) except *:
    o, ostart, oend, other_write = other
    what = f"slot {-1 - key}" if key < 0 else "one buffer"
    raise ValidationError(
        f"race: command {command.index} ({command.kind}) {'writes' if write else 'reads'} bytes "
        f"[{start}, {end if end != END else 'end'}) of {what} that command {o.index} ({o.kind}) "
        f"{'writes' if other_write else 'reads'} ([{ostart}, {oend if oend != END else 'end'})) in the same "
        f"segment; record an execution_barrier() between them")
