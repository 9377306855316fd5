"""How a Program's layout becomes CUDA graph nodes (compiled): kernel, memset and memcpy nodes, nested command buffers
as child graphs, regions as conditional nodes, collectives and calls as captured child graphs (a collective its
communicator runs as one kernel of hal's as that kernel's node), dispatch_indirect's setters, and the programmatic
edges of early launch. hal's CUDA emitter
(backends.cuda_graph.command_buffer.CudaEmitter) is the one subclass: it decides when to build, instantiates,
patches and launches.
"""

from libc.stdint cimport uintptr_t
from libc.string cimport memset
from libcpp.vector cimport vector

from cuda.bindings cimport cydriver
from cuda.bindings.cydriver cimport (CUfunction, CUgraph, CUgraphConditionalHandle, CUgraphEdgeData, CUgraphNode,
                                     CUgraphNodeParams, CUkernelNodeAttrValue, CUresult, CUstream)

from backends.cuda_graph.nodes cimport (KERNEL_NODE, MEMSET_NODE, Kernel, Node, add_once, address, check, check_at,
                                        collective_addresses, collective_kernel, node_of, ref_length, resolve,
                                        setter_node)
from hal.buffer cimport Buffer, BufferRef
from hal.commands cimport Call, Collective, Command, Dispatch, Region, Update
from hal.program cimport Emitter, Program

from collections import OrderedDict

from backends.cuda_graph.call_context import CAPTURE_ERRORS, CallFailed, CudaCallContext
from backends.cuda_graph.indirect import SETTER
from backends.cuda_graph.pinned import PinnedArena
from backends.cuda_graph.regions import SET_CONDITION


