"""Program: the frozen result of a command buffer's end(), the one thing every backend consumes.

The planner (hal.dependencies) fills it in; after end() it never changes. It holds:

- `commands`: the records in recording order, their references resolved (buffers, or slots);
- the dependency DAG (`predecessors(i)`, `groups`): what each command waits for, transitively reduced,
  with commands sharing a predecessor set sharing one group (an m-to-n barrier step is one group);
- `barriers`: where a replay in recording order (Vulkan) puts an execution barrier;
- the graph layout (`nodes`, `node_dependencies(k)`, `lanes`): graph nodes in an order in which every
  node comes after the nodes it waits for: one per command plus empty join nodes where a shared group
  has several members, with the commands of a wide segment spread over `lane_limit` lanes. Laid out at
  end() for a backend that builds a graph (its emitter's `graph_layout`), else on first use;
- `slot_users`: binding-table slot -> the commands that use it (what a new table touches);
- `constant_users`: constant slot -> the dispatches that read it (what new constants touch);
- `indirect`: the dispatch_indirect commands (a Dispatch with `parameters`), which backends guard, and
  `static_indirect`: those whose counts are read when a submission starts (dynamic=False);
- `regions`: the while_nonzero / if_nonzero regions, each one command (hal.commands.Region) whose body is a
  Program of its own; `collectives`: the collective commands (hal.commands.Collective); `nested`: per
  cb.execute_commands recorded at this level, the range (start, stop) of the commands it recorded, which sit
  between two execution barriers (a backend may run them as one unit, CUDA as a child graph); `transients`: the
  transient-memory plan (hal.transients.TransientPlan; None without cb.alloca), whose arena the commands'
  references already point into.

A backend's side of a command buffer is its emitter (see `Emitter`): the command buffer hands it the
Program, never its own fields, and the backend never re-derives dependencies.
"""

from libcpp.algorithm cimport sort

import networkx as nx

from hal.commands import CommandKind


