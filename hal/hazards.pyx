"""Hazards mode's tracker: the earlier commands each new command must wait for, transitively reduced (compiled).

Ranges are indexed per buffer in interval maps holding, for each piece of a buffer, its last writers and the
readers since, so the work per command depends on what it overlaps, not on the length of the program; a chain
compares each command with the one before it alone. Slot references may be bound to any buffer, so once one
appears every range is tracked in one shared map (conservative). The planner (hal.dependencies) asks it for each
command's predecessors.
"""

cimport cython
from cython.operator cimport dereference as deref
from libcpp.algorithm cimport reverse, sort, unique
from libcpp.utility cimport move

from hal.accesses cimport OPEN_END, collective_accesses
from hal.buffer cimport BufferRef
from hal.commands cimport Call, Collective, Copy, Dispatch, Fill, Region, Update

SEARCH_BUDGET = 256  # commands a transitive-reduction search may visit per new command


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


cdef HazardTracker take_tracker():
    """A tracker for a new planner: the spare one if any (a fresh tracker's tables are allocated anew and grown
    entry by entry, a cost a short recording feels), else a new one."""
    global _spare_tracker
    cdef HazardTracker tracker = _spare_tracker
    if tracker is None:
        return HazardTracker()
    _spare_tracker = None
    return tracker


cdef void give_back_tracker(HazardTracker tracker) noexcept:
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
        refs, writes = collective_accesses(<Collective>command)
        for i in range(len(refs)):
            _add_access(into, first, <BufferRef>refs[i], writes[i])
    elif kind is Call:
        for i in range(len((<Call>command).bindings)):
            _add_access(into, first, <BufferRef>(<Call>command).bindings[i], (<Call>command).writes[i])
    else:
        _add_access(into, first, (<Update>command).target, True)
    return 0


cdef inline int _add_access(vector[Touch]& into, Py_ssize_t first, BufferRef ref, bint write) except -1:
    """Append an access, unless it repeats the command's previous one, `into[first:]` being the command's (a range
    bound twice in a row, as in x + x): found and entered again, it would change nothing."""
    cdef Py_ssize_t buffer = -1 if ref.buffer is None else ref.buffer.serial
    cdef Py_ssize_t start = ref.offset, end = ref.offset + ref.nbytes if ref.bounded else OPEN_END
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