cdef class GraphBuilder(Emitter):
    """The graph of one command buffer and what builds it (see the module docstring); its state is the emitter's."""

    # Building.
    cdef void stage(self, Update update) except *:
        """Copy an update's data to pinned memory, where its memcpy node reads it."""
        if self.arena is None:
            self.arena = PinnedArena(self.device)
        self.staging[update] = self.arena.put(update.data)

    cdef void stage_all(self, Program program) except *:
        """Stage the updates of `program` and of its regions' bodies not staged yet."""
        for c in program.commands:
            if type(c) is Update and c not in self.staging:
                self.stage(<Update>c)
            elif type(c) is Region:
                self.stage_all((<Region>c).body)

    cdef void new_graph(self) except *:
        cdef CUgraph graph
        check(cydriver.cuGraphCreate(&graph, 0), "cuGraphCreate")
        self.graph = graph
        self.graph_finalizer = self.device.track(self, "graph", <uintptr_t>graph)

    cdef void drop_exec(self) except *:
        """Free the exec and the graph it was instantiated from (an earlier one than `graph`: end() always builds
        a new one), once the work submitted so far is done with them."""
        self.exec_finalizer()
        self.exec_graph_finalizer()
        self.exec = NULL
        self.exec_finalizer = self.exec_graph_finalizer = None
        self.exec_nodes.clear()
        self.exec_block_nodes.clear()

    cdef void drop_graph(self) except *:
        """Free the recording's graph, unless the exec was instantiated from it (then it goes with the exec)."""
        if self.graph_finalizer is not None and self.graph_finalizer is not self.exec_graph_finalizer:
            self.graph_finalizer()
            self.device.collect()

    cdef void add_nodes(self, tuple table, tuple constants, Py_ssize_t start, Py_ssize_t stop,
                        Command current=None) except *:
        """Add the layout's nodes [start, stop) to the graph, resolved through `table` and `constants`. `current`:
        single_pass, the command just recorded (not in the Program's commands before end())."""
        self.nodes.resize(stop)
        self.plain_kernels.resize(stop)
        self.add_layout(self.graph, self.program, self.nodes, self.plain_kernels, table, constants, start, stop,
                        current, True)
        self.emitted = stop

    cdef void add_layout(self, CUgraph graph, Program program, vector[CUgraphNode]& nodes,
                         vector[char]& plain_kernels, tuple table, tuple constants, Py_ssize_t start, Py_ssize_t stop,
                         Command current, bint top) except *:
        """Add `program`'s layout nodes [start, stop) to `graph` (`nodes`: their handles, `plain_kernels`: whether
        each is a plain dispatch's kernel node); `top`: the command buffer's own Program, not a region's body (only
        its nodes are kept for patches)."""
        cdef Py_ssize_t k, d, command
        cdef vector[CUgraphNode] deps, early  # early: the kernel nodes it waits for through programmatic edges
        cdef CUgraphNode node
        cdef bint launches_early, calls_inside
        cdef Node params, collective, scratch = Node.__new__(Node)  # collective: a collective's own kernel
        cdef Kernel kernel
        cdef bint keep = top and self.at_submit
        cdef bint blocks = top and self.block_of.size() > 0
        cdef Py_ssize_t block, dep_block, open_block = -1
        cdef CUgraph target
        cdef CUgraphNode dep
        cdef vector[CUgraphNode] outside  # the open block's dependencies outside it
        kernel.executable = NULL
        for k in range(start, stop):
            block = self.block_of[k] if blocks else -1
            # Blocks are runs of layout nodes (see find_blocks), but for joins of the command buffer's own graph
            # that its commands share with a block's: those go there while the block stays open.
            if block != open_block and not (block < 0 and open_block >= 0 and program.command_of(k) < 0 and
                                            not self.waits_for_block(program, k, open_block)):
                if open_block >= 0:
                    self.add_block(graph, open_block, outside)
                open_block = block
                outside.clear()
            target = graph if block < 0 else self.blocks[block]
            command = program.command_of(k)
            if command < 0:
                c = None
            else:  # single_pass: `current`, the command just recorded, is not among the Program's commands yet
                c = current if current is not None and current.index == command else program.commands[command]
            collective = None  # the node of the kernel its communicator runs a collective as (else None)
            if type(c) is Collective:
                given = collective_addresses(<Collective>c, table)
                collective = collective_kernel(<Collective>c, given)
            plain_kernels[k] = (type(c) is Dispatch and (<Dispatch>c).parameters is None) or collective is not None
            launches_early = self.early_launch and plain_kernels[k] and (
                collective is not None or (<Dispatch>c).export.early_launch)
            deps.clear()
            early.clear()
            for d in range(program.first_wait(k), program.first_wait(k + 1)):
                dep = nodes[program.waited_node(d)]
                dep_block = self.block_of[program.waited_node(d)] if blocks else -1
                if dep_block >= 0 and dep_block != block:  # in another block: that block's child graph node
                    dep = self.block_nodes[dep_block]
                if block >= 0 and dep_block != block:
                    add_once(outside, dep)
                elif launches_early and dep_block == block and plain_kernels[program.waited_node(d)]:
                    add_once(early, dep)  # (a kernel node: not another block's child graph node)
                else:
                    add_once(deps, dep)
            if command < 0:
                check(cydriver.cuGraphAddEmptyNode(&node, target, deps.data(), deps.size()), "cuGraphAddEmptyNode")
                nodes[k] = node
                continue
            if type(c) is Region:
                calls_inside = has_calls((<Region>c).body)
                if calls_inside and self.last_call != NULL:
                    add_once(deps, self.last_call)
                nodes[k] = self.add_region(graph, <Region>c, deps, table, constants, top)
                if calls_inside:
                    self.last_call = nodes[k]
                continue
            if type(c) is Collective:
                if collective is None:
                    nodes[k] = self.add_collective(graph, <Collective>c, deps, table)
                else:  # (the kernel waits for what it follows itself: communicator.kernel_of)
                    nodes[k] = self.add_kernel(graph, collective, deps, early, command)
                    (<Collective>c).communicator.captured_by(self)
                if keep:  # what a patch compares: its addresses
                    self.given[command] = given
                continue
            if type(c) is Call:  # after the call before it (see CALL_ORDER)
                if self.last_call != NULL:
                    add_once(deps, self.last_call)
                key = call_key(<Call>c, table, constants)
                check_at(cydriver.cuGraphAddChildGraphNode(&node, graph, deps.data(), deps.size(),
                                                            self.captured(<Call>c, key)), "cuGraphAddChildGraphNode",
                          command)
                nodes[k] = node
                self.last_call = node
                if keep:  # what a patch compares: the buffers and constants its function saw
                    self.given[command] = key
                continue
            # The driver copies the parameters: one Node serves every command, unless patches need them kept.
            params = node_of(c, table, constants, self.staging, &kernel, None if keep else scratch)
            if params.kind == KERNEL_NODE:
                node = self.add_kernel(target, params, deps, early, command)
                if (<Dispatch>c).parameters is not None:
                    self.add_setter(graph, <Dispatch>c, node, deps, table, top)
            elif params.kind == MEMSET_NODE:
                check_at(cydriver.cuGraphAddMemsetNode(&node, target, deps.data(), deps.size(), &params.memset,
                                                        self.context), "cuGraphAddMemsetNode", command)
            else:
                check_at(cydriver.cuGraphAddMemcpyNode(&node, target, deps.data(), deps.size(), &params.memcpy,
                                                        self.context), "cuGraphAddMemcpyNode", command)
            if keep:
                self.given[command] = params
            nodes[k] = node
        if open_block >= 0:
            self.add_block(graph, open_block, outside)

    cdef CUgraphNode add_kernel(self, CUgraph target, Node params, vector[CUgraphNode]& deps,
                                vector[CUgraphNode]& early, Py_ssize_t command) except *:
        """Add kernel node `params` to `target` after `deps`, and after `early` through programmatic edges."""
        cdef CUgraphNode node
        cdef CUgraphEdgeData programmatic
        cdef Py_ssize_t d
        memset(&programmatic, 0, sizeof(programmatic))
        programmatic.from_port = cydriver.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
        programmatic.type = cydriver.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
        check_at(cydriver.cuGraphAddKernelNode(&node, target, deps.data(), deps.size(), &params.kernel),
                  "cuGraphAddKernelNode", command)
        for d in range(<Py_ssize_t>early.size()):
            check_at(cydriver.cuGraphAddDependencies(target, &early[d], &node, &programmatic, 1),
                      "cuGraphAddDependencies (programmatic)", command)
        return node

    cdef void find_blocks(self, Program program) except *:
        """The nested command buffers' blocks of the graph about to be built: each nested range (Program.nested) of
        plain commands (fills, updates, copies, direct dispatches) with the join nodes that go with it
        (Program.node_blocks); the others are emitted inline (see the module docstring). The child graphs are
        created empty."""
        cdef CUgraph child
        ranges = [(start, stop) for start, stop in program.nested
                  if not any([type(c) is Region or type(c) is Collective or type(c) is Call or
                              (type(c) is Dispatch and (<Dispatch>c).parameters is not None)
                              for c in program.commands[start:stop]])]
        if not ranges:
            self.block_of.clear()
            return
        self.block_of = program.node_blocks(ranges)
        for _ in ranges:
            check(cydriver.cuGraphCreate(&child, 0), "cuGraphCreate")
            self.blocks.push_back(child)
            self.block_finalizers.append(self.device.track(self, "graph", <uintptr_t>child))
        self.block_nodes.resize(len(ranges))
        self.block_changed.assign(len(ranges), 0)

    cdef bint waits_for_block(self, Program program, Py_ssize_t k, Py_ssize_t block):
        """Does layout node `k` wait for a node of `block`?"""
        cdef Py_ssize_t i
        for i in range(program.first_wait(k), program.first_wait(k + 1)):
            if self.block_of[program.waited_node(i)] == block:
                return True
        return False

    cdef void add_block(self, CUgraph graph, Py_ssize_t block, vector[CUgraphNode]& outside) except *:
        """Add `block`'s child graph to `graph` as one node after `outside` (the driver copies the graph)."""
        cdef CUgraphNode node
        check(cydriver.cuGraphAddChildGraphNode(&node, graph, outside.data(), outside.size(), self.blocks[block]),
               "cuGraphAddChildGraphNode (a nested command buffer)")
        self.block_nodes[block] = node

    cdef CUgraphNode add_region(self, CUgraph graph, Region r, vector[CUgraphNode]& deps, tuple table,
                                tuple constants, bint top) except *:
        """Add region `r` to `graph` after `deps`: its condition's kernel node, then the conditional node, whose
        body graph gets the body's layout (and, for WHILE, the condition's kernel node again, last); returns the
        conditional node, which the commands after the region wait for."""
        cdef CUgraphConditionalHandle handle
        cdef CUgraphNode setter, conditional, node
        cdef CUgraphNodeParams params
        cdef CUgraph body
        cdef Program program = r.body
        cdef vector[CUgraphNode] body_nodes
        cdef vector[char] body_kernels
        cdef vector[CUgraphNode] sinks
        cdef CUgraphNode outer_static
        cdef Py_ssize_t k, n = program.node_count()
        check_at(cydriver.cuGraphConditionalHandleCreate(&handle, graph, self.context, 0, 0),
                  "cuGraphConditionalHandleCreate", r.index)
        function = <CUfunction><uintptr_t>self.device.load_executable(SET_CONDITION).functions[0]
        flag = address(r.condition, resolve(r.condition, table))
        cdef Node condition = setter_node(function, [handle, flag])
        check_at(cydriver.cuGraphAddKernelNode(&setter, graph, deps.data(), deps.size(), &condition.kernel),
                  "cuGraphAddKernelNode (the region's condition)", r.index)
        memset(&params, 0, sizeof(params))
        params.type = cydriver.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = handle
        params.conditional.type = cydriver.CU_GRAPH_COND_TYPE_WHILE if r.loop else cydriver.CU_GRAPH_COND_TYPE_IF
        params.conditional.size = 1
        params.conditional.ctx = self.context
        check_at(cydriver.cuGraphAddNode(&conditional, graph, &setter, NULL, 1, &params), "cuGraphAddNode (conditional)",
                  r.index)
        body = params.conditional.phGraph_out[0]
        body_nodes.resize(n)
        body_kernels.resize(n)
        outer_static, outer_call = self.last_static, self.last_call  # each chains within one graph
        self.last_static = self.last_call = NULL
        self.add_layout(body, program, body_nodes, body_kernels, table, constants, 0, n, None, False)
        self.last_static, self.last_call = outer_static, outer_call
        if r.loop:  # the flag the body leaves decides the next iteration
            for k in program.sinks():
                sinks.push_back(body_nodes[k])
            check_at(cydriver.cuGraphAddKernelNode(&node, body, sinks.data(), sinks.size(), &condition.kernel),
                      "cuGraphAddKernelNode (the region's condition)", r.index)
        if top:
            self.conditions[r.index] = <uintptr_t>setter
        return conditional

    cdef CUgraphNode add_collective(self, CUgraph graph, Collective c, vector[CUgraphNode]& deps,
                                    tuple table) except *:
        """Add collective `c` to `graph` after `deps`: NCCL's work for it, captured from a stream of its own into a
        child graph (backends.cuda_graph.communicator)."""
        cdef CUgraphNode node
        cdef CUgraph child = self.capture(c, table)
        try:
            check_at(cydriver.cuGraphAddChildGraphNode(&node, graph, deps.data(), deps.size(), child),
                      "cuGraphAddChildGraphNode", c.index)
        finally:
            cydriver.cuGraphDestroy(child)  # the node holds a copy, and the references NCCL's work keeps
        return node

    cdef CUgraph capture(self, Collective c, tuple table) except NULL:
        """Collective `c`'s NCCL work, resolved through `table`, captured from a stream of its own: a new graph
        (the caller destroys it)."""
        cdef CUstream stream
        cdef CUgraph child = NULL
        cdef CUresult ended
        source, target = collective_addresses(c, table)
        self.device.activate()
        check_at(cydriver.cuStreamCreate(&stream, cydriver.CU_STREAM_NON_BLOCKING), "cuStreamCreate", c.index)
        try:
            check_at(cydriver.cuStreamBeginCapture(stream, cydriver.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                      "cuStreamBeginCapture", c.index)
            c.communicator.captured_by(self)
            try:
                c.communicator.enqueue(c, source, target, <uintptr_t>stream)
            finally:  # also after a failure: the stream leaves capture mode
                ended = cydriver.cuStreamEndCapture(stream, &child)
            check_at(ended, "cuStreamEndCapture (the collective's capture)", c.index)
        except BaseException:
            if child != NULL:
                cydriver.cuGraphDestroy(child)
            cydriver.cuStreamDestroy(stream)
            raise
        cydriver.cuStreamDestroy(stream)
        return child

    cdef CUgraph captured(self, Call c, tuple key) except NULL:
        """Call `c`'s work for `key` (call_key: its buffers and constants), captured once and kept in the emitter's
        cache (CALL_CAPTURES per call, the least recently used dropped first); the graph stays hal's (a child graph
        node holds a copy)."""
        cdef CUgraph child
        kept = self.captures.setdefault(c.index, OrderedDict())
        if key in kept:
            kept.move_to_end(key)
            return <CUgraph><uintptr_t>kept[key][0]
        child = self.capture_call(c, key)
        if len(kept) == CALL_CAPTURES:
            kept.popitem(last=False)[1][1]()
        kept[key] = (<uintptr_t>child, self.device.track(self, "graph", <uintptr_t>child))
        self.calls_captured += 1
        return child

    cdef CUgraph capture_call(self, Call c, tuple key) except NULL:
        """Call `c`'s function, its stream captured (the device's capture stream): a new graph of its work. The
        capture is relaxed: a library may allocate and initialise itself lazily meanwhile (torch's and CuPy's cuBLAS
        handles are created at their first use, with cudaMalloc); what conflicts with the capture (synchronizing the
        stream or its events, querying them) still fails it."""
        cdef CUstream stream = <CUstream><uintptr_t>self.device.capture_stream
        cdef CUgraph child = NULL
        cdef CUresult ended
        buffers, constants = key
        self.device.activate()
        check_at(cydriver.cuStreamBeginCapture(stream, cydriver.CU_STREAM_CAPTURE_MODE_RELAXED),
                  "cuStreamBeginCapture", c.index)
        raised = None
        try:
            c.function(CudaCallContext(<uintptr_t>stream, self.device.ordinal, buffers, constants))
        except Exception as e:
            raised = e
        finally:  # also after a failure: the stream leaves capture mode
            ended = cydriver.cuStreamEndCapture(stream, &child)
        if ended == cydriver.CUDA_SUCCESS and raised is None:
            return child
        if child != NULL:
            cydriver.cuGraphDestroy(child)
        if raised is None and <int>ended not in CAPTURE_ERRORS:
            check_at(ended, "cuStreamEndCapture (the call's capture)", c.index)
        raise CallFailed.of(c.index, raised, <int>ended)

    cdef void add_setter(self, CUgraph graph, Dispatch c, CUgraphNode target, vector[CUgraphNode]& deps, tuple table,
                         bint top) except *:
        """Make dispatch_indirect `c`'s kernel node `target` device-updatable and add its setter node before it.
        A dynamic setter waits for `deps`, what the dispatch waits for. Static setters form one chain from the
        launch's start, off the dispatches' path: as roots of their own, each would add to the launch's host cost
        (bench.indirect)."""
        cdef CUkernelNodeAttrValue value
        cdef CUgraphNode node
        memset(&value, 0, sizeof(value))
        value.deviceUpdatableKernelNode.deviceUpdatable = 1
        check_at(cydriver.cuGraphKernelNodeSetAttribute(target, cydriver.CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE,
                                                         &value), "cuGraphKernelNodeSetAttribute", c.index)
        check_at(cydriver.cuGraphKernelNodeGetAttribute(target, cydriver.CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE,
                                                         &value), "cuGraphKernelNodeGetAttribute", c.index)
        setter = self.device.load_executable(SETTER)
        limit = self.device.capabilities.max_workgroup_count
        cdef BufferRef p = c.parameters
        cdef Node params = setter_node(<CUfunction><uintptr_t>setter.functions[0], [
            <uintptr_t>value.deviceUpdatableKernelNode.devNode, address(p, resolve(p, table)),
            self.device.indirect_faults(), limit[0], limit[1], limit[2], c.index])
        if c.dynamic:
            check_at(cydriver.cuGraphAddKernelNode(&node, graph, deps.data(), deps.size(), &params.kernel),
                      "cuGraphAddKernelNode (the indirect counts' setter)", c.index)
        else:
            check_at(cydriver.cuGraphAddKernelNode(&node, graph, &self.last_static, self.last_static != NULL,
                                                    &params.kernel), "cuGraphAddKernelNode (the indirect counts' setter)",
                      c.index)
            self.last_static = node
        check_at(cydriver.cuGraphAddDependencies(graph, &node, &target, NULL, 1), "cuGraphAddDependencies", c.index)
        if top:
            self.setters[c.index] = (params, <uintptr_t>node)


CALL_CAPTURES = 16  # captures kept per call (as XLA keeps a traced command's): one per set of buffers and constants
# CALL_ORDER: a command buffer's calls run in their recording order, each after the one before (a region holding
# calls counts as one), as work queued on one stream would: every call is captured from the device's one capture
# stream, and a library reuses what it keeps per stream (cuBLAS's workspace through torch) from call to call, so
# two calls running at once would share it. hal's own commands run beside them as their dependencies allow.


cdef bint has_calls(Program program):
    """Does `program` hold a call, also inside its regions?"""
    for c in program.commands:
        if type(c) is Call or (type(c) is Region and has_calls((<Region>c).body)):
            return True
    return False


cdef tuple call_key(Call c, tuple table, tuple constants):
    """What call `c`'s function sees, resolved through `table` and the submission's `constants`: per binding its
    address and length, and its constants' values. A capture is for one key."""
    cdef BufferRef r
    cdef Buffer b
    buffers = []
    for ref in c.bindings:
        r = <BufferRef>ref
        b = resolve(r, table)
        buffers.append((address(r, b), ref_length(r, b)))
    return (tuple(buffers), c.constant_values(constants))
