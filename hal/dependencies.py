"""Dependency rediscovery: which recorded commands must wait for which.

`DependencyTracker` is fed commands and barriers in recording order and gives each command a
predecessor *group*: a tuple of earlier command indices it waits for. Commands sharing a group share
one tuple, so an m-to-n barrier step costs m + n (backends put one join node there), not m * n.

- barriers mode (Vulkan semantics): a command waits for every command of the previous non-empty segment.
- hazards mode (XLA style): a command waits for an earlier command of an earlier segment only if their
  byte ranges overlap and one writes; the result is transitively reduced. Ranges are indexed per buffer
  in interval maps holding, for each piece of a buffer, its last writers and the readers since, so the
  work per command depends on what it overlaps, not on the length of the program. Slot references may
  be bound to any buffer, so once one appears every range is tracked in one shared map (conservative).

`RaceDetector` is the record-time validation twin: inside one segment nothing is ordered, so two
overlapping accesses of which one writes are a race.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import TYPE_CHECKING

import networkx as nx

from hal.errors import ValidationError

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from hal.buffer import Buffer, BufferRef
    from hal.commands import Command

END = 1 << 62  # the open end of a slot range whose length only the bound buffer will tell
SEARCH_BUDGET = 256  # commands a transitive-reduction search may visit per new command
_UNIVERSE = "all buffers"


def access_range(ref: BufferRef, table: tuple[Buffer, ...] | None = None) -> tuple[object, int, int]:
    """(key, start, end) of a reference: key is the Buffer, or the slot index for slot references
    (the bound Buffer when a binding table is given)."""
    b = ref._buffer
    if b is None:
        if table is None:
            return ref._slot, ref._offset, END if ref._end is None else ref._end
        b = table[ref._slot]
        return b, ref._offset, b.size if ref._end is None else ref._end
    return b, ref._offset, ref._end


class DependencyTracker:
    """Incremental dependency rediscovery; `groups[group_of[i]]` are the predecessors of command i."""

    __slots__ = ("hazards", "groups", "group_of", "_open", "_prev", "_group",
                 "_maps", "_shared", "_interned", "_segment_of", "_stamp", "_touched")

    def __init__(self, mode: str) -> None:
        if mode not in ("barriers", "hazards"):
            raise ValidationError(f"dependencies must be 'barriers' or 'hazards', got {mode!r}")
        self.hazards = mode == "hazards"
        self.groups: list[tuple[int, ...]] = []
        self.group_of: list[int] = []
        self._open: list[int] = []
        self._prev: tuple[int, ...] = ()
        self._group: int | None = -1
        self._maps: dict[object, _AccessMap] = {}
        self._shared = False
        self._interned: dict[tuple[int, ...], int] = {}
        self._segment_of: list[int] = []
        self._stamp: list[int] = []
        self._touched: list[tuple[object, ...]] = []  # per command: its ranges, flat (map, start, end)*

    def predecessors(self, index: int) -> tuple[int, ...]:
        g = self.group_of[index]
        return self.groups[g] if g >= 0 else ()

    def barrier(self) -> None:
        if not self.hazards and self._open:
            self._prev = tuple(self._open)
            self._open = []
            self._group = None

    def segments(self, segments: Iterable[Sequence[Command]]) -> None:
        """Register whole segments (each after a barrier), as `barrier()` and `add()` of each command
        would: the deferred path of end(), in one call."""
        if self.hazards:
            for commands in segments:
                self.barrier()
                for c in commands:
                    self._add_hazards(c)
            return
        groups, group_of = self.groups, self.group_of
        opened: Sequence[int] = self._open
        prev, group = self._prev, self._group
        for commands in segments:
            if not commands:
                continue
            if opened or group is None:
                if opened:
                    prev = tuple(opened)
                groups.append(prev)
                group = len(groups) - 1
            if len(commands) == 1:  # a chain: no per-segment lists to build
                group_of.append(group)
                opened = (commands[0].index,)
            else:
                group_of += [group] * len(commands)
                opened = [c.index for c in commands]
        self._open, self._prev, self._group = list(opened), prev, group

    def add(self, command: Command) -> int:
        """Register the next command (indices must come in order); returns its group (-1: none)."""
        if not self.hazards:
            g = self._group
            if g is None:
                self.groups.append(self._prev)
                g = self._group = len(self.groups) - 1
            self.group_of.append(g)
            self._open.append(command.index)
            return g
        return self._add_hazards(command)

    def _add_hazards(self, command: Command) -> int:
        index, segment = command.index, command.segment
        segment_of = self._segment_of
        segment_of.append(segment)
        self._stamp.append(-1)
        accesses = tuple(command.accesses())
        if not self._shared and any(r._buffer is None for r, _ in accesses):
            self._share()
        found: dict[int, list[tuple[_AccessMap, int, int]]] = {}
        touched = []
        maps = self._maps
        for r, write in accesses:
            key, start, end = access_range(r)
            if self._shared:
                key = _UNIVERSE
            amap = maps.get(key)
            if amap is None:
                amap = maps[key] = _AccessMap()
            amap.collect(start, end, write, segment, segment_of, found)
            touched.append((amap, start, end, write))
        for amap, start, end, write in touched:
            amap.record(start, end, write, index, segment, segment_of)
        flat: list[object] = []  # (map, start, end) triples, flat: one tracked object per command
        for amap, start, end, _ in touched:
            flat += (amap, start, end)
        self._touched.append(tuple(flat))
        if len(found) > 1:
            self._prune_read_writers(found)
        preds = self._reduce(found, index)
        if not preds:
            g = -1
        else:
            g = self._interned.get(preds)
            if g is None:
                g = self._interned[preds] = len(self.groups)
                self.groups.append(preds)
        self.group_of.append(g)
        return g

    def _share(self) -> None:
        """From the first slot reference on, every range may alias every other: merge the maps."""
        merged = _AccessMap()
        for amap in self._maps.values():
            merged.absorb(amap)
        self._maps = {_UNIVERSE: merged}
        self._shared = True

    def _prune_read_writers(self, found: dict[int, list[tuple[_AccessMap, int, int]]]) -> None:
        """Drop writer w when another candidate d, recorded after w in a later segment, touched a range
        that w alone last wrote: d then waited for w. This settles in O(candidates) the
        common long-range case (weights written once, read by every step of a long chain) that a
        graph search would have to walk the whole chain for."""
        segment_of, touched_of = self._segment_of, self._touched
        for w, regions in list(found.items()):
            if not regions:
                continue
            sw = segment_of[w]
            for d in found:
                if d > w and segment_of[d] > sw and _touches(touched_of[d], regions):
                    del found[w]
                    break

    def _reduce(self, found: dict[int, list[tuple[_AccessMap, int, int]]], index: int) -> tuple[int, ...]:
        """Drop candidates reachable from another candidate (transitive reduction of the new edges).

        Candidates are visited from the most recent; a backward search from each kept one marks its
        ancestors, never going below the oldest candidate, since nothing there can reach one. The
        search visits at most SEARCH_BUDGET commands per new command, so end() stays linear; an edge
        whose redundancy only a deeper search would show is kept (it orders nothing new).
        """
        if len(found) < 2:
            return tuple(found)
        order = sorted(found, reverse=True)
        lowest = order[-1]
        stamp, groups, group_of = self._stamp, self.groups, self.group_of
        budget = SEARCH_BUDGET
        keep = []
        for d in order:
            if stamp[d] == index:
                continue
            keep.append(d)
            stack = [d]
            while stack and budget > 0:
                g = group_of[stack.pop()]
                if g < 0:
                    continue
                for p in groups[g]:
                    if p >= lowest and stamp[p] != index:
                        stamp[p] = index
                        stack.append(p)
                        budget -= 1
        keep.reverse()
        return tuple(keep)


def _touches(flat: tuple[object, ...], regions: list[tuple[_AccessMap, int, int]]) -> bool:
    """Does a command's flat (map, start, end)* tuple overlap one of `regions`?"""
    for i in range(0, len(flat), 3):
        m, s2, e2 = flat[i], flat[i + 1], flat[i + 2]
        for am, s, e in regions:
            if m is am and s < e2 and s2 < e:
                return True
    return False


