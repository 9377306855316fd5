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
  nodes into a plain dispatch whose export is marked early_launch are programmatic (programmatic dependent launch):
  the kernel may launch once every block of the kernels it waits for has started or signalled
  (griddepcontrol.launch_dependents), and waits for their end itself (griddepcontrol.wait). Edges from or to
  anything else (joins, setters, regions, nested blocks, transfers) stay plain.
- Regions: a conditional WHILE or IF node whose body graph is built from the region's Program, its condition set
  by a kernel node (backends.cuda_graph.regions). A new table or new constant values patch the nodes outside the
  regions as anywhere; only when a slot or constant slot that a region uses changes is the command buffer built
  anew (instantiated again): updating nodes inside conditional bodies in place is not done yet.
- Collectives: a child graph node each, NCCL's work captured from a stream (backends.cuda_graph.communicator). A
  new table captures the work of a collective whose buffers moved again and sets it on the exec's node
  (cuGraphExecChildGraphNodeSetParams); never instantiated again.
- Nested command buffers (cb.execute_commands): the commands one call recorded (Program.nested) become one child
  graph node, built from their layout nodes; a new table or new constant values set the changed nodes of hal's copy
  of the child graph, then the exec's child node once (cuGraphExecChildGraphNodeSetParams); never instantiated
  again. A nested block holding a region, a dispatch_indirect or a collective is emitted inline instead, and so are
  those recorded inside a region or by a single_pass command buffer building as it records.
- The resubmission of an unchanged command buffer is CudaDevice.queue_execute, compiled here: one
  cuGraphLaunch after a few identity checks.
"""

cimport cython
from cpython.ref cimport Py_DECREF, Py_INCREF, PyObject
from libc.stdint cimport uint32_t, uint64_t, uintptr_t
from libc.string cimport memset
from libcpp.vector cimport vector

from cuda.bindings cimport cydriver
from cuda.bindings.cydriver cimport (CUcontext, CUDA_KERNEL_NODE_PARAMS, CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS,
                                     CUdeviceptr, CUfunction, CUgraph, CUgraphConditionalHandle, CUgraphExec,
                                     CUgraphEdgeData, CUgraphNode, CUgraphNodeParams, CUkernelNodeAttrValue, CUresult,
                                     CUstream)

from hal.buffer cimport Buffer, BufferRef, ConstantSlot
from hal.command_buffer cimport CommandBuffer
from hal.commands cimport Collective, Command, Copy, Dispatch, Fill, Region, Update, checked_word
from hal.program cimport Emitter, Program

import contextlib

import networkx as nx
from cuda.bindings import driver

from backends.cuda_graph.api import call, fail
from backends.cuda_graph.buffer import host_alloc
from backends.cuda_graph.indirect import SETTER
from backends.cuda_graph.regions import SET_CONDITION
from hal.device import NO_CONSTANTS, NO_SEMAPHORES, Device
from hal.errors import DeviceError, DeviceLostError, HalError, OutOfMemoryError, UnsupportedError

ARENA_BYTES = 1 << 20
PROGRAMMATIC = driver.CUgraphDependencyType.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
MAX_PARAMETERS = 1024  # 32-bit words: the classic 4 KiB kernel parameter limit
DEVICE_SIDE_DRIVER = 12040  # device-updatable kernel nodes (dispatch_indirect) and conditional nodes (regions)
# queue_execute's defaults, held in C: a module global is a dict lookup at every use on Python 3.12 and
# later (Cython caches it by the dict's version only before 3.12).
cdef object no_semaphores = NO_SEMAPHORES, no_constants = NO_CONSTANTS


class PinnedArena:
    """Pinned host memory holding a command buffer's update data, where the GPU copies it from."""

    __slots__ = ("device", "chunks", "used", "finalizers", "__weakref__")

    def __init__(self, device) -> None:
        self.device = device
        self.chunks = []
        self.used = 0
        self.finalizers = []

    def put(self, data: bytes) -> int:
        """Copy `data` in; its device address."""
        n = len(data)
        if not self.chunks or self.used + n > len(self.chunks[-1][2]):
            chunk = host_alloc(max(ARENA_BYTES, n))
            self.chunks.append(chunk)
            self.finalizers.append(self.device.track(self, "host", chunk[0]))
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


cdef class Node:
    """The parameters of one command's node, resolved through a binding table and constant slot values: what
    building, patching and launching pass to the driver (and what a patch compares)."""

    cdef int kind  # 1 kernel, 2 memset, 3 memcpy
    cdef CUDA_KERNEL_NODE_PARAMS kernel
    cdef vector[uint64_t] values  # kernel parameters: one word each (a 32-bit one in the low half)
    cdef vector[void*] pointers
    cdef CUDA_MEMSET_NODE_PARAMS memset
    cdef CUDA_MEMCPY3D memcpy

    cdef bint same(self, Node other):
        """Would a memset or memcpy node with `other`'s parameters be the same? (Kernel nodes are rebound in
        place: see CudaEmitter.patch.)"""
        if self.kind != other.kind:
            return False
        if self.kind == 2:
            return (self.memset.dst == other.memset.dst and self.memset.width == other.memset.width and
                    self.memset.value == other.memset.value)
        return (self.memcpy.dstDevice == other.memcpy.dstDevice and self.memcpy.srcDevice == other.memcpy.srcDevice
                and self.memcpy.WidthInBytes == other.memcpy.WidthInBytes)