cdef class Program:
    """See the module docstring. Created empty by the planner; read-only once `frozen`."""

    def __init__(self, str dependencies, Py_ssize_t lane_limit):
        self.dependencies = dependencies
        self.lane_limit = lane_limit
        self.commands = ()
        self.slot_users = {}
        self.slots_needed = 0
        self.constant_users = {}
        self.constants_needed = 0
        self.indirect = self.static_indirect = ()
        self.regions = ()
        self.collectives = ()
        self.nested = ()
        self.transients = None
        self.frozen = False
        self.layout_source = None
        self.group_start.push_back(0)
        self.dep_start.push_back(0)

    # Filled in by the planner.
    cdef void need_layout(self) except *:
        """Lay the graph out now if the planner left it for first use."""
        if self.layout_source is not None:
            source, self.layout_source = self.layout_source, None
            source(self)

    cdef int reserve(self, Py_ssize_t commands, bint layout) except -1:
        """Room for `commands` commands: a group and a member each (a chain), their barrier flags and, with
        `layout`, a graph node each. Grown one entry at a time, the tables would be allocated and copied over
        and over (a tenth of planning 10 commands)."""
        self.group_of.reserve(commands)
        self.barrier.reserve(commands)
        self.group_start.reserve(commands + 1)
        self.group_last.reserve(commands)
        self.members.reserve(commands)
        if layout:
            self.node_command.reserve(commands)
            self.command_node.reserve(commands)
            self.dep_start.reserve(commands + 1)
            self.node_deps.reserve(commands)
        return 0

    cdef Py_ssize_t add_group(self, vector[Py_ssize_t]& preds):
        cdef Py_ssize_t p, last = -1
        for p in preds:
            self.members.push_back(p)
            if p > last:
                last = p
        self.group_start.push_back(self.members.size())
        self.group_last.push_back(last)
        return self.group_last.size() - 1

    cdef void add_node(self, Py_ssize_t command, vector[Py_ssize_t]& deps):
        cdef Py_ssize_t d
        for d in deps:
            self.node_deps.push_back(d)
        self.dep_start.push_back(self.node_deps.size())
        if command >= 0:
            self.command_node.push_back(self.node_command.size())
        self.node_command.push_back(command)

    cdef vector[Py_ssize_t] sinks(self) except *:
        """The layout's nodes no other node waits for, in order: what a loop body's last node (its condition) waits
        for."""
        self.need_layout()
        cdef vector[char] waited_for
        cdef vector[Py_ssize_t] found
        cdef Py_ssize_t k, w
        waited_for.assign(self.node_command.size(), 0)
        for w in range(self.node_deps.size()):
            waited_for[self.node_deps[w]] = 1
        for k in range(self.node_command.size()):
            if not waited_for[k]:
                found.push_back(k)
        return found

    cdef vector[Py_ssize_t] node_blocks(self, list ranges) except *:
        """Per layout node, its block: the position in `ranges` (command ranges (start, stop), nested command
        buffers a backend runs each as one unit) of the range whose commands it runs, or of the one a join node
        goes with; -1 for the others. The planner puts a join just before its first waiter; a join goes in that
        waiter's block, unless commands outside the block share it (hazards mode) and none of its dependencies is in
        the block: then it stays outside (before the block: its dependencies all come before it), so those commands
        need not wait for the whole block. So every block is one run of layout nodes but for such joins, and nothing
        outside a block both follows and precedes it."""
        self.need_layout()
        cdef Py_ssize_t n = self.node_command.size(), k, i, d, block, follows = -1, own
        cdef vector[Py_ssize_t] block_of, waiter_block  # per join: the block of its first waiter
        cdef vector[char] shared_outside  # per join: a waiter outside that block
        cdef bint inside
        block_of.assign(n, -1)
        for block, (start, stop) in enumerate(ranges):
            for i in range(start, stop):
                block_of[self.command_node[i]] = block
        waiter_block.assign(n, -1)
        shared_outside.assign(n, 0)
        for k in range(n - 1, -1, -1):
            if self.node_command[k] >= 0:
                follows = block_of[k]
            else:
                waiter_block[k] = follows
        for k in range(n):
            own = block_of[k] if self.node_command[k] >= 0 else waiter_block[k]
            for i in range(self.dep_start[k], self.dep_start[k + 1]):
                d = self.node_deps[i]
                if self.node_command[d] < 0 and waiter_block[d] != own:
                    shared_outside[d] = 1
        for k in range(n):
            if self.node_command[k] >= 0 or waiter_block[k] < 0:
                continue
            inside = not shared_outside[k]
            for i in range(self.dep_start[k], self.dep_start[k + 1]):
                if block_of[self.node_deps[i]] == waiter_block[k]:
                    inside = True
            if inside:
                block_of[k] = waiter_block[k]
        return block_of

    cdef void freeze(self, tuple commands, dict slot_users, Py_ssize_t slots_needed, dict constant_users,
                     Py_ssize_t constants_needed, tuple indirect, tuple regions, tuple collectives, tuple nested):
        self.commands = commands
        self.slot_users = slot_users
        self.slots_needed = slots_needed
        self.constant_users = constant_users
        self.constants_needed = constants_needed
        self.indirect = indirect
        self.static_indirect = tuple([i for i in indirect if not commands[i].dynamic])
        self.regions = regions
        self.collectives = collectives
        self.nested = nested
        self.frozen = True

    # The DAG.
    def predecessors(self, Py_ssize_t index) -> tuple:
        """The commands command `index` waits for (recording order)."""
        if not 0 <= index < <Py_ssize_t>self.group_of.size():
            raise IndexError(f"no command {index}; the program has {self.group_of.size()}")
        cdef Py_ssize_t g = self.group_of[index]
        if g < 0:
            return ()
        return _tuple(self.members, self.group_start[g], self.group_start[g + 1])

    @property
    def groups(self) -> tuple:
        """The distinct predecessor sets, each a tuple of command indices."""
        cdef Py_ssize_t g
        return tuple([_tuple(self.members, self.group_start[g], self.group_start[g + 1])
                      for g in range(self.group_last.size())])

    @property
    def group_of(self) -> tuple:
        """Per command, the index of its group in `groups` (-1: it waits for nothing)."""
        return tuple(self.group_of)

    def dependency_graph(self) -> nx.DiGraph:
        """Nodes: command indices with `kind` and `segment` (a region's also `body`: its body's graph, whose nodes
        count from 0); edge u -> v: v waits for u."""
        graph = nx.DiGraph()
        for c in self.commands:
            graph.add_node(c.index, kind=c.kind, segment=c.segment)
            if c.kind in (CommandKind.WHILE_NONZERO, CommandKind.IF_NONZERO):  # a region: one node, its body's graph as an attribute
                graph.nodes[c.index]["body"] = c.body.dependency_graph()
        for c in self.commands:
            for p in self.predecessors(c.index):
                graph.add_edge(p, c.index)
        return graph

    def topological_order(self) -> list:
        """The commands in an order the DAG allows that, among those ready, always takes the one recorded
        last: as far from recording order as the dependencies permit (the host backend runs this, so a
        missing dependency shows up as a wrong result rather than hiding behind program order)."""
        cdef Py_ssize_t n = self.group_of.size(), groups = self.group_last.size(), i, g, k, j
        # Per group, its members still to run; per command, the groups it is a member of and, per group, the
        # commands waiting on it (each as one array and its starts, counted first).
        cdef vector[Py_ssize_t] waiting, feed_start, feeds, waiter_start, waiters
        waiting.resize(groups)
        feed_start.resize(n + 1)
        waiter_start.resize(groups + 1)
        for g in range(groups):
            waiting[g] = self.group_start[g + 1] - self.group_start[g]
            for k in range(self.group_start[g], self.group_start[g + 1]):
                feed_start[self.members[k] + 1] += 1
        for i in range(n):
            if self.group_of[i] >= 0:
                waiter_start[self.group_of[i] + 1] += 1
        _running_sum(feed_start)
        _running_sum(waiter_start)
        feeds.resize(feed_start[n])
        waiters.resize(waiter_start[groups])
        cdef vector[Py_ssize_t] fill = feed_start
        for g in range(groups):
            for k in range(self.group_start[g], self.group_start[g + 1]):
                i = self.members[k]
                feeds[fill[i]] = g
                fill[i] += 1
        fill = waiter_start
        # The ready commands, ascending: the one run next is the last. A command made ready waits for the one
        # just run, the largest of the ready ones, so it is larger than every other: the newly ready (sorted)
        # go on top and the stack stays in order, with no heap.
        cdef vector[Py_ssize_t] ready
        cdef size_t batch
        for i in range(n):
            g = self.group_of[i]
            if g < 0:
                ready.push_back(i)
            else:
                waiters[fill[g]] = i
                fill[g] += 1
        cdef list order = [None] * n
        cdef Py_ssize_t done = 0
        while not ready.empty():
            i = ready.back()
            ready.pop_back()
            order[done] = self.commands[i]
            done += 1
            batch = ready.size()
            for k in range(feed_start[i], feed_start[i + 1]):
                g = feeds[k]
                waiting[g] -= 1
                if waiting[g] == 0:
                    for j in range(waiter_start[g], waiter_start[g + 1]):
                        ready.push_back(waiters[j])
            if ready.size() - batch > 1:
                sort(ready.begin() + batch, ready.end())
        return order

    # Replay in recording order.
    @property
    def barriers(self) -> tuple:
        """The commands just before which a replay in recording order puts an execution barrier: before a
        command that waits for one recorded since the last barrier (in barriers mode, before every segment
        but the first)."""
        return tuple(i for i in range(self.barrier.size()) if self.barrier[i])

    # The graph layout.
    @property
    def nodes(self) -> tuple:
        """Per graph node, in an order where each comes after what it waits for: the command index it
        runs, or None for an empty join node."""
        self.need_layout()
        return tuple(None if c < 0 else c for c in self.node_command)

    def node_dependencies(self, Py_ssize_t node) -> tuple:
        """The graph nodes node `node` waits for."""
        self.need_layout()
        if not 0 <= node < <Py_ssize_t>self.node_command.size():
            raise IndexError(f"no node {node}; the layout has {self.node_command.size()}")
        return _tuple(self.node_deps, self.dep_start[node], self.dep_start[node + 1])

    def node_of(self, Py_ssize_t index) -> int:
        """The graph node of command `index`."""
        self.need_layout()
        return self.command_node[index]

    @property
    def lanes(self) -> tuple:
        """Per non-empty segment: (its first command, the lanes its commands run in)."""
        self.need_layout()
        return tuple(zip(self.segment_start, self.segment_width))

    def graph(self) -> nx.DiGraph:
        """The graph layout as networkx: nodes are command indices and ("join", node) for join nodes."""
        self.need_layout()
        def name(k):
            c = self.node_command[k]
            return ("join", k) if c < 0 else c

        graph = nx.DiGraph()
        for k in range(self.node_command.size()):
            graph.add_node(name(k))
            for d in self.node_dependencies(k):
                graph.add_edge(name(d), name(k))
        return graph

    def __repr__(self) -> str:
        self.need_layout()
        return (f"<Program {len(self.commands)} commands, {self.group_last.size()} dependency groups, "
                f"{self.node_command.size() - len(self.commands)} join nodes, {self.dependencies}>")


