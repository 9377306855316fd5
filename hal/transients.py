"""Transient memory of a command buffer (cb.alloca): lifetimes from the Program's DAG, one arena, shared offsets.

A transient lives from its first to its last use in one execution. Two transients may share memory when one's
lifetime ends before the other's begins in every execution: every use of the first is an ancestor, in the
dependency DAG, of every use of the second (barriers mode: it is last used in an earlier segment than the other's
first; hazards mode: the hazards found between their users say so). Offsets are then placed greedily, each at the
lowest offset that overlaps no transient it may be live with (first fit, as TFLite's and XLA's buffer assigners
do), in a few orders, keeping the smallest peak: the arena's size. A region counts as one use of everything its body
touches, so a transient used inside a loop lives for the whole loop.

At end() the command buffer allocates the arena (one device buffer, reused by every execution, released with
the recording) and rewrites the commands' references to transients into references to the arena, before the
backend sees the Program: backends run transients as ordinary buffer ranges.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import numpy as np

from hal.buffer import Buffer, BufferUsage
from hal.commands import rebase
from hal.errors import ValidationError

if TYPE_CHECKING:
    from hal.program import Program

SEARCH_TRIES = 16  # placements tried beyond the two plain orders, at most
SEARCH_WORK = 20_000  # and at most this many pairs of transients live at once looked at, all tries together


class Transient(Buffer):
    """What cb.alloca returns a reference to: memory of one command buffer's executions, with no memory of its own
    until end() places it in the arena. Its `device` is that command buffer, so no other command buffer, binding
    table or queue operation takes it."""

    def __init__(self, command_buffer: Any, nbytes: int) -> None:
        super().__init__(command_buffer, nbytes, BufferUsage.DEFAULT)

    def read(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise ValidationError("read: a transient (cb.alloca) holds data only during an execution of its command "
                              "buffer; copy it to a buffer there")

    def write(self, *args: Any, **kwargs: Any) -> None:
        raise ValidationError("write: a transient (cb.alloca) holds data only during an execution of its command "
                              "buffer; write it from a command there")

    def release(self) -> None:
        raise ValidationError("release: a transient (cb.alloca) goes with its command buffer's recording")

    def __repr__(self) -> str:
        return f"<Transient {self.size} bytes of {self.device!r}>"


class TransientPlan:
    """Where each transient lives in the arena: `offsets[t]` for transient t (cb.alloca order), `sizes`, `peak`
    (the arena's bytes), `total` (the sum of the sizes: what no sharing would take), `arena` (the device buffer,
    None when peak is 0), `moved` (what hal.commands.restore needs to point the commands back at the transients)."""

    __slots__ = ("offsets", "sizes", "peak", "total", "arena", "moved")

    def __init__(self, offsets: list[int], sizes: list[int], arena: Buffer | None, moved: list) -> None:
        self.offsets, self.sizes, self.arena, self.moved = offsets, sizes, arena, moved
        self.peak = peak_of(offsets, sizes)
        self.total = sum(sizes)

    def __repr__(self) -> str:
        return f"<TransientPlan {len(self.sizes)} transients, peak {self.peak} of {self.total} bytes>"


def conflicts(program: Program, transients: list[Transient]) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Per transient, the others it may be live with (unless one's uses all come before the other's, they may);
    and per transient, its first and last use (command indices; (0, -1) if it has none)."""
    count = len(transients)
    users: list[list[int]] = [[] for _ in range(count)]  # the commands using each transient
    index = {id(t): k for k, t in enumerate(transients)}
    for command in program.commands:
        for reference, _ in command.accesses():
            k = index.get(id(reference.buffer))
            if k is not None:
                users[k].append(command.index)
    ancestors = [0] * len(program.commands)  # bitsets, in recording order (a topological order of the DAG)
    for i in range(len(ancestors)):
        for p in program.predecessors(i):
            ancestors[i] |= ancestors[p] | (1 << p)
    uses = [sum(1 << i for i in set(u)) for u in users]
    before_all = []  # per transient: the commands that come before every one of its uses
    for u in users:
        common = -1
        for i in u:
            common &= ancestors[i]
        before_all.append(common)
    live_with = [[b for b in range(count) if a != b and uses[a] & ~before_all[b] and uses[b] & ~before_all[a]]
                 for a in range(count)]
    return live_with, [(min(u), max(u)) if u else (0, -1) for u in users]