cdef inline Buffer _resolve(BufferRef r, tuple table):
    return r.buffer if r.buffer is not None else <Buffer>table[r.slot]


cdef inline CUdeviceptr _address(BufferRef r, Buffer b):
    return <CUdeviceptr>(b.handle + r.offset)


cdef inline CUdeviceptr _collective_address(BufferRef r, tuple table):
    """A collective's source or target address (0 where it has none)."""
    return 0 if r is None else _address(r, _resolve(r, table))


cdef inline size_t _length(BufferRef r, Buffer b):
    return r.nbytes if r.bounded else b.size - r.offset


# The last dispatch's kernel, so that a run of dispatches of one export looks its function up once. Its
# executable is only compared by identity, while the Program (which holds the executables) is in use.
cdef struct Kernel:
    PyObject* executable
    Py_ssize_t ordinal
    CUfunction function
    unsigned int block[3]


# A kernel parameter word that follows a slot or a constant slot: where it lives in its command's kept Node (whose
# words never move while the Node is kept), and for a binding the reference's offset into the bound buffer.
cdef struct SlotWord:
    Py_ssize_t command
    uint64_t* word
    Py_ssize_t offset


cdef Node _node(Command c, tuple table, tuple constants, dict staging, Kernel* kernel, Node into):
    """The node parameters of `c`, slots resolved through `table` and constant slots through `constants`
    (`staging`: update command -> data address), written into `into` (a new Node if None); `kernel` caches
    the function of the last dispatch."""
    cdef Node node = Node.__new__(Node) if into is None else into
    cdef type kind = type(c)
    cdef Py_ssize_t i, n
    cdef BufferRef r
    cdef Buffer b
    cdef Dispatch d
    if kind is Dispatch:
        d = <Dispatch>c
        node.kind = 1
        memset(&node.kernel, 0, sizeof(node.kernel))
        if kernel.executable != <PyObject*>d.executable or kernel.ordinal != d.ordinal:
            kernel.executable, kernel.ordinal = <PyObject*>d.executable, d.ordinal
            kernel.function = <CUfunction><uintptr_t>d.executable.functions[d.ordinal]
            kernel.block[0], kernel.block[1], kernel.block[2] = d.export.workgroup_size
        node.kernel.func = kernel.function
        node.kernel.gridDimX, node.kernel.gridDimY, node.kernel.gridDimZ = d.workgroups
        node.kernel.blockDimX, node.kernel.blockDimY, node.kernel.blockDimZ = kernel.block[0], kernel.block[1], \
            kernel.block[2]
        n = len(d.bindings) + len(d.constants)
        if n > MAX_PARAMETERS:
            raise DeviceError(f"command {c.index}: {n} kernel parameters, more than {MAX_PARAMETERS}")
        node.values.resize(n)
        node.pointers.resize(n)
        for i in range(len(d.bindings)):
            r = d.bindings[i]
            node.values[i] = _address(r, _resolve(r, table))
        for i in range(len(d.constants)):
            value = d.constants[i]
            if type(value) is ConstantSlot:
                value = constants[(<ConstantSlot>value).index]
            node.values[len(d.bindings) + i] = checked_word(value)
        for i in range(n):
            node.pointers[i] = &node.values[i]
        node.kernel.kernelParams = node.pointers.data() if n else NULL
    elif kind is Fill:
        r = (<Fill>c).target
        b = _resolve(r, table)
        pattern = (<Fill>c).pattern
        node.kind = 2
        memset(&node.memset, 0, sizeof(node.memset))
        node.memset.dst = _address(r, b)
        node.memset.value = int.from_bytes(pattern, "little")
        node.memset.elementSize = len(pattern)
        node.memset.width = _length(r, b) // len(pattern)
        node.memset.height = 1
    else:
        node.kind = 3
        memset(&node.memcpy, 0, sizeof(node.memcpy))
        # Unified addressing: pinned staging has a device address too.
        node.memcpy.srcMemoryType = node.memcpy.dstMemoryType = cydriver.CU_MEMORYTYPE_DEVICE
        if kind is Update:
            r = (<Update>c).target
            b = _resolve(r, table)
            node.memcpy.srcDevice = <CUdeviceptr><uintptr_t>staging[c]
            node.memcpy.WidthInBytes = len((<Update>c).data)
        else:
            r = (<Copy>c).source
            b = _resolve(r, table)
            node.memcpy.srcDevice = _address(r, b)
            node.memcpy.WidthInBytes = _length(r, b)
            r = (<Copy>c).target
            b = _resolve(r, table)
        node.memcpy.dstDevice = _address(r, b)
        node.memcpy.Height = node.memcpy.Depth = 1
    return node


