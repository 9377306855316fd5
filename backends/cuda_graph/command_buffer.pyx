"""CUDA graph command buffers: the Program's graph layout becomes a CUDA graph, instantiated once, then
only patched where something changed (compiled, through cuda-bindings' cydriver).

- deferred: at end() every node of the layout (commands, and the empty join nodes the planner put
  where several commands wait on several) becomes a graph node: kernel, memset, or memcpy (an update
  copies from pinned memory the command buffer owns). The graph is instantiated once (its first launch
  uploads it); a submit is one launch.
- single_pass: each command's nodes are added as it is recorded (IREE's approach).
- Lanes: the planner spreads a wide segment over at most `device.graph_lanes` chains, since the driver's
  instantiation and launch cost grow with a graph's width (bench/README.md).
- Binding tables and constant slots: a recording that uses slots or constant slots is built at its first
  submit; a later table or new constant values patch only the nodes whose resolved parameters changed
  (cuGraphExec*NodeSetParams), found through the Program's slot and constant users; the graph is never
  instantiated again for them. An unchanged table and unchanged values cost nothing. (single_pass command
  buffers with a binding or constant capacity build at the first submit too: what they use is known only at
  end().)
- Re-recording after reset(): the old exec is updated in place (cuGraphExecUpdate) when the topology
  allows; only otherwise is the graph instantiated again.
- One-shot deferred command buffers skip the graph: their commands are launched on the stream in order,
  which costs less than building and instantiating a graph that runs once (see bench/cuda.py); unless they
  hold a dispatch_indirect, which needs a graph.
- dispatch_indirect: a device-updatable kernel node, and a setter node before it (backends.cuda_graph.indirect).
- Early launch: on a device whose capabilities say supports_early_launch, the edges from plain dispatches' kernel
  nodes into a plain dispatch whose export is marked early_launch (and from and into a collective's kernel node,
  below) are programmatic (programmatic dependent launch):
  the kernel may launch once every block of the kernels it waits for has started or signalled
  (griddepcontrol.launch_dependents), and waits for their end itself (griddepcontrol.wait). Edges from or to
  anything else (joins, setters, regions, nested blocks, transfers) stay plain.
- Regions: a conditional WHILE or IF node whose body graph is built from the region's Program, its condition set
  by a kernel node (backends.cuda_graph.regions). A new table or new constant values patch the nodes outside the
  regions as anywhere; only when a slot or constant slot that a region uses changes is the command buffer built
  anew (instantiated again): updating nodes inside conditional bodies in place is not done yet.
- Collectives: a child graph node each, NCCL's work captured from a stream (backends.cuda_graph.communicator). A
  new table captures the work of a collective whose buffers moved again and sets it on the exec's node
  (cuGraphExecChildGraphNodeSetParams); never instantiated again. One that the communicator runs as one kernel of
  hal's (its kernel_of: the peer all_reduce) is that kernel's node instead, which waits for the kernels before it
  itself: early launch treats it as a plain dispatch of an early_launch export (the edges into it from plain
  dispatches' kernel nodes and from other such nodes programmatic, and so are its edges into early_launch
  dispatches); a patch sets its new parameters on the exec's node (cuGraphExecKernelNodeSetParams). A one-shot
  command buffer holding one builds a graph too (the communicator's docstring says why).
- Calls (CommandBuffer.call; hal.calls): a child graph node each, the function's work captured from the device's
  capture stream, once per set of buffer addresses and constant values (kept per call, CALL_CAPTURES at most); a new
  table or new values set the exec's node to the capture for them (capturing again only for a set not kept). A
  one-shot command buffer holding a call builds a graph too (the function's work is captured the same way), and a
  single_pass one builds at end() (a function that fails leaves the recording as it was).
- Nested command buffers (cb.execute_commands): the commands one call recorded (Program.nested) become one child
  graph node, built from their layout nodes; a new table or new constant values set the changed nodes of hal's copy
  of the child graph, then the exec's child node once (cuGraphExecChildGraphNodeSetParams); never instantiated
  again. A nested block holding a region, a dispatch_indirect, a collective or a call is emitted inline instead, and
  so are those recorded inside a region or by a single_pass command buffer building as it records.
- The resubmission of an unchanged command buffer (hal.resubmission.queue_execute) is `CudaEmitter.resubmitted`:
  one cuGraphLaunch after a few identity checks.
"""