cdef void _running_sum(vector[Py_ssize_t]& counts):
    """counts[i] becomes counts[0] + ... + counts[i]: counts kept one place up (item i's at i + 1) become
    where each item's run starts in one flat array."""
    cdef size_t i
    for i in range(1, counts.size()):
        counts[i] += counts[i - 1]


cdef tuple _tuple(vector[Py_ssize_t]& items, Py_ssize_t start, Py_ssize_t stop):
    return tuple([items[i] for i in range(start, stop)])


cdef class Emitter:
    """A backend's side of one command buffer: each backend's command_buffer module subclasses it.

    The command buffer records and plans; the emitter turns the Program into the backend's form and runs it.
    A dispatch's constants may hold hal.ConstantSlot entries, resolved per submission from the values the
    backend's device is given (see hal.Device.queue_execute). A subclass implements:

    - `begin(program)` and `command(program, command)`, which serve single_pass recording, where the backend may
      emit each command as it comes (`program` is then still growing: the planner has added the command's nodes
      and barrier flag). `command` is compiled, so that the recorder's call per command is a C call for a compiled
      emitter; by default it emits nothing before end();
    - `end(program)`, which gets the frozen Program, and `reset()`;
    - `lanes`: the most chains the planner may spread a segment over (0: no limit, or no graph to lay out), and
      `graph_layout`: whether end() reads the graph layout (else the Program lays it out only if asked for it);
    - `reads_arguments` (False unless a compiled subclass sets it): whether it reads the arguments of plain
      dispatches as C data (hal.commands.DispatchArguments), which the recorder then makes for each;
    - `resubmitted(device, command_buffer, binding_table)` (compiled subclasses): the resubmission of an unchanged
      command buffer (hal.resubmission.queue_execute), which returns False to leave it to the general path.

    Submission goes through the backend's device, which calls its own emitter.
    """

    cpdef void command(self, Program program, object command) except *:
        pass

    cdef bint resubmitted(self, object device, object command_buffer, object binding_table) except -1:
        return False