class _AccessMap:
    """Disjoint sorted pieces of one buffer, each with its last writers and the readers since.

    `floors[i]`: the segment of the last write that covered piece i. Entries of segments below it are
    ordered before that write, so commands of later segments may skip them; commands of the floor
    segment itself are not ordered after that write and still see them."""

    __slots__ = ("starts", "ends", "writers", "readers", "floors")

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.writers: list[list[int]] = []
        self.readers: list[list[int]] = []
        self.floors: list[int] = []

    def collect(self, start: int, end: int, write: bool, segment: int, segment_of: list[int],
                found: dict[int, list[tuple[_AccessMap, int, int]]]) -> None:
        """Add to `found` the commands of earlier segments that an access must wait for; a writer
        comes with the ranges it alone last wrote (see DependencyTracker._prune_read_writers)."""
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

    def record(self, start: int, end: int, write: bool, index: int, segment: int,
               segment_of: list[int]) -> None:
        lo = self._split(start)
        hi = self._split(end)
        if write:
            # Keep what commands of this segment can still see: accesses of this segment (a race when
            # not validated) and the earlier ones this write hides only from later segments.
            writers = [index]
            readers: list[int] = []
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

    def absorb(self, other: _AccessMap) -> None:
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

    def _split(self, x: int) -> int:
        """Make x a piece boundary; returns the index of the first piece starting at or after x."""
        i = bisect_right(self.ends, x)
        if i < len(self.starts) and self.starts[i] < x:
            self._insert(i + 1, x, self.ends[i], self.writers[i][:], self.readers[i][:], self.floors[i])
            self.ends[i] = x
            return i + 1
        return i

    def _insert(self, i: int, start: int, end: int, writers: list[int], readers: list[int], floor: int) -> None:
        self.starts.insert(i, start)
        self.ends.insert(i, end)
        self.writers.insert(i, writers)
        self.readers.insert(i, readers)
        self.floors.insert(i, floor)