from cpython.ref cimport Py_DECREF, Py_INCREF
from libc.stdint cimport uint32_t, uint64_t, uintptr_t
from libcpp.vector cimport vector

from cuda.bindings cimport cydriver
from cuda.bindings.cydriver cimport CUcontext, CUgraph, CUgraphExec, CUgraphNode, CUresult, CUstream

from backends.cuda_graph.graph_builder cimport GraphBuilder, call_key, has_calls
from backends.cuda_graph.nodes cimport (KERNEL_NODE, MEMSET_NODE, Kernel, Node, SlotWord, address, check, check_at,
                                        collective_addresses, collective_kernel, constant_words_of, node_of,
                                        resolve)
from hal.buffer cimport Buffer, BufferRef, ConstantSlot
from hal.commands cimport Call, Collective, Command, Dispatch, Region, Update
from hal.program cimport Program

import contextlib

import networkx as nx
from cuda.bindings import driver

from backends.cuda_graph.api import call
from backends.cuda_graph.call_context import CallFailed
from hal.errors import DeviceError, DeviceLostError, HalError, OutOfMemoryError, UnsupportedError

PROGRAMMATIC = driver.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
DEVICE_SIDE_DRIVER = 12040  # device-updatable kernel nodes (dispatch_indirect) and conditional nodes (regions)