cdef Node _setter_node(CUfunction function, list words):
    """The kernel node of a dispatch_indirect's setter: one thread, the parameters (device node, counts address,
    fault record address, three limits, command index) as `words`."""
    cdef Node node = Node.__new__(Node)
    cdef Py_ssize_t i, n = len(words)
    node.kind = 1
    memset(&node.kernel, 0, sizeof(node.kernel))
    node.kernel.func = function
    node.kernel.gridDimX = node.kernel.gridDimY = node.kernel.gridDimZ = 1
    node.kernel.blockDimX = node.kernel.blockDimY = node.kernel.blockDimZ = 1
    node.values.resize(n)
    node.pointers.resize(n)
    for i in range(n):
        node.values[i] = words[i]
        node.pointers[i] = &node.values[i]
    node.kernel.kernelParams = node.pointers.data()
    return node


cdef inline void _add_once(vector[CUgraphNode]& nodes, CUgraphNode node):
    """Append `node` unless it is there (the driver refuses a dependency given twice)."""
    for n in nodes:
        if n == node:
            return
    nodes.push_back(node)


cdef tuple _words(tuple constants, Py_ssize_t n):
    """The words of the first n constant slot values: what a patch compares."""
    return tuple([checked_word(constants[i]) for i in range(n)])


cdef void _check(CUresult result, str what) except *:
    if result != cydriver.CUDA_SUCCESS:
        raise fail(driver.CUresult(<int>result), what)


cdef void _check_at(CUresult result, str what, Py_ssize_t command) except *:
    """_check for a call on behalf of one command (or node): the message is only made on a failure."""
    if result != cydriver.CUDA_SUCCESS:
        raise fail(driver.CUresult(<int>result), f"{what} (command {command})")


@cython.final
cdef class Resubmission:
    """A device's leave for one-launch resubmissions (queue_execute below): an emitter holding the current
    `token` may resubmit as one cuGraphLaunch; the device replaces the token (`revoke`) whenever that stops
    being safe for all of them (something to free or released, the device lost or closing). Compiled and
    referenced by every emitter, so the resubmission's check reads no Python attribute."""

    cdef readonly object token

    def __init__(self):
        self.token = object()

    def revoke(self) -> None:
        self.token = object()