class RaceDetector:
    """Per-segment ranges of each buffer (or slot) key: one access as a plain tuple, more as _Ranges.

    The first command of a segment cannot race, so the recorder indexes it (`rebuild`) only when a second
    command arrives: a chain of one command per segment pays nothing for the check. A reference read with
    no write of the segment overlapping it stays in `_quiet` until its key is written again, so reading
    it again (a weight every dispatch of a segment reads) costs one set lookup.
    """

    __slots__ = ("_ranges", "_quiet")

    def __init__(self) -> None:
        self._ranges: dict[object, tuple[int, int, bool] | _Ranges] = {}
        self._quiet: set[BufferRef] = set()

    def reset(self) -> None:
        self._ranges.clear()
        self._quiet.clear()

    def rebuild(self, segment: Sequence[Command], table: tuple[Buffer, ...] | None = None) -> None:
        """Index exactly the commands of `segment`, accepted ones: nothing among them is searched for."""
        self.reset()
        for c in segment:
            self.add(c, *refs_and_writes(c), (), table)

    def add(self, command: Command, refs: Sequence[BufferRef], writes: Sequence[bool], segment: Sequence[Command],
            table: tuple[Buffer, ...] | None = None) -> None:
        """Check `command`, which accesses `refs[i]` (writing it if `writes[i]`), against the ranges indexed
        so far, then index it. With a binding table, slots are keyed by the buffers bound to them. On a
        race, `segment` is searched for the partner and indexed again (the command's earlier accesses are
        forgotten), then ValidationError is raised.

        One pass: ranges are merged as they are checked. An overlap found may be with the command's
        own earlier access (legal); only on that rare path are the other commands searched.
        """
        ranges = self._ranges
        quiet = self._quiet
        i = -1
        for r in refs:  # indexing `writes` costs less than zip()
            i += 1
            write = writes[i]
            if not write and r in quiet:
                continue
            key = r._buffer
            if key is None:
                key, start, end = access_range(r, table)
            else:
                start = r._offset
                end = r._end
            state = ranges.get(key)
            if state is None:
                ranges[key] = (start, end, write)
                continue
            if type(state) is tuple:
                s0, e0, w0 = state
                clash = start < e0 and s0 < end and (write or w0)
                state = ranges[key] = _Ranges(s0, e0, w0)
            else:  # the extents settle most checks without a search
                clash = (start < state.whi and state.wlo < end and _overlaps(state.ws, state.we, start, end)) or \
                    (write and start < state.rhi and state.rlo < end and _overlaps(state.rs, state.re, start, end))
            if clash:
                other = _partner(command, key, start, end, write, segment, table)
                if other is not None:
                    self.rebuild(segment, table)
                    _raise_race(command, key, start, end, write, other)
            if write:
                if state.quiet:  # this write may overlap them
                    quiet.difference_update(state.quiet)
                    state.quiet.clear()
                whi = state.whi
                if start < whi:
                    state.add(start, end, True)
                    continue
                if start == whi:  # at or past the end of everything written so far: extend or append
                    state.we[-1] = end
                else:
                    state.ws.append(start)
                    state.we.append(end)
                    if start < state.wlo:
                        state.wlo = start
                state.whi = end
            else:
                if not clash:  # an overlap with the command's own write must not be skipped later
                    quiet.add(r)
                    state.quiet.append(r)
                if not (state.rs and state.rs[-1] <= start and end <= state.rhi):  # not inside the last interval
                    state.add(start, end, False)