def live_bound(sizes: list[int], spans: list[tuple[int, int]]) -> int:
    """The most bytes of the transients whose spans (first to last use, in recording order) hold one command: no
    placement takes less, since two spans that overlap belong to transients that may be live together (neither's
    uses can all come before the other's)."""
    steps = sorted([(first, size) for size, (first, last) in zip(sizes, spans) if last >= first] +
                   [(last + 1, -size) for size, (first, last) in zip(sizes, spans) if last >= first])
    most = live = 0
    for _, change in steps:  # at one command, the ends (negative) come before the starts
        live += change
        most = max(most, live)
    return most


def place(sizes: list[int], live_with: list[list[int]], spans: list[tuple[int, int]], alignment: int,
          search: bool) -> list[int]:
    """Offsets with the smallest peak found: first fit in the order of decreasing size, of decreasing size x
    lifetime (`spans`: first and last use), then (`search`) of either with random noise, as many tries as
    SEARCH_WORK allows (on the tests' programs of 30 transients, the worst peak goes from 1.29 to under 1.1 times
    the lower bound, the most bytes live at once), stopping early at a peak no placement can beat (live_bound)."""
    count = len(sizes)
    bound = live_bound(sizes, spans)
    weights = (sizes, [s * (last - first + 1) for s, (first, last) in zip(sizes, spans)])
    best = None
    rng = random.Random(count)  # the same plan for the same program
    pairs = sum(len(others) for others in live_with)
    for attempt in range(2 + (min(SEARCH_TRIES, SEARCH_WORK // max(1, pairs)) if search else 0)):
        weight = weights[attempt % 2]
        noise = [1.0] * count if attempt < 2 else [rng.uniform(0.5, 1.5) for _ in range(count)]
        order = sorted(range(count), key=lambda k: (-weight[k] * noise[k], k))
        offsets = first_fit(sizes, live_with, order, alignment)
        peak = peak_of(offsets, sizes)
        if best is None or peak < best[0]:
            best = peak, offsets
        if peak <= bound:
            break
    return best[1] if best is not None else []


def peak_of(offsets: list[int], sizes: list[int]) -> int:
    """The bytes an arena needs for transients at these offsets."""
    return max((o + s for o, s in zip(offsets, sizes)), default=0)


def first_fit(sizes: list[int], live_with: list[list[int]], order: list[int], alignment: int) -> list[int]:
    """Place in `order`, each at the lowest aligned offset clear of the placed ones it may be live with."""
    offsets = [0] * len(sizes)
    placed = [False] * len(sizes)
    for t in order:
        offset = 0
        for start, end in sorted((offsets[p], offsets[p] + sizes[p]) for p in live_with[t] if placed[p]):
            if offset + sizes[t] <= start:
                break
            offset = max(offset, -(-end // alignment) * alignment)
        offsets[t] = offset
        placed[t] = True
    return offsets


def plan_transients(program: Program, transients: list[Transient], device: Any, alignment: int,
                    search: bool) -> TransientPlan:
    """Place the transients of `program`, allocate the arena on `device` and point the commands at it. `search`:
    try more placements (for a reusable command buffer, run many times; a one_shot one plans in two tries)."""
    sizes = [t.size for t in transients]
    live_with, spans = conflicts(program, transients)
    offsets = place(sizes, live_with, spans, alignment, search)
    peak = peak_of(offsets, sizes)
    arena = device.allocate(peak) if peak else None
    moved = [] if arena is None else rebase(program.commands, {id(t): (arena, o) for t, o in zip(transients, offsets)})
    return TransientPlan(offsets, sizes, arena, moved)
