"""The planner: which recorded commands wait for which, and how a backend lays that out (compiled).

`Planner` turns the recorded commands into a Program (hal.program), for both dependency modes and both
recording strategies: deferred command buffers plan every segment at end(), single_pass ones each
command as it is recorded (the backend may emit it at once). Three things come out:

- the DAG: each command's predecessor *group*, a set of earlier commands it waits for. Commands sharing
  a set share one group, so an m-to-n barrier step costs m + n, not m * n.
  - barriers mode (Vulkan semantics): a command waits for every command of the previous non-empty segment.
  - hazards mode (XLA style): a command waits for an earlier command of an earlier segment only if their
    byte ranges overlap and one writes; the result is transitively reduced (hal.hazards.HazardTracker).
- barrier flags for a replay in recording order: before a command (deferred: a segment) that waits for
  one recorded since the last barrier;
- the graph layout: the commands of a segment run in at most `lanes` chains (command j waits for command
  j - width of its segment, which only adds order: they are unordered anyway), what waits for a segment
  waits for the last command of each lane, and a group with several members shared by several commands
  goes through one empty join node. deferred sees each segment whole and uses the fewest lanes of the
  same depth (98 commands: 49 lanes of 2, not 64).

hal.races.RaceDetector is the record-time validation twin: inside one segment nothing is ordered, so two
overlapping accesses of which one writes are a race.
"""

cimport cython
from cython.operator cimport dereference as deref
from libcpp.vector cimport vector

from hal.accesses cimport OPEN_END
from hal.commands cimport Command
from hal.hazards cimport HazardTracker, give_back_tracker, take_tracker

from hal.errors import ValidationError


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
        self.tracker = take_tracker() if self.hazards else None
        self.dag_segment = self.barrier_segment = self.layout_segment = -1
        self.open_start = 0
        self.open_group = -1
        self.fence = 0
        self.joins = {}

    def __dealloc__(self):
        if self.tracker is not None:  # its tables' memory serves the next planner
            give_back_tracker(self.tracker)

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
                width = self.lanes if self.lanes else OPEN_END
            self.layout_width = width
            program.segment_start.push_back(index)
            program.segment_width.push_back(width if width != OPEN_END else 0)
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