cdef class CudaEmitter(GraphBuilder):
    """The CUDA side of one command buffer (hal.program.Emitter): its graph, exec and pinned update data.

    `instantiations` counts the graphs instantiated (a re-recording that updates the exec adds none),
    `updates` the re-recordings absorbed by cuGraphExecUpdate, `patched` the nodes the latest submit patched,
    `calls_captured` the captures of calls' functions (hal.calls).
    `token`: the device's resubmit token while a resubmission is one launch (see `resubmitted`), given with the
    table it was last submitted with.
    """

    def __init__(self, device, str mode, str strategy, Py_ssize_t binding_capacity, Py_ssize_t constant_capacity):
        self.device = device
        self.resubmission = device.resubmission
        self.context = <CUcontext><uintptr_t>device.context_handle
        self.stream = <CUstream><uintptr_t>device.stream_handle
        self.lanes = device.graph_lanes
        self.graph_layout = True  # the graph's nodes and edges
        self.one_shot = mode == "one_shot"
        self.single_pass = strategy == "single_pass"
        self.slots_possible = binding_capacity > 0 or constant_capacity > 0
        self.at_submit = False
        self.graph = NULL
        self.exec = NULL
        self.exec_no_update = self.upload = False
        self.early_launch = device.capabilities.supports_early_launch
        self.instantiations = self.updates = self.patched = self.calls_captured = 0
        self.captures = {}
        self.forget()

    cdef void forget(self):
        """Drop the recording's graph, nodes and staged update data (the exec stays, for cuGraphExecUpdate)."""
        self.token = None
        self.forget_nodes()
        self.arena = None
        self.staging = {}
        self.stream_launch = False

    cdef void forget_nodes(self):
        """Drop the graph and what was built from it."""
        self.graph = NULL
        self.graph_finalizer = None
        self.nodes.clear()
        self.plain_kernels.clear()
        self.emitted = 0
        self.built = False
        self.table_seen = self.words_seen = None
        self.given = None
        self.slot_words.clear()
        self.constant_words.clear()
        self.slot_transfers.clear()
        self.slot_setters.clear()
        self.slot_captured.clear()
        self.constant_calls.clear()
        self.slot_in_region.clear()
        self.constant_in_region.clear()
        self.setters = {}
        self.conditions = {}
        self.last_static = self.last_call = NULL
        self.looked_at.clear()
        for finalizer in self.block_finalizers or ():
            finalizer()
        self.block_finalizers = []
        self.block_of.clear()
        self.blocks.clear()
        self.block_nodes.clear()
        self.block_changed.clear()

    def release_graphs(self) -> None:
        """Free the graph and the exec now, for a communicator whose work they captured is closing: NCCL's
        ncclCommDestroy waits for the graphs holding its work. The command buffer cannot be submitted again (hal
        refuses a closed communicator); its work submitted so far has finished (the communicator synchronized)."""
        if self.device.closed:  # the device freed them
            return
        with contextlib.suppress(HalError):
            self.drop_graph()
        if self.exec_finalizer is not None:
            self.drop_exec()
        self.forget_nodes()
        self.device.collect()

    # The emitter interface.
    def begin(self, Program program) -> None:
        self.program = program
        if self.single_pass and not self.slots_possible:
            self.device.activate()
            self.new_graph()

    cpdef void command(self, Program program, object command) except *:
        if self.graph != NULL and type(command) is Call:  # built at end(), where a failing function leaves no trace
            self.drop_graph()
            self.forget_nodes()
        if self.graph != NULL:
            self.device.activate()
            if type(command) is Update:
                self.stage(<Update>command)
            elif type(command) is Region:
                self.stage_all((<Region>command).body)
            self.add_nodes((), (), self.emitted, program.node_count(), <Command>command)

    def end(self, Program program) -> None:
        if (program.indirect or program.regions) and self.device.driver_version < DEVICE_SIDE_DRIVER:
            raise UnsupportedError(f"dispatch_indirect and regions need device-updatable kernel nodes and conditional "
                                   f"nodes, CUDA driver 12.4 or newer; this driver is {self.device.driver_version}")
        self.program = program
        self.device.activate()
        self.stage_all(program)
        self.at_submit = bool(program.slot_users) or bool(program.constant_users)
        if self.graph != NULL:  # single_pass: the nodes are there
            self.instantiate()
            self.built = True
        elif self.one_shot and not self.single_pass and not program.indirect and not program.regions and \
                not program.collectives and not has_calls(program):
            # launched in order at submit: no graph for a single run (collectives are captured all the same: NCCL
            # without graph mixing wants no call outside graphs while a graph of its communicator is queued,
            # backends.cuda_graph.communicator)
            self.stream_launch = True
        elif not self.at_submit:
            self.build((), ())

    def reset(self) -> None:
        self.drop_graph()
        if self.arena is not None:
            self.arena.release()
        self.forget()
        self.program = None
        for kept in self.captures.values():  # the calls recorded next are others
            for _, release in kept.values():
                release()
        self.captures = {}

    cdef void set_captured(self, Py_ssize_t index, tuple table, tuple constants) except *:
        """Point collective or call `index`'s child graph node of the exec at the work for the buffers `table` binds
        now and the values `constants` holds, when they changed: a collective's work is captured again, a call's
        taken from its captures (captured again if not kept); the exec's node takes the new graph (the same
        topology, else the driver refuses and follow() builds anew). A collective that is one kernel's node gets
        that kernel's new parameters."""
        c = self.program.commands[index]
        if type(c) is Collective:
            given = collective_addresses(<Collective>c, table)
        else:
            given = call_key(<Call>c, table, constants)
        if given == self.given[index]:
            return
        cdef CUgraphNode node = self.exec_nodes[self.program.node_of_command(index)]
        cdef CUgraph child
        cdef Node params = collective_kernel(<Collective>c, given) if type(c) is Collective else None
        if type(c) is Call:
            child = self.captured(<Call>c, given)
            check_at(cydriver.cuGraphExecChildGraphNodeSetParams(self.exec, node, child),
                      "cuGraphExecChildGraphNodeSetParams", index)
        elif params is not None:  # its kernel's node (graph_builder)
            check_at(cydriver.cuGraphExecKernelNodeSetParams(self.exec, node, &params.kernel),
                      "cuGraphExecKernelNodeSetParams", index)
        else:
            child = self.capture(<Collective>c, table)
            try:
                check_at(cydriver.cuGraphExecChildGraphNodeSetParams(self.exec, node, child),
                          "cuGraphExecChildGraphNodeSetParams", index)
            finally:
                cydriver.cuGraphDestroy(child)
        self.given[index] = given
        self.captures_set += 1

    cdef void build(self, tuple table, tuple constants) except *:
        """The whole graph from the Program, resolved through `table` and `constants`; instantiated (or the old
        exec updated). A failure leaves no graph or nodes behind: a retry builds from the start."""
        self.new_graph()
        try:
            if self.at_submit:
                self.given = [None] * len(self.program.commands)
            self.find_blocks(self.program)
            self.add_nodes(table, constants, 0, self.program.node_count())
            if self.at_submit:
                self.table_seen = table[:self.program.slots_needed]
                self.words_seen = constant_words_of(constants, self.program.constants_needed)
                self.looked_at.assign(len(self.program.commands), 0)
                self.index_slot_words()
            self.instantiate()
        except BaseException:
            try:
                self.drop_graph()
            except HalError:  # the failure that got here is the one to report
                pass
            self.forget_nodes()
            raise
        self.built = True

    cpdef instantiate(self):
        """Instantiate the graph, or update the exec in place with it when the topology allows."""
        cdef CUgraphExec exec_
        cdef cydriver.CUgraphExecUpdateResultInfo info
        cdef bint updated = False
        # CUDA refuses cuGraphExecUpdate to graphs with device-updatable nodes (dispatch_indirect, also in region
        # bodies), and hal does not ask it to update conditional nodes' bodies: those are instantiated anew.
        cdef bint no_update = bool(self.program.indirect) or bool(self.program.regions) or \
            bool(self.program.collectives)
        if self.exec != NULL:
            updated = not (no_update or self.exec_no_update) and \
                cydriver.cuGraphExecUpdate(self.exec, self.graph, &info) == cydriver.CUDA_SUCCESS
            if updated:
                self.updates += 1
            else:  # another topology: instantiate anew
                self.drop_exec()
        if not updated:
            check(cydriver.cuGraphInstantiate(&exec_, self.graph, 0), "cuGraphInstantiate")
            self.exec = exec_
            self.exec_finalizer = self.device.track(self, "exec", <uintptr_t>exec_)
            # Node updates name the nodes of the graph the exec was instantiated from (CUDA's rule), also after
            # cuGraphExecUpdate took a later graph's parameters: kept while the exec is.
            self.exec_graph_finalizer = self.graph_finalizer
            self.exec_nodes = self.nodes
            self.exec_block_nodes = self.block_nodes
            self.exec_no_update = no_update
            self.instantiations += 1
        # No cuGraphUpload: the first launch uploads the exec, which brings the first result no later than an
        # upload here would, and end() returns sooner (bench/README.md, "The upload"); unless it has device-updatable
        # nodes, which CUDA wants uploaded before a launch.
        self.upload = no_update

    # Submission.
    def submit(self, tuple table, tuple constants) -> None:
        """Queue the recorded work on the device's stream, resolved through `table` and the constant slot values
        `constants` (both already checked)."""
        self.submitted = table
        if self.stream_launch:
            self.launch_on_stream(table, constants)
            return
        if not self.built:
            self.build(table, constants)
        elif self.at_submit:
            self.follow(table[:self.program.slots_needed],
                        constant_words_of(constants, self.program.constants_needed), constants)
        else:
            self.patched = 0
        if self.upload:
            check(cydriver.cuGraphUpload(self.exec, self.stream), "cuGraphUpload")
            self.upload = False
        check(cydriver.cuGraphLaunch(self.exec, self.stream), "cuGraphLaunch")

    cdef void follow(self, tuple table, tuple words, tuple constants) except *:
        """Bring the exec to `table` (the used prefix) and the constant slot values `constants` (`words`: those
        read, as words): patch what changed; if the driver refuses a patch, build anew."""
        if table == self.table_seen and words == self.words_seen:
            self.patched = 0
            return
        # Nodes inside conditional bodies are not patched: a change there builds anew.
        if self.program.regions and self.region_changes(table, words):
            with contextlib.suppress(HalError):
                self.drop_graph()
            self.forget_nodes()
            self.build(table, constants)
            self.patched = 0
            return
        try:
            self.patch(table, words, constants)
        except DeviceError as e:
            # The nodes kept may now differ from the exec's: drop the graph, so the next submit builds anew.
            # CUDA may refuse a memset or memcpy node its new address: that one is built anew at once.
            with contextlib.suppress(HalError):  # the failure that got here is the one to report
                self.drop_graph()
            self.forget_nodes()
            if isinstance(e, (DeviceLostError, OutOfMemoryError, CallFailed)):
                raise
            self.build(table, constants)
            self.patched = 0

    cdef bint region_changes(self, tuple table, tuple words):
        """Does `table` or `words` change a slot or constant slot that a region uses?"""
        cdef Py_ssize_t i
        for i in range(len(table)):
            if self.slot_in_region[i] and table[i] is not self.table_seen[i]:
                return True
        for i in range(len(words)):
            if self.constant_in_region[i] and words[i] != self.words_seen[i]:
                return True
        return False

    @property
    def resubmits_in_one_launch(self) -> bool:
        """Built, reusable, without constant slots (their values come with every submit): submitted again with the
        same binding table, it is one cuGraphLaunch of the exec as the last submission left it."""
        return self.built and not self.one_shot and not self.program.constant_users

    cdef bint resubmitted(self, object device, object command_buffer, object binding_table) except -1:
        """One cuGraphLaunch, if this emitter holds the device's resubmission token (given by the general path:
        reusable, built, without constant slots, nothing to free, the device neither lost nor closing; revoked at
        every release) and the table is the very one it was last submitted with. False leaves the submission to the
        general path, and so does a launch the driver refuses: from a thread where no context, or another one, is
        current (the general path makes the device's current), or with an error to report (the general path
        reports it)."""
        return self.token is self.resubmission.token and self.device is device and \
            binding_table is self.submitted and cydriver.cuGraphLaunch(self.exec, self.stream) == cydriver.CUDA_SUCCESS

    cdef void launch_on_stream(self, tuple table, tuple constants) except *:
        """Every command in recording order, straight on the stream (one-shot deferred work)."""
        cdef Node node, scratch = Node.__new__(Node)
        cdef Kernel kernel
        kernel.executable = NULL
        for c in self.program.commands:
            node = node_of(c, table, constants, self.staging, &kernel, scratch)
            if node.kind == KERNEL_NODE:
                check_at(cydriver.cuLaunchKernel(node.kernel.func, node.kernel.gridDimX, node.kernel.gridDimY,
                                                  node.kernel.gridDimZ, node.kernel.blockDimX, node.kernel.blockDimY,
                                                  node.kernel.blockDimZ, node.kernel.sharedMemBytes, self.stream,
                                                  node.kernel.kernelParams,
                                                  NULL), "cuLaunchKernel", (<Command>c).index)
            elif node.kind == MEMSET_NODE:
                if node.memset.elementSize == 1:
                    check(cydriver.cuMemsetD8Async(node.memset.dst, <unsigned char>node.memset.value,
                                                    node.memset.width, self.stream), "cuMemsetD8Async")
                elif node.memset.elementSize == 2:
                    check(cydriver.cuMemsetD16Async(node.memset.dst, <unsigned short>node.memset.value,
                                                     node.memset.width, self.stream), "cuMemsetD16Async")
                else:
                    check(cydriver.cuMemsetD32Async(node.memset.dst, node.memset.value, node.memset.width,
                                                     self.stream), "cuMemsetD32Async")
            else:
                check(cydriver.cuMemcpyAsync(node.memcpy.dstDevice, node.memcpy.srcDevice, node.memcpy.WidthInBytes,
                                              self.stream), "cuMemcpyAsync")

    cdef void index_slot_words(self) except *:
        """After a build: for each slot and constant slot, the kernel words that follow it and the other commands
        that use it (see patch), or whether a region uses it (see follow); found through the Program's slot and
        constant users, not by a walk over every command."""
        cdef Program program = self.program
        cdef Py_ssize_t i, slot, n
        cdef SlotWord w
        cdef Node node
        cdef BufferRef r
        cdef Dispatch d
        self.slot_words.resize(program.slots_needed)
        self.slot_transfers.resize(program.slots_needed)
        self.slot_setters.resize(program.slots_needed)
        self.slot_captured.resize(program.slots_needed)
        self.constant_words.resize(program.constants_needed)
        self.constant_calls.resize(program.constants_needed)
        self.slot_in_region.assign(program.slots_needed, 0)
        self.constant_in_region.assign(program.constants_needed, 0)
        for slot, users in program.slot_users.items():
            for index in users:
                c = program.commands[index]
                w.command = index
                if type(c) is Region:
                    self.slot_in_region[slot] = 1
                    continue
                if type(c) is Collective or type(c) is Call:
                    self.slot_captured[slot].push_back(index)
                    continue
                if type(c) is not Dispatch:
                    self.slot_transfers[slot].push_back(index)
                    continue
                d = <Dispatch>c
                if d.parameters is not None and d.parameters.buffer is None and d.parameters.slot == slot:
                    self.slot_setters[slot].push_back(index)
                node = <Node>self.given[index]
                for i in range(len(d.bindings)):
                    r = <BufferRef>d.bindings[i]
                    if r.buffer is None and r.slot == slot:
                        w.word, w.offset = &node.values[i], r.offset
                        self.slot_words[slot].push_back(w)
        for slot, users in program.constant_users.items():
            for index in users:
                if type(program.commands[index]) is Region:
                    self.constant_in_region[slot] = 1
                    continue
                if type(program.commands[index]) is Call:
                    self.constant_calls[slot].push_back(index)
                    continue
                d = <Dispatch?>program.commands[index]
                node = <Node>self.given[index]
                n = len(d.bindings)
                w.command = index
                for i in range(len(d.constants)):
                    value = d.constants[i]
                    if type(value) is ConstantSlot and (<ConstantSlot>value).index == slot:
                        w.word, w.offset = &node.values[n + i], 0
                        self.constant_words[slot].push_back(w)

    cdef void patch(self, tuple table, tuple words, tuple constants) except *:
        """Set new parameters on the nodes whose resolved parameters changed: of the commands using a slot whose
        buffer changed or a constant slot whose value changed, those whose parameters differ now. A kernel
        node's words are updated in place, then its node set once; a memset or memcpy node is resolved anew.
        `table` and `words`: the used prefix of the binding table and the words of the constant slot values
        `constants`."""
        cdef Py_ssize_t i, index
        cdef uint64_t value
        cdef SlotWord w
        cdef Node node, fresh
        cdef Kernel kernel
        kernel.executable = NULL
        self.epoch += 1
        self.touched.clear()
        self.captures_set = 0
        for i in range(len(table)):
            if table[i] is self.table_seen[i]:
                continue
            for w in self.slot_words[i]:
                value = (<Buffer>table[i]).handle + w.offset
                if w.word[0] != value:
                    w.word[0] = value
                    self.touch(w.command)
            for index in self.slot_setters[i]:
                self.set_setter(index, (<Buffer>table[i]).handle)
            for index in self.slot_captured[i]:
                if self.looked_at[index] != self.epoch:
                    self.looked_at[index] = self.epoch
                    self.set_captured(index, table, constants)
            for index in self.slot_transfers[i]:
                if self.looked_at[index] != self.epoch:
                    node = <Node>self.given[index]
                    fresh = node_of(self.program.commands[index], table, constants, self.staging, &kernel, None)
                    if not fresh.same(node):
                        self.given[index] = fresh
                        self.touch(index)
        for i in range(len(words)):
            if words[i] == self.words_seen[i]:
                continue
            value = <uint32_t>words[i]
            for w in self.constant_words[i]:
                if w.word[0] != value:
                    w.word[0] = value
                    self.touch(w.command)
            for index in self.constant_calls[i]:
                if self.looked_at[index] != self.epoch:
                    self.looked_at[index] = self.epoch
                    self.set_captured(index, table, constants)
        for index in self.touched:
            self.set_node(index, <Node>self.given[index])
            if self.setters and index in self.setters:  # (most command buffers have no dispatch_indirect)
                self.upload = True  # a device-updatable node set from the host
        for i in range(self.block_changed.size()):
            if self.block_changed[i]:
                self.block_changed[i] = 0
                check(cydriver.cuGraphExecChildGraphNodeSetParams(self.exec, self.exec_block_nodes[i], self.blocks[i]),
                       "cuGraphExecChildGraphNodeSetParams (a nested command buffer)")
        self.patched = self.touched.size() + self.captures_set
        self.table_seen = table
        self.words_seen = words

    cdef int touch(self, Py_ssize_t command) except -1:
        """patch(): note that `command`'s node needs setting (once)."""
        if self.looked_at[command] != self.epoch:
            self.looked_at[command] = self.epoch
            self.touched.push_back(command)
        return 0

    cdef void set_setter(self, Py_ssize_t index, uint64_t handle) except *:
        """Point dispatch_indirect `index`'s setter at its counts in the buffer `handle` now bound to their slot."""
        params, node = self.setters[index]
        cdef Node setter = <Node>params
        cdef uint64_t address = handle + (<Dispatch>self.program.commands[index]).parameters.offset
        if setter.values[1] != address:
            setter.values[1] = address
            check_at(cydriver.cuGraphExecKernelNodeSetParams(self.exec, <CUgraphNode><uintptr_t>node,
                                                              &setter.kernel), "cuGraphExecKernelNodeSetParams", index)

    cpdef set_node(self, Py_ssize_t index, Node params):
        """Give command `index`'s node of the exec new parameters (the driver may refuse: DeviceError); in a nested
        block, its node of hal's copy of the child graph (the exec's child node is set after, once per block)."""
        cdef Py_ssize_t k = self.program.node_of_command(index)
        cdef CUgraphNode node
        if self.block_of.size() and self.block_of[k] >= 0:
            node = self.nodes[k]
            if params.kind == KERNEL_NODE:
                check_at(cydriver.cuGraphKernelNodeSetParams(node, &params.kernel), "cuGraphKernelNodeSetParams", index)
            elif params.kind == MEMSET_NODE:
                check_at(cydriver.cuGraphMemsetNodeSetParams(node, &params.memset), "cuGraphMemsetNodeSetParams", index)
            else:
                check_at(cydriver.cuGraphMemcpyNodeSetParams(node, &params.memcpy), "cuGraphMemcpyNodeSetParams", index)
            self.block_changed[self.block_of[k]] = 1
            return
        node = self.exec_nodes[k]
        if params.kind == KERNEL_NODE:
            check_at(cydriver.cuGraphExecKernelNodeSetParams(self.exec, node, &params.kernel),
                   "cuGraphExecKernelNodeSetParams", index)
        elif params.kind == MEMSET_NODE:
            check_at(cydriver.cuGraphExecMemsetNodeSetParams(self.exec, node, &params.memset, self.context),
                   "cuGraphExecMemsetNodeSetParams", index)
        else:
            check_at(cydriver.cuGraphExecMemcpyNodeSetParams(self.exec, node, &params.memcpy, self.context),
                   "cuGraphExecMemcpyNodeSetParams", index)

    # Inspection.
    def emitted_graph(self) -> nx.DiGraph:
        """The CUDA graph as built, read back from the driver (cuGraphGetNodes, cuGraphGetEdges): nodes are
        command indices (a region's is its conditional node), ("join", node) for join nodes, ("indirect", command)
        for a dispatch_indirect's setter, ("condition", command) for the node setting a region's condition and
        ("nested", i) for the child graph node of the i-th nested block (its `body`: its child graph, read back the
        same way), each with its `type` (cuGraphNodeGetType, e.g. CU_GRAPH_NODE_TYPE_KERNEL); edge u -> v: v waits
        for u, `programmatic` when v may launch before u ends (early launch)."""
        if self.graph == NULL:
            raise ValueError("no graph was built (one-shot deferred command buffers launch on the stream, and "
                             "command buffers with slots or constant slots build at their first submit)")
        program = self.program
        name_of = {<uintptr_t>self.nodes[k]: (program.command_of(k) if program.command_of(k) >= 0 else
                                              ("join", k)) for k in range(self.nodes.size())}
        name_of.update({node: ("indirect", index) for index, (_, node) in self.setters.items()})
        name_of.update({node: ("condition", index) for index, node in self.conditions.items()})
        name_of.update({<uintptr_t>self.block_nodes[i]: ("nested", i) for i in range(self.block_nodes.size())})
        emitted = _read_graph(<uintptr_t>self.graph, name_of)
        for i in range(self.blocks.size()):
            emitted.nodes[("nested", i)]["body"] = _read_graph(<uintptr_t>self.blocks[i], name_of)
        return emitted


