from libcpp.vector cimport vector

from cuda.bindings.cydriver cimport CUcontext, CUgraph, CUgraphExec, CUgraphNode, CUstream

from backends.cuda_graph.nodes cimport Node, SlotWord
from backends.cuda_graph.resubmission cimport Resubmission
from hal.commands cimport Call, Collective, Command, Dispatch, Region, Update
from hal.program cimport Emitter, Program


cdef class GraphBuilder(Emitter):
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
    cdef vector[vector[Py_ssize_t]] slot_captured  # per slot, the collectives and calls that use it
    cdef vector[vector[Py_ssize_t]] constant_calls  # per constant slot, the calls that use it
    cdef dict captures  # call command -> its captures, an OrderedDict: call_key -> (CUgraph, its release)
    cdef vector[char] slot_in_region, constant_in_region  # per slot and constant slot: a region uses it
    cdef dict setters  # dispatch_indirect command -> its setter's Node, and its node (in `graph`)
    cdef CUgraphNode last_static  # the latest static setter of the graph being built (NULL: none yet)
    cdef CUgraphNode last_call  # the latest call (or region holding one) of the graph being built (CALL_ORDER)
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
    cdef Py_ssize_t captures_set  # child graph nodes of collectives and calls set by the current patch
    cdef readonly Py_ssize_t instantiations, updates, patched, calls_captured
    cdef public object token
    cdef object __weakref__  # the device frees the graph and exec once the emitter is gone

    cdef void stage(self, Update update) except *
    cdef void stage_all(self, Program program) except *
    cdef void new_graph(self) except *
    cdef void drop_exec(self) except *
    cdef void drop_graph(self) except *
    cdef void add_nodes(self, tuple table, tuple constants, Py_ssize_t start, Py_ssize_t stop,
                        Command current=*) except *
    cdef void add_layout(self, CUgraph graph, Program program, vector[CUgraphNode]& nodes,
                         vector[char]& plain_kernels, tuple table, tuple constants, Py_ssize_t start, Py_ssize_t stop,
                         Command current, bint top) except *
    cdef void find_blocks(self, Program program) except *
    cdef bint waits_for_block(self, Program program, Py_ssize_t k, Py_ssize_t block)
    cdef void add_block(self, CUgraph graph, Py_ssize_t block, vector[CUgraphNode]& outside) except *
    cdef CUgraphNode add_region(self, CUgraph graph, Region r, vector[CUgraphNode]& deps, tuple table,
                                tuple constants, bint top) except *
    cdef CUgraphNode add_kernel(self, CUgraph target, Node params, vector[CUgraphNode]& deps,
                                vector[CUgraphNode]& early, Py_ssize_t command) except *
    cdef CUgraphNode add_collective(self, CUgraph graph, Collective c, vector[CUgraphNode]& deps,
                                    tuple table) except *
    cdef CUgraph capture(self, Collective c, tuple table) except NULL
    cdef CUgraph captured(self, Call c, tuple key) except NULL
    cdef CUgraph capture_call(self, Call c, tuple key) except NULL
    cdef void add_setter(self, CUgraph graph, Dispatch c, CUgraphNode target, vector[CUgraphNode]& deps, tuple table,
                         bint top) except *


cdef tuple call_key(Call c, tuple table, tuple constants)
cdef bint has_calls(Program program)