cdef class CudaEmitter(Emitter):
    """The CUDA side of one command buffer (hal.program.Emitter): its graph, exec and pinned update data.

    `instantiations` counts the graphs instantiated (a re-recording that updates the exec adds none),
    `updates` the re-recordings absorbed by cuGraphExecUpdate, `patched` the nodes the latest submit patched.
    `token`: the device's resubmit token while a resubmission is one launch (see queue_execute below), given
    with the table it was last submitted with.
    """

    cdef object device
    cdef Resubmission resubmission  # the device's
    cdef tuple submitted  # the table of the latest submit
    cdef CUcontext context
    cdef CUstream stream
    cdef readonly Py_ssize_t lanes
    cdef readonly bint graph_layout
    cdef bint one_shot, single_pass
    cdef bint slots_possible  # a binding or constant capacity: single_pass cannot build while recording
    cdef bint at_submit  # the recording uses slots or constant slots: resolved at each submit
    cdef Program program
    cdef CUgraph graph
    cdef CUgraphExec exec
    cdef object graph_finalizer, exec_finalizer, exec_graph_finalizer
    cdef vector[CUgraphNode] nodes  # per layout node, its handle in `graph`
    cdef vector[char] plain_kernels  # per layout node: a plain dispatch's kernel node (a programmatic edge may start)
    cdef vector[CUgraphNode] exec_nodes  # those of the graph the exec was instantiated from
    cdef Py_ssize_t emitted  # single_pass: layout nodes added so far
    cdef bint built, stream_launch
    cdef object arena
    cdef dict staging  # update command (region bodies' too) -> device address of its data
    cdef tuple table_seen  # the table the nodes were last given (its used prefix)
    cdef tuple words_seen  # the constant slots' words they were last given (the used prefix)
    cdef list given  # with slots or constant slots: per command, its Node as last given (what a patch updates)
    # What a patch updates, per slot and per constant slot: the kernel parameter words that follow it, and the
    # other commands (fills, updates, copies) whose node is resolved anew.
    cdef vector[vector[SlotWord]] slot_words, constant_words
    cdef vector[vector[Py_ssize_t]] slot_transfers
    cdef vector[vector[Py_ssize_t]] slot_setters  # per slot, the dispatch_indirect commands whose counts it holds
    cdef vector[vector[Py_ssize_t]] slot_collectives  # per slot, the collectives that use it
    cdef vector[char] slot_in_region, constant_in_region  # per slot and constant slot: a region uses it
    cdef dict setters  # dispatch_indirect command -> its setter's Node, and its node (in `graph`)
    cdef CUgraphNode last_static  # the latest static setter of the graph being built (NULL: none yet)
    cdef dict conditions  # region command -> the node setting its condition (top level)
    # Nested command buffers emitted as child graphs ("blocks"), of the graph being built (see find_blocks).
    cdef vector[Py_ssize_t] block_of  # per layout node: its block (-1: the command buffer's own graph)
    cdef vector[CUgraph] blocks  # per block: hal's copy of its child graph, whose nodes `nodes` holds
    cdef list block_finalizers
    cdef vector[CUgraphNode] block_nodes  # per block: its child graph node in `graph`
    cdef vector[CUgraphNode] exec_block_nodes  # those of the graph the exec was instantiated from
    cdef vector[char] block_changed  # patch(): per block, whether a node of its child graph was set
    cdef bint exec_no_update  # the exec has device-updatable or conditional nodes: never cuGraphExecUpdate it
    cdef bint early_launch  # the device takes programmatic edges (into dispatches of early_launch exports)
    cdef bint upload  # the host patched a device-updatable node: upload the exec before its next launch
    cdef vector[Py_ssize_t] looked_at  # per command, the last patch that looked at it
    cdef vector[Py_ssize_t] touched  # the commands the current patch changed
    cdef Py_ssize_t epoch
    cdef Py_ssize_t collectives_set  # by the current patch
    cdef readonly Py_ssize_t instantiations, updates, patched
    cdef public object token
    cdef object __weakref__  # the device frees the graph and exec once the emitter is gone

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
        self.instantiations = self.updates = self.patched = 0
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
        self.slot_collectives.clear()
        self.slot_in_region.clear()
        self.constant_in_region.clear()
        self.setters = {}
        self.conditions = {}
        self.last_static = NULL
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
        if self.graph != NULL:
            self.device.activate()
            if type(command) is Update:
                self.stage(<Update>command)
            elif type(command) is Region:
                self.stage_all((<Region>command).body)
            self.add_nodes((), (), self.emitted, program.node_command.size(), <Command>command)

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
        elif self.one_shot and not self.single_pass and not program.indirect and not program.regions:
            self.stream_launch = True  # launched in order at submit: no graph for a single run
        elif not self.at_submit:
            self.build((), ())

    def reset(self) -> None:
        self.drop_graph()
        if self.arena is not None:
            self.arena.release()
        self.forget()
        self.program = None

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
        _check(cydriver.cuGraphCreate(&graph, 0), "cuGraphCreate")
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
        cdef CUgraphEdgeData programmatic
        cdef bint launches_early
        cdef Node params, scratch = Node.__new__(Node)
        cdef Kernel kernel
        cdef bint keep = top and self.at_submit
        cdef bint blocks = top and self.block_of.size() > 0
        cdef Py_ssize_t block, dep_block, open_block = -1
        cdef CUgraph target
        cdef CUgraphNode dep
        cdef vector[CUgraphNode] outside  # the open block's dependencies outside it
        kernel.executable = NULL
        memset(&programmatic, 0, sizeof(programmatic))
        programmatic.from_port = cydriver.CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC
        programmatic.type = cydriver.CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC
        for k in range(start, stop):
            block = self.block_of[k] if blocks else -1
            # Blocks are runs of layout nodes (see find_blocks), but for joins of the command buffer's own graph
            # that its commands share with a block's: those go there while the block stays open.
            if block != open_block and not (block < 0 and open_block >= 0 and program.node_command[k] < 0 and
                                            not self.waits_for_block(program, k, open_block)):
                if open_block >= 0:
                    self.add_block(graph, open_block, outside)
                open_block = block
                outside.clear()
            target = graph if block < 0 else self.blocks[block]
            command = program.node_command[k]
            if command < 0:
                c = None
            else:  # single_pass: `current`, the command just recorded, is not among the Program's commands yet
                c = current if current is not None and current.index == command else program.commands[command]
            plain_kernels[k] = type(c) is Dispatch and (<Dispatch>c).parameters is None
            launches_early = self.early_launch and plain_kernels[k] and (<Dispatch>c).export.early_launch
            deps.clear()
            early.clear()
            for d in range(program.dep_start[k], program.dep_start[k + 1]):
                dep = nodes[program.node_deps[d]]
                dep_block = self.block_of[program.node_deps[d]] if blocks else -1
                if dep_block >= 0 and dep_block != block:  # in another block: that block's child graph node
                    dep = self.block_nodes[dep_block]
                if block >= 0 and dep_block != block:
                    _add_once(outside, dep)
                elif launches_early and plain_kernels[program.node_deps[d]]:
                    _add_once(early, dep)
                else:
                    _add_once(deps, dep)
            if command < 0:
                _check(cydriver.cuGraphAddEmptyNode(&node, target, deps.data(), deps.size()), "cuGraphAddEmptyNode")
                nodes[k] = node
                continue
            if type(c) is Region:
                nodes[k] = self.add_region(graph, <Region>c, deps, table, constants, top)
                continue
            if type(c) is Collective:
                nodes[k] = self.add_collective(graph, <Collective>c, deps, table)
                if keep:  # what a patch compares: its addresses
                    self.given[command] = (_collective_address((<Collective>c).source, table),
                                           _collective_address((<Collective>c).target, table))
                continue
            # The driver copies the parameters: one Node serves every command, unless patches need them kept.
            params = _node(c, table, constants, self.staging, &kernel, None if keep else scratch)
            if params.kind == 1:
                _check_at(cydriver.cuGraphAddKernelNode(&node, target, deps.data(), deps.size(), &params.kernel),
                          "cuGraphAddKernelNode", command)
                for d in range(<Py_ssize_t>early.size()):
                    _check_at(cydriver.cuGraphAddDependencies(target, &early[d], &node, &programmatic, 1),
                              "cuGraphAddDependencies (programmatic)", command)
                if (<Dispatch>c).parameters is not None:
                    self.add_setter(graph, <Dispatch>c, node, deps, table, top)
            elif params.kind == 2:
                _check_at(cydriver.cuGraphAddMemsetNode(&node, target, deps.data(), deps.size(), &params.memset,
                                                        self.context), "cuGraphAddMemsetNode", command)
            else:
                _check_at(cydriver.cuGraphAddMemcpyNode(&node, target, deps.data(), deps.size(), &params.memcpy,
                                                        self.context), "cuGraphAddMemcpyNode", command)
            if keep:
                self.given[command] = params
            nodes[k] = node
        if open_block >= 0:
            self.add_block(graph, open_block, outside)

    cdef void find_blocks(self, Program program) except *:
        """The nested command buffers' blocks of the graph about to be built: the layout nodes of each nested range
        (Program.nested) of plain commands (fills, updates, copies, direct dispatches), and the join nodes that go
        with them. The planner puts a join just before its first waiter; a join goes in that waiter's block, unless
        commands outside the block share it (hazards mode) and none of its dependencies is in the block: then it
        stays in the command buffer's own graph (before the block's node: its dependencies all come before the
        block), so those commands need not wait for the whole block. So every block is one run of layout nodes but
        for such joins, and nothing outside a block both follows and precedes it. The child graphs are created
        empty."""
        cdef Py_ssize_t n = program.node_command.size(), k, i, d, block = 0, follows = -1, own
        cdef CUgraph child
        cdef vector[Py_ssize_t] waiter_block  # per join: the block of its first waiter
        cdef vector[char] shared_outside  # per join: a waiter outside that block
        cdef bint inside
        self.block_of.assign(n, -1)
        for start, stop in program.nested:
            if any([type(c) is Region or type(c) is Collective or
                    (type(c) is Dispatch and (<Dispatch>c).parameters is not None)
                    for c in program.commands[start:stop]]):
                continue  # inline: see the module docstring
            for i in range(start, stop):
                self.block_of[program.command_node[i]] = block
            _check(cydriver.cuGraphCreate(&child, 0), "cuGraphCreate")
            self.blocks.push_back(child)
            self.block_finalizers.append(self.device.track(self, "graph", <uintptr_t>child))
            block += 1
        if block == 0:
            self.block_of.clear()
            return
        waiter_block.assign(n, -1)
        shared_outside.assign(n, 0)
        for k in range(n - 1, -1, -1):
            if program.node_command[k] >= 0:
                follows = self.block_of[k]
            else:
                waiter_block[k] = follows
        for k in range(n):
            own = self.block_of[k] if program.node_command[k] >= 0 else waiter_block[k]
            for i in range(program.dep_start[k], program.dep_start[k + 1]):
                d = program.node_deps[i]
                if program.node_command[d] < 0 and waiter_block[d] != own:
                    shared_outside[d] = 1
        for k in range(n):
            if program.node_command[k] >= 0 or waiter_block[k] < 0:
                continue
            inside = not shared_outside[k]
            for i in range(program.dep_start[k], program.dep_start[k + 1]):
                if self.block_of[program.node_deps[i]] == waiter_block[k]:
                    inside = True
            if inside:
                self.block_of[k] = waiter_block[k]
        self.block_nodes.resize(block)
        self.block_changed.assign(block, 0)

    cdef bint waits_for_block(self, Program program, Py_ssize_t k, Py_ssize_t block):
        """Does layout node `k` wait for a node of `block`?"""
        cdef Py_ssize_t i
        for i in range(program.dep_start[k], program.dep_start[k + 1]):
            if self.block_of[program.node_deps[i]] == block:
                return True
        return False

    cdef void add_block(self, CUgraph graph, Py_ssize_t block, vector[CUgraphNode]& outside) except *:
        """Add `block`'s child graph to `graph` as one node after `outside` (the driver copies the graph)."""
        cdef CUgraphNode node
        _check(cydriver.cuGraphAddChildGraphNode(&node, graph, outside.data(), outside.size(), self.blocks[block]),
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
        cdef vector[char] waited_for
        cdef CUgraphNode outer_static
        cdef Py_ssize_t k, d, n = program.node_command.size()
        _check_at(cydriver.cuGraphConditionalHandleCreate(&handle, graph, self.context, 0, 0),
                  "cuGraphConditionalHandleCreate", r.index)
        function = <CUfunction><uintptr_t>self.device.load_executable(SET_CONDITION).functions[0]
        flag = _address(r.condition, _resolve(r.condition, table))
        cdef Node condition = _setter_node(function, [handle, flag])
        _check_at(cydriver.cuGraphAddKernelNode(&setter, graph, deps.data(), deps.size(), &condition.kernel),
                  "cuGraphAddKernelNode (the region's condition)", r.index)
        memset(&params, 0, sizeof(params))
        params.type = cydriver.CU_GRAPH_NODE_TYPE_CONDITIONAL
        params.conditional.handle = handle
        params.conditional.type = cydriver.CU_GRAPH_COND_TYPE_WHILE if r.loop else cydriver.CU_GRAPH_COND_TYPE_IF
        params.conditional.size = 1
        params.conditional.ctx = self.context
        _check_at(cydriver.cuGraphAddNode(&conditional, graph, &setter, NULL, 1, &params), "cuGraphAddNode (conditional)",
                  r.index)
        body = params.conditional.phGraph_out[0]
        body_nodes.resize(n)
        body_kernels.resize(n)
        outer_static = self.last_static  # static setters chain within one graph
        self.last_static = NULL
        self.add_layout(body, program, body_nodes, body_kernels, table, constants, 0, n, None, False)
        self.last_static = outer_static
        if r.loop:  # the flag the body leaves decides the next iteration
            waited_for.assign(n, 0)
            for d in range(program.node_deps.size()):
                waited_for[program.node_deps[d]] = 1
            for k in range(n):
                if not waited_for[k]:
                    sinks.push_back(body_nodes[k])
            _check_at(cydriver.cuGraphAddKernelNode(&node, body, sinks.data(), sinks.size(), &condition.kernel),
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
            _check_at(cydriver.cuGraphAddChildGraphNode(&node, graph, deps.data(), deps.size(), child),
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
        source, target = _collective_address(c.source, table), _collective_address(c.target, table)
        self.device.activate()
        _check_at(cydriver.cuStreamCreate(&stream, cydriver.CU_STREAM_NON_BLOCKING), "cuStreamCreate", c.index)
        try:
            _check_at(cydriver.cuStreamBeginCapture(stream, cydriver.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                      "cuStreamBeginCapture", c.index)
            c.communicator.captured_by(self)
            try:
                c.communicator.enqueue(c, source, target, <uintptr_t>stream)
            finally:  # also after a failure: the stream leaves capture mode
                ended = cydriver.cuStreamEndCapture(stream, &child)
            _check_at(ended, "cuStreamEndCapture (the collective's capture)", c.index)
        except BaseException:
            if child != NULL:
                cydriver.cuGraphDestroy(child)
            cydriver.cuStreamDestroy(stream)
            raise
        cydriver.cuStreamDestroy(stream)
        return child

    cdef void set_collective(self, Py_ssize_t index, tuple table) except *:
        """Point collective `index`'s child graph node of the exec at the buffers `table` binds now, when they
        moved: its work is captured again and the exec's node takes the new graph (same topology: same operation,
        sizes and communicator), with the references NCCL's work keeps."""
        cdef Collective c = <Collective>self.program.commands[index]
        addresses = (_collective_address(c.source, table), _collective_address(c.target, table))
        if addresses == self.given[index]:
            return
        cdef CUgraphNode node
        cdef CUgraph child = self.capture(c, table)
        try:
            node = self.exec_nodes[self.program.command_node[index]]
            _check_at(cydriver.cuGraphExecChildGraphNodeSetParams(self.exec, node, child),
                      "cuGraphExecChildGraphNodeSetParams", index)
        finally:
            cydriver.cuGraphDestroy(child)
        self.given[index] = addresses
        self.collectives_set += 1

    cdef void add_setter(self, CUgraph graph, Dispatch c, CUgraphNode target, vector[CUgraphNode]& deps, tuple table,
                         bint top) except *:
        """Make dispatch_indirect `c`'s kernel node `target` device-updatable and add its setter node before it.
        A dynamic setter waits for `deps`, what the dispatch waits for. Static setters form one chain from the
        launch's start, off the dispatches' path: as roots of their own, each would add to the launch's host cost
        (measured: 78 µs for 100 root setters against 3.5 µs for 100 dynamic ones, bench.indirect)."""
        cdef CUkernelNodeAttrValue value
        cdef CUgraphNode node
        memset(&value, 0, sizeof(value))
        value.deviceUpdatableKernelNode.deviceUpdatable = 1
        _check_at(cydriver.cuGraphKernelNodeSetAttribute(target, cydriver.CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE,
                                                         &value), "cuGraphKernelNodeSetAttribute", c.index)
        _check_at(cydriver.cuGraphKernelNodeGetAttribute(target, cydriver.CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE,
                                                         &value), "cuGraphKernelNodeGetAttribute", c.index)
        setter = self.device.load_executable(SETTER)
        limit = self.device.capabilities.max_workgroup_count
        cdef BufferRef p = c.parameters
        cdef Node params = _setter_node(<CUfunction><uintptr_t>setter.functions[0], [
            <uintptr_t>value.deviceUpdatableKernelNode.devNode, _address(p, _resolve(p, table)),
            self.device.indirect_faults(), limit[0], limit[1], limit[2], c.index])
        if c.dynamic:
            _check_at(cydriver.cuGraphAddKernelNode(&node, graph, deps.data(), deps.size(), &params.kernel),
                      "cuGraphAddKernelNode (the indirect counts' setter)", c.index)
        else:
            _check_at(cydriver.cuGraphAddKernelNode(&node, graph, &self.last_static, self.last_static != NULL,
                                                    &params.kernel), "cuGraphAddKernelNode (the indirect counts' setter)",
                      c.index)
            self.last_static = node
        _check_at(cydriver.cuGraphAddDependencies(graph, &node, &target, NULL, 1), "cuGraphAddDependencies", c.index)
        if top:
            self.setters[c.index] = (params, <uintptr_t>node)

    cdef void build(self, tuple table, tuple constants) except *:
        """The whole graph from the Program, resolved through `table` and `constants`; instantiated (or the old
        exec updated). A failure leaves no graph or nodes behind: a retry builds from the start."""
        self.new_graph()
        try:
            if self.at_submit:
                self.given = [None] * len(self.program.commands)
            self.find_blocks(self.program)
            self.add_nodes(table, constants, 0, self.program.node_command.size())
            if self.at_submit:
                self.table_seen = table[:self.program.slots_needed]
                self.words_seen = _words(constants, self.program.constants_needed)
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
            _check(cydriver.cuGraphInstantiate(&exec_, self.graph, 0), "cuGraphInstantiate")
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
            self.follow(table[:self.program.slots_needed], _words(constants, self.program.constants_needed), constants)
        else:
            self.patched = 0
        if self.upload:
            _check(cydriver.cuGraphUpload(self.exec, self.stream), "cuGraphUpload")
            self.upload = False
        _check(cydriver.cuGraphLaunch(self.exec, self.stream), "cuGraphLaunch")

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
            if isinstance(e, (DeviceLostError, OutOfMemoryError)):
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

    cdef void launch_on_stream(self, tuple table, tuple constants) except *:
        """Every command in recording order, straight on the stream (one-shot deferred work)."""
        cdef Node node, scratch = Node.__new__(Node)
        cdef Kernel kernel
        kernel.executable = NULL
        for c in self.program.commands:
            if type(c) is Collective:
                (<Collective>c).communicator.enqueue(c, _collective_address((<Collective>c).source, table),
                                                     _collective_address((<Collective>c).target, table),
                                                     <uintptr_t>self.stream)
                continue
            node = _node(c, table, constants, self.staging, &kernel, scratch)
            if node.kind == 1:
                _check_at(cydriver.cuLaunchKernel(node.kernel.func, node.kernel.gridDimX, node.kernel.gridDimY,
                                                  node.kernel.gridDimZ, node.kernel.blockDimX, node.kernel.blockDimY,
                                                  node.kernel.blockDimZ, 0, self.stream, node.kernel.kernelParams,
                                                  NULL), "cuLaunchKernel", (<Command>c).index)
            elif node.kind == 2:
                if node.memset.elementSize == 1:
                    _check(cydriver.cuMemsetD8Async(node.memset.dst, <unsigned char>node.memset.value,
                                                    node.memset.width, self.stream), "cuMemsetD8Async")
                elif node.memset.elementSize == 2:
                    _check(cydriver.cuMemsetD16Async(node.memset.dst, <unsigned short>node.memset.value,
                                                     node.memset.width, self.stream), "cuMemsetD16Async")
                else:
                    _check(cydriver.cuMemsetD32Async(node.memset.dst, node.memset.value, node.memset.width,
                                                     self.stream), "cuMemsetD32Async")
            else:
                _check(cydriver.cuMemcpyAsync(node.memcpy.dstDevice, node.memcpy.srcDevice, node.memcpy.WidthInBytes,
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
        self.slot_collectives.resize(program.slots_needed)
        self.constant_words.resize(program.constants_needed)
        self.slot_in_region.assign(program.slots_needed, 0)
        self.constant_in_region.assign(program.constants_needed, 0)
        for slot, users in program.slot_users.items():
            for index in users:
                c = program.commands[index]
                w.command = index
                if type(c) is Region:
                    self.slot_in_region[slot] = 1
                    continue
                if type(c) is Collective:
                    self.slot_collectives[slot].push_back(index)
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
        self.collectives_set = 0
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
            for index in self.slot_collectives[i]:
                if self.looked_at[index] != self.epoch:
                    self.looked_at[index] = self.epoch
                    self.set_collective(index, table)
            for index in self.slot_transfers[i]:
                if self.looked_at[index] != self.epoch:
                    node = <Node>self.given[index]
                    fresh = _node(self.program.commands[index], table, constants, self.staging, &kernel, None)
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
        for index in self.touched:
            self.set_node(index, <Node>self.given[index])
            if self.setters and index in self.setters:  # (most command buffers have no dispatch_indirect)
                self.upload = True  # a device-updatable node set from the host
        for i in range(self.block_changed.size()):
            if self.block_changed[i]:
                self.block_changed[i] = 0
                _check(cydriver.cuGraphExecChildGraphNodeSetParams(self.exec, self.exec_block_nodes[i], self.blocks[i]),
                       "cuGraphExecChildGraphNodeSetParams (a nested command buffer)")
        self.patched = self.touched.size() + self.collectives_set
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
            _check_at(cydriver.cuGraphExecKernelNodeSetParams(self.exec, <CUgraphNode><uintptr_t>node,
                                                              &setter.kernel), "cuGraphExecKernelNodeSetParams", index)

    cpdef set_node(self, Py_ssize_t index, Node params):
        """Give command `index`'s node of the exec new parameters (the driver may refuse: DeviceError); in a nested
        block, its node of hal's copy of the child graph (the exec's child node is set after, once per block)."""
        cdef Py_ssize_t k = self.program.command_node[index]
        cdef CUgraphNode node
        if self.block_of.size() and self.block_of[k] >= 0:
            node = self.nodes[k]
            if params.kind == 1:
                _check_at(cydriver.cuGraphKernelNodeSetParams(node, &params.kernel), "cuGraphKernelNodeSetParams", index)
            elif params.kind == 2:
                _check_at(cydriver.cuGraphMemsetNodeSetParams(node, &params.memset), "cuGraphMemsetNodeSetParams", index)
            else:
                _check_at(cydriver.cuGraphMemcpyNodeSetParams(node, &params.memcpy), "cuGraphMemcpyNodeSetParams", index)
            self.block_changed[self.block_of[k]] = 1
            return
        node = self.exec_nodes[k]
        if params.kind == 1:
            _check_at(cydriver.cuGraphExecKernelNodeSetParams(self.exec, node, &params.kernel),
                   "cuGraphExecKernelNodeSetParams", index)
        elif params.kind == 2:
            _check_at(cydriver.cuGraphExecMemsetNodeSetParams(self.exec, node, &params.memset, self.context),
                   "cuGraphExecMemsetNodeSetParams", index)
        else:
            _check_at(cydriver.cuGraphExecMemcpyNodeSetParams(self.exec, node, &params.memcpy, self.context),
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
        name_of = {<uintptr_t>self.nodes[k]: (program.node_command[k] if program.node_command[k] >= 0 else
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


def queue_execute(device, command_buffer, binding_table=(), wait=NO_SEMAPHORES, signal=NO_SEMAPHORES,
                  constants=NO_CONSTANTS):
    """CudaDevice.queue_execute (hal.Device.queue_execute). A command buffer of this device whose emitter holds
    the device's resubmission token (given by the general path: reusable, built, without constant slots, nothing to
    free, the device neither lost nor closing; revoked at every release), submitted again with the very table it
    was last submitted with, no semaphores and no constants, is one cuGraphLaunch: one token check stands
    for the general path's checks. The check and the launch run without releasing the GIL, so no other thread's
    close() or release comes between them. Anything else takes the general path, and so does a launch the driver
    refuses: from a thread where no context, or another one, is current (the general path makes the device's
    current), or with an error to report (the general path reports it)."""
    cdef CommandBuffer cb
    cdef CudaEmitter emitter
    if wait is no_semaphores and signal is no_semaphores and constants is no_constants and \
            type(command_buffer) is CommandBuffer:
        cb = <CommandBuffer>command_buffer
        if type(cb.emitter) is CudaEmitter:
            emitter = <CudaEmitter>cb.emitter
            if emitter.token is emitter.resubmission.token and emitter.device is device and \
                    binding_table is emitter.submitted and \
                    cydriver.cuGraphLaunch(emitter.exec, emitter.stream) == cydriver.CUDA_SUCCESS:
                return
    Device.queue_execute(device, command_buffer, binding_table, wait, signal, constants)


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
        _check(err, "cuLaunchHostFunc")