def _read_graph(uintptr_t handle, dict name_of) -> nx.DiGraph:
    """The nodes (named by `name_of`, with their `type`) and edges of the CUDA graph `handle`."""
    graph = driver.CUgraph(handle)
    count = call(driver.cuGraphGetNodes, graph, 0)[-1]
    found, _ = call(driver.cuGraphGetNodes, graph, count)
    count = call(driver.cuGraphGetEdges, graph, 0)[-1]
    result = call(driver.cuGraphGetEdges, graph, count)
    emitted = nx.DiGraph()
    for node in found:
        emitted.add_node(name_of[int(node)], type=call(driver.cuGraphNodeGetType, node).name)
    for u, v, edge in zip(result[0][:count], result[1][:count], result[2][:count]):
        emitted.add_edge(name_of[int(u)], name_of[int(v)], programmatic=int(edge.type) == PROGRAMMATIC)
    return emitted


cdef void _host_call_reached(void* data) noexcept with gil:
    """The stream got to a queue_host_call: wake hal's thread (CUDA forbids driver calls here, so fn runs there)."""
    cdef object event = <object>data
    Py_DECREF(event)  # the reference launch_host_call_notice took
    event.set()


def launch_host_call_notice(uintptr_t stream, event) -> None:
    """Set the threading.Event `event` once the stream gets here (cuLaunchHostFunc; hal.host_call)."""
    cdef CUresult err
    Py_INCREF(event)  # kept alive until the host function has run
    err = cydriver.cuLaunchHostFunc(<CUstream>stream, _host_call_reached, <void*>event)
    if err != cydriver.CUDA_SUCCESS:
        Py_DECREF(event)
        check(err, "cuLaunchHostFunc")