class _Ranges:
    """Unions of the written and of the read ranges of one key, as sorted disjoint intervals, with
    their extents so that the common cases (a new range past everything so far, or inside the last
    interval) cost a comparison or two; `quiet` lists the key's references in RaceDetector._quiet."""

    __slots__ = ("ws", "we", "rs", "re", "wlo", "whi", "rlo", "rhi", "quiet")

    def __init__(self, start: int, end: int, write: bool) -> None:
        self.ws: list[int] = []
        self.we: list[int] = []
        self.rs: list[int] = []
        self.re: list[int] = []
        self.wlo = self.rlo = END
        self.whi = self.rhi = -1
        self.quiet: list[BufferRef] = []
        self.add(start, end, write)

    def add(self, start: int, end: int, write: bool) -> None:
        if write:
            _union(self.ws, self.we, start, end)
            self.wlo, self.whi = self.ws[0], self.we[-1]
        else:
            _union(self.rs, self.re, start, end)
            self.rlo, self.rhi = self.rs[0], self.re[-1]


def refs_and_writes(command: Command) -> tuple[tuple[BufferRef, ...], tuple[bool, ...]]:
    """The references `command` accesses and, for each, whether it writes it: RaceDetector.add's arguments."""
    accesses = tuple(command.accesses())
    return tuple(r for r, _ in accesses), tuple(w for _, w in accesses)


def _overlaps(starts: list[int], ends: list[int], start: int, end: int) -> bool:
    i = bisect_right(ends, start)
    return i < len(starts) and starts[i] < end and start < end


def _union(starts: list[int], ends: list[int], start: int, end: int) -> None:
    if start >= end:
        return
    if not ends or start > ends[-1]:
        starts.append(start)
        ends.append(end)
        return
    if start >= starts[-1]:  # touches or overlaps the last interval only
        if end > ends[-1]:
            ends[-1] = end
        return
    i = bisect_left(ends, start)
    j = bisect_right(starts, end)
    if i < j:
        start = min(start, starts[i])
        end = max(end, ends[j - 1])
    starts[i:j] = [start]
    ends[i:j] = [end]


def _partner(command: Command, key: object, start: int, end: int, write: bool, segment: Sequence[Command],
             table: tuple[Buffer, ...] | None) -> tuple[Command, int, int, bool] | None:
    """The earlier command of `segment` whose access conflicts with this one, if any."""
    for other in segment:
        if other.index >= command.index:
            break
        for o, other_write in other.accesses():
            okey, ostart, oend = access_range(o, table)
            if okey == key and ostart < end and start < oend and (write or other_write):
                return other, ostart, oend, other_write
    return None


def _raise_race(command: Command, key: object, start: int, end: int, write: bool,
                other: tuple[Command, int, int, bool]) -> None:
    o, ostart, oend, other_write = other
    what = f"slot {key}" if type(key) is int else "one buffer"
    raise ValidationError(
        f"race: command {command.index} ({command.kind}) {'writes' if write else 'reads'} bytes "
        f"[{start}, {end if end != END else 'end'}) of {what} that command {o.index} ({o.kind}) "
        f"{'writes' if other_write else 'reads'} ([{ostart}, {oend if oend != END else 'end'})) in the same "
        f"segment; record an execution_barrier() between them")


def to_networkx(commands: list[Command], tracker: DependencyTracker) -> nx.DiGraph:
    """Nodes: command indices with `kind` and `segment`; edge u -> v: v waits for u."""
    graph = nx.DiGraph()
    for c in commands:
        graph.add_node(c.index, kind=c.kind, segment=c.segment)
    for c in commands:
        for p in tracker.predecessors(c.index):
            graph.add_edge(p, c.index)
    return graph
