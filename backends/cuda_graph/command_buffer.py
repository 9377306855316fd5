"""CUDA graph command buffers: rediscovered dependencies become graph edges; instantiate once, then
only patch what changed.

- deferred: at end() every command becomes a node (kernel, memset, memcpy from pinned staging) in one
  call of graph.c, with edges from the dependency groups; an m-to-n step goes through one empty join
  node when m > 1 and n > 1. The graph is instantiated once (its first launch uploads it); a submit
  is one launch.
- single_pass: each command becomes a node as it is recorded, waiting for the open nodes since the
  last barrier (through a join node when there are several), as IREE's CUDA driver does.
- Lanes: the commands of a segment run in at most `device.graph_lanes` chains (command j waits for
  command j - lanes of its segment), and what waits for the segment waits for the last node of each
  lane. Commands of a segment are unordered, so this only adds order; it bounds the graph's width,
  which CUDA's instantiation and launch cost grow with (bench/README.md). deferred sees each segment
  whole and uses the fewest lanes that keep the same depth: 98 commands in 64 lanes are 2 deep, and so
  are they in 49.
- Binding tables: a command buffer that uses slots is built at its first submit; a later table
  patches only the nodes whose resolved addresses changed (cuGraphExec*NodeSetParams), found through
  the slots that changed. An unchanged table costs nothing.
- Re-recording after reset(): the old exec is updated in place (cuGraphExecUpdate) when the topology
  allows; only otherwise is the graph instantiated again.
- One-shot deferred command buffers skip the graph: their commands are launched on the stream in
  order, which costs less than building and instantiating a graph that runs once (see bench/cuda.py).
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import functools
import operator
from array import array
from typing import TYPE_CHECKING, Any

import networkx as nx
from cuda.bindings import driver

from backends.cuda_graph import stream as words
from backends.cuda_graph.api import call, fail
from backends.cuda_graph.buffer import host_alloc
from hal.buffer import Buffer
from hal.command_buffer import CommandBuffer
from hal.commands import Command, Dispatch, Update
from hal.errors import DeviceError, DeviceLostError, HalError, OutOfMemoryError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from backends.cuda_graph.device import CudaDevice

ARENA_BYTES = 1 << 20
_segment = operator.attrgetter("segment")


def lane_width(size: int, lanes: int) -> int:
    """The lanes a segment of `size` commands runs in under a limit of `lanes` (0: none): the fewest that
    are as deep as `lanes` lanes would be (98 commands: 49 lanes of 2, not 64)."""
    if not lanes or size <= lanes:
        return size
    return -(-size // -(-size // lanes))


class PinnedArena:
    """Pinned host memory holding a command buffer's update data, where the GPU copies it from."""

    __slots__ = ("device", "chunks", "used", "finalizers", "__weakref__")

    def __init__(self, device: CudaDevice) -> None:
        self.device = device
        self.chunks: list[tuple[int, int, Any]] = []
        self.used = 0
        self.finalizers: list[Any] = []

    def put(self, data: bytes) -> int:
        """Copy `data` in; its device address."""
        n = len(data)
        if not self.chunks or self.used + n > len(self.chunks[-1][2]):
            chunk = host_alloc(max(ARENA_BYTES, n))
            self.chunks.append(chunk)
            self.finalizers.append(self.device._track(self, "host", chunk[0]))
            self.used = 0
        _, device_address, view = self.chunks[-1]
        view[self.used:self.used + n] = memoryview(data)
        address = device_address + self.used
        self.used += -(-n // 16) * 16
        return address

    def release(self) -> None:
        """Free the chunks once the work submitted so far is done."""
        for finalizer in self.finalizers:
            finalizer()


class CudaCommandBuffer(CommandBuffer):
    __slots__ = ("_graph", "_exec", "_graph_finalizer", "_exec_finalizer", "_exec_graph_finalizer", "_exec_nodes",
                 "_nodes", "_slot_of", "_joins", "_built", "_arena", "_staging", "_table_seen", "_node_words",
                 "_slot_words", "_stream_launch", "_launch", "_launchable", "_lanes", "_segment_starts",
                 "_segment_lanes", "_lane_segment", "instantiations", "updates", "patched")

    def __init__(self, device: CudaDevice, mode: str, binding_capacity: int, strategy: str, dependencies: str,
                 validate: bool) -> None:
        super().__init__(device, mode, binding_capacity, strategy, dependencies, validate)
        self._lanes = device.graph_lanes or 1 << 62  # 0: no limit
        self._exec: Any = None
        self._exec_finalizer: Any = None
        # The graph the exec was instantiated from, and its node handles: node updates name those nodes
        # (CUDA's rule), also after cuGraphExecUpdate took a later graph's parameters; kept while the exec is.
        self._exec_graph_finalizer: Any = None
        self._exec_nodes = array("Q")
        self.instantiations = 0  # graphs instantiated (a re-recording that updates the exec adds none)
        self.updates = 0  # re-recordings absorbed by cuGraphExecUpdate
        self.patched = 0  # nodes patched by the latest submit
        self._forget()

    def _forget(self) -> None:
        """Drop the recording's graph, nodes and staged update data (the exec stays, for cuGraphExecUpdate)."""
        # The device's token while a resubmission is just _launch(); dropped before the launch itself.
        self._launchable: object = None
        self._forget_nodes()
        self._arena: PinnedArena | None = None
        self._staging: dict[int, int] = {}  # update command index -> device address of its data
        self._stream_launch = False
        self._launch: Any = None  # launches the exec: returns (CUresult,), 0 on success

    def _forget_nodes(self) -> None:
        """Drop the graph and what was built from it: its nodes and the words they were given."""
        self._graph: Any = None
        self._graph_finalizer: Any = None
        self._nodes = array("Q")
        self._slot_of: list[int] = []  # command index -> node slot
        # Dependency group -> its join node's slot (from the segments: the first command waiting on it).
        self._joins: dict[int, int] = {}
        self._segment_starts: list[int] = []  # the first command index of each segment built so far
        self._segment_lanes: list[int] = []  # and the lanes it runs in
        self._lane_segment = -1  # the segment the encoder is in, for single_pass (one command at a time)
        self._built = False
        self._table_seen: tuple[Buffer, ...] | None = None
        self._node_words: dict[int, list[int]] = {}  # command index -> words its node was last given
        # Dispatch index -> (word position, slot, offset) of each binding through a slot: a new table only
        # rewrites those words (other commands are encoded again).
        self._slot_words: dict[int, list[tuple[int, int, int]]] = {}

    # Recording hooks.
    def _on_begin(self) -> None:
        if self._single_pass and not self.binding_capacity:
            self._new_graph()

    def _on_command(self, command: Command, group: int) -> None:
        if self._graph is not None:
            self.device._activate()
            if type(command) is Update:
                self._stage(command)
            stream = self._encode([command], (), single=True)
            self._run_build(stream)

    def _stage(self, update: Update) -> None:
        """Copy an update's data to pinned memory, where its memcpy node reads it."""
        if self._arena is None:
            self._arena = PinnedArena(self.device)
        self._staging[update.index] = self._arena.put(update.data)

    def _on_end(self) -> None:
        self.device._activate()
        for c in self._commands:
            if type(c) is Update and c.index not in self._staging:
                self._stage(c)
        if self._graph is not None:  # single_pass: the nodes are there
            self._instantiate()
            self._built = True
        elif self._stream_launch_mode():
            self._stream_launch = True  # launched in order at submit: no graph for a single run
        elif not self._slot_commands:
            self._build(())

    def _on_reset(self) -> None:
        self._drop_graph()
        if self._arena is not None:
            self._arena.release()
        self._forget()

    # Building.
    def _new_graph(self) -> None:
        self._graph = call(driver.cuGraphCreate, 0)
        self._graph_finalizer = self.device._track(self, "graph", int(self._graph))

    def _drop_graph(self) -> None:
        """Free the recording's graph, unless the exec was instantiated from it (then it goes with the exec)."""
        if self._graph_finalizer is not None and self._graph_finalizer is not self._exec_graph_finalizer:
            self._graph_finalizer()
            self.device._collect()

    def _wants_dependencies(self) -> bool:
        # Barriers mode builds straight from the segments (_encode_segments), and one-shot deferred work
        # launches in recording order: neither reads the tracker's groups.
        return self.dependencies == "hazards" and not self._stream_launch_mode()

    def _stream_launch_mode(self) -> bool:
        return self.mode == "one_shot" and not self._single_pass

    def _encode_all(self, table: tuple[Buffer, ...]) -> list[int]:
        """Words building every recorded command's node, resolved through `table`."""
        if self.dependencies == "barriers":
            return self._encode_segments(table)
        return self._encode(self._commands, table)

    def _encode_segments(self, table: tuple[Buffer, ...]) -> list[int]:
        """Barriers mode, from the segments: a command waits for the previous non-empty segment, as the
        tracker's groups would say, so they are not built. The same nodes, edges and join nodes as
        `_encode` gives from the groups: the first command of each lane waits for the last command of each
        lane of the previous segment (through a join node when several wait for several), the others for
        the command before them in their lane."""
        slot_of, joins, lanes = self._slot_of, self._joins, self._lanes
        emit = words.Words(table, self._staging).emit
        stream: list[int] = []
        slot = 0
        head: tuple[int, ...] = (0,)  # the dependency words of a lane's first command, their count first
        for segment in self.segments():
            commands = segment.commands
            size = len(commands)
            if size == 1:  # a chain's step: no lanes to lay out
                c = commands[0]
                slot_of.append(slot)
                emit(c, slot, stream)
                stream += head
                head = (1, slot)
                slot += 1
                continue
            if not size:
                continue
            width = lane_width(size, lanes)
            if head[0] > 1:  # several lanes end the previous segment: one join node for this one's lanes
                joins[commands[0].index] = slot
                stream += (words.OP_EMPTY, slot, *head)
                head = (1, slot)
                slot += 1
            for c in commands[:width]:
                slot_of.append(slot)
                emit(c, slot, stream)
                stream += head
                slot += 1
            for c in commands[width:]:
                slot_of.append(slot)
                emit(c, slot, stream)
                stream += (1, slot - width)
                slot += 1
            head = (width, *range(slot - width, slot))
        self._nodes.frombytes(bytes(8 * (slot - len(self._nodes))))  # graph.c writes each node's handle there
        return stream

    def _encode(self, commands: list[Command], table: tuple[Buffer, ...], single: bool = False) -> list[int]:
        """Words building `commands`' nodes, with their edges (and join nodes where a group is shared).
        `commands` are all the recorded ones, or (`single`) the one just recorded."""
        tracker = self._tracker
        group_of, groups, joins, slot_of, nodes = tracker.group_of, tracker.groups, self._joins, self._slot_of, \
            self._nodes
        uses: collections.Counter[int] | None = None  # how many commands share each group, once needed
        emit = words.Words(table, self._staging).emit
        lanes, starts, segment_lanes = self._lanes, self._segment_starts, self._segment_lanes
        segment = self._lane_segment
        start, width = (starts[-1], segment_lanes[-1]) if starts else (0, lanes)
        stream: list[int] = []
        slot = len(slot_of) + len(joins)  # every node is a command's or a join
        for c in commands:
            index = c.index
            if c.segment != segment:
                segment, start, width = c.segment, index, lanes
                if not single and index + lanes < len(commands) and commands[index + lanes].segment == segment:
                    size = bisect.bisect_right(commands, segment, index, key=_segment) - index
                    width = lane_width(size, lanes)
                starts.append(start)
                segment_lanes.append(width)
            g = group_of[index]
            behind = index - width  # the command before this one in its lane, if it is of this segment
            # tail: the dependency words, their count first
            if behind >= start and (g < 0 or group_of[behind] == g):
                tail: Sequence[int] = (1, slot_of[behind])  # it waited for what this one waits for
            else:
                if g < 0:
                    tail = (0,)
                else:
                    preds = groups[g]
                    if len(preds) == 1:  # a chain
                        tail = (1, slot_of[preds[0]])
                    else:
                        join = joins.get(g)
                        if join is not None:
                            tail = (1, join)
                        else:
                            if not single and uses is None:
                                uses = collections.Counter(group_of)
                            deps = self._fan_in(g, preds, single or uses[g] > 1, stream)
                            tail = (len(deps), *deps)
                            slot = len(slot_of) + len(joins)
                if behind >= start:
                    tail = (tail[0] + 1, slot_of[behind], *tail[1:])
            slot_of.append(slot)
            emit(c, slot, stream)
            stream += tail
            slot += 1
        nodes.frombytes(bytes(8 * (slot - len(nodes))))  # graph.c writes each node's handle in its slot
        self._lane_segment = segment
        return stream

    def _fan_in(self, group: int, preds: Sequence[int], shared: bool, stream: list[int]) -> tuple[int, ...]:
        """The node slots a command of `group` waits on: of each lane only its last command in `preds` (the
        others come before it), through one join node, added to `stream`, when the group is `shared`."""
        slot_of, starts = self._slot_of, self._segment_starts
        if len(preds) > self._lanes:  # preds come in recording order
            k = bisect.bisect_right(starts, preds[-1]) - 1
            if starts[k] <= preds[0] and preds[-1] - preds[0] == len(preds) - 1:
                # A run of one segment (a whole segment, in barriers mode): any `width` commands in a row
                # hold one of each lane, so the last `width` of the run end the lanes.
                preds = preds[-self._segment_lanes[k]:]
        if len(preds) > self._lanes:
            seen: set[tuple[int, int]] = set()
            tails = []
            for p in reversed(preds):
                k = bisect.bisect_right(starts, p) - 1
                start = starts[k]
                lane = (start, (p - start) % self._segment_lanes[k])
                if lane not in seen:
                    seen.add(lane)
                    tails.append(p)
            preds = tails[::-1]
        if len(preds) == 1 or not shared:
            return tuple(slot_of[p] for p in preds)
        join = self._joins[group] = len(slot_of) + len(self._joins)
        stream += (words.OP_EMPTY, join, len(preds))
        stream += (slot_of[p] for p in preds)
        return (join,)

    def _run_build(self, stream: list[int]) -> None:
        device = self.device
        words.run(words.BUILD, int(self._graph), stream, device.functions, self._nodes, device.context_handle)

    def _build(self, table: tuple[Buffer, ...]) -> None:
        """The whole graph from the recorded commands, resolved through `table`; instantiated (or the old
        exec updated). A failure leaves no graph or nodes behind: a retry builds from the start."""
        self._new_graph()
        try:
            stream = self._encode_all(table)
            self._run_build(stream)
            if self._slot_commands:
                self._table_seen = table[:self._slots_needed]
                encoder = words.Words(table, self._staging)
                for c in self._slot_commands:
                    self._node_words[c.index] = encoder.command(c, self._slot_of[c.index])
                    if type(c) is Dispatch:
                        self._slot_words[c.index] = [(words.FIRST_PARAMETER + j, r._slot, r._offset)
                                                     for j, r in enumerate(c.bindings) if r._buffer is None]
            self._instantiate()
        except BaseException:
            with contextlib.suppress(HalError):  # the failure that got here is the one to report
                self._drop_graph()
            self._forget_nodes()
            raise
        self._built = True

    def _instantiate(self) -> None:
        device = self.device
        updated = False
        if self._exec is not None:
            err, _ = driver.cuGraphExecUpdate(self._exec, self._graph)
            updated = err == driver.CUresult.CUDA_SUCCESS
            if updated:
                self.updates += 1
            else:  # another topology: instantiate anew
                self._exec_finalizer()
                self._exec_graph_finalizer()  # an earlier graph: end() always builds a new one
                self._exec = self._exec_finalizer = self._exec_graph_finalizer = None
        if not updated:
            self._exec = call(driver.cuGraphInstantiate, self._graph, 0)
            self._exec_finalizer = device._track(self, "exec", int(self._exec))
            self._exec_graph_finalizer, self._exec_nodes = self._graph_finalizer, self._nodes
            self.instantiations += 1
        # No cuGraphUpload: the first launch uploads the exec, which brings the first result no later than an
        # upload here would, and end() returns sooner (bench/README.md, "The upload"). One launch is one call:
        # cuda-python's compiled binding costs less than a cffi call into graph.c (which pays off only for a
        # batch of driver calls).
        self._launch = functools.partial(driver.cuGraphLaunch, self._exec, device.stream)

    # Submission.
    def _submit(self, table: tuple[Buffer, ...]) -> None:
        """Queue the recorded work on the device's stream, resolved through `table` (already checked).
        Built, without slots: one launch."""
        if self._launch is None or self._slot_commands:
            self.device._activate()
            if self._stream_launch:
                device = self.device
                words.run(words.LAUNCH, device.stream_handle, self._encode_launch(table), device.functions, None)
                return
            if not self._built:
                self._build(table)
            elif table[:self._slots_needed] != self._table_seen:
                try:
                    self._patch(table)
                except (DeviceLostError, OutOfMemoryError):
                    raise
                except DeviceError:  # CUDA may refuse a memset or memcpy node its new address: build anew
                    self._drop_graph()
                    self._forget_nodes()
                    self._build(table)
                    self.patched = 0
            else:
                self.patched = 0
        err, = self._launch()
        if err:
            raise fail(err, "cuGraphLaunch")

    def _encode_launch(self, table: tuple[Buffer, ...]) -> list[int]:
        encoder = words.Words(table, self._staging)
        stream: list[int] = []
        for c in self._commands:
            encoder.emit(c, 0, stream)
            stream.append(0)
        return stream

    def _patch(self, table: tuple[Buffer, ...]) -> None:
        """Set new parameters on the nodes whose resolved addresses changed: those of the slots whose
        buffer changed, and of them only the ones whose words differ."""
        seen = self._table_seen
        table = table[:self._slots_needed]
        changed = [i for i, (a, b) in enumerate(zip(table, seen)) if a is not b]
        encoder = words.Words(table, self._staging)
        stream: list[int] = []
        done: set[int] = set()
        count = 0
        node_words, slot_words, users = self._node_words, self._slot_words, self._slot_users()
        for i in changed:
            for c in users.get(i, ()):
                if c.index in done:
                    continue
                done.add(c.index)
                old = node_words[c.index]
                positions = slot_words.get(c.index)
                if positions is not None:
                    new = old.copy()
                    for at, slot, offset in positions:
                        new[at] = table[slot].address + offset
                else:
                    new = encoder.command(c, self._slot_of[c.index])
                if new != old:
                    node_words[c.index] = new
                    stream += new
                    stream.append(0)
                    count += 1
        if stream:
            words.run(words.PATCH, int(self._exec), stream, self.device.functions, self._exec_nodes,
                      self.device.context_handle)
        self._table_seen = table
        self.patched = count

    # Inspection.
    def emitted_graph(self) -> nx.DiGraph:
        """The CUDA graph as built, read back from the driver (cuGraphGetNodes, cuGraphGetEdges): nodes are
        command indices, and ("join", slot) for join nodes; edge u -> v: v waits for u."""
        if self._graph is None:
            raise ValueError("no graph was built (one-shot deferred command buffers launch on the stream, and "
                             "command buffers with slots build at their first submit)")
        command_of = {slot: i for i, slot in enumerate(self._slot_of)}
        handle_of = {int(self._nodes[s]): s for s in range(len(self._nodes))}
        nodes, _ = call(driver.cuGraphGetNodes, self._graph, len(self._nodes))
        result = call(driver.cuGraphGetEdges, self._graph, 0)
        count = result[-1]
        result = call(driver.cuGraphGetEdges, self._graph, count)
        sources, targets = result[0], result[1]
        graph = nx.DiGraph()

        def name(node: Any) -> Any:
            slot = handle_of[int(node)]
            return command_of.get(slot, ("join", slot))

        for node in nodes:
            graph.add_node(name(node))
        for u, v in zip(sources[:count], targets[:count]):
            graph.add_edge(name(u), name(v))
        return graph
