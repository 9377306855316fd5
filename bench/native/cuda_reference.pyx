"""bench.cuda's compiled reference: a CUDA graph of kernel nodes built, instantiated, patched and launched by
plain calls through cuda-bindings' cydriver, laid out as hal lays out its graph. The floor of what hal's CUDA
backend does at end(), at a resubmission and at a rebind.

A graph is given as the Program gives it: node k runs kernel node_command[k] (-1: an empty join node) after the
nodes deps[dep_start[k]:dep_start[k + 1]]; kernel i's parameters are `words` 64-bit words at params[i * words:].
One function, grid and block serve every kernel.
"""

from libc.stdint cimport int64_t, uint64_t, uintptr_t
from libc.string cimport memset
from libcpp.vector cimport vector

from cuda.bindings cimport cydriver
from cuda.bindings.cydriver cimport (CUDA_KERNEL_NODE_PARAMS, CUfunction, CUgraph, CUgraphExec, CUgraphNode, CUresult,
                                     CUstream)


cdef void _check(CUresult result, str what) except *:
    if result != cydriver.CUDA_SUCCESS:
        raise RuntimeError(f"{what} failed: CUresult {<int>result}")


cdef class Graph:
    """One reference graph: `build()` adds its nodes, `instantiate()` makes the exec; then `launch()` and
    `set_params()`. Destroyed with `destroy()` (or when collected)."""

    cdef CUgraph graph
    cdef CUgraphExec exec
    cdef vector[CUgraphNode] nodes
    cdef vector[CUgraphNode] kernel_nodes  # per kernel, its node
    cdef vector[uint64_t] params
    cdef vector[void*] pointers
    cdef CUDA_KERNEL_NODE_PARAMS kernel
    cdef Py_ssize_t words

    def __init__(self, uintptr_t function, tuple grid, tuple block, const uint64_t[:] params, Py_ssize_t words):
        memset(&self.kernel, 0, sizeof(self.kernel))
        self.kernel.func = <CUfunction>function
        self.kernel.gridDimX, self.kernel.gridDimY, self.kernel.gridDimZ = grid
        self.kernel.blockDimX, self.kernel.blockDimY, self.kernel.blockDimZ = block
        self.words = words
        self.params.assign(&params[0], &params[0] + params.shape[0])
        self.pointers.resize(self.params.size())
        cdef Py_ssize_t i
        for i in range(<Py_ssize_t>self.params.size()):
            self.pointers[i] = &self.params[i]

    def build(self, const int64_t[:] node_command, const int64_t[:] dep_start, const int64_t[:] deps) -> None:
        """cuGraphCreate, then every node in order with its dependencies."""
        cdef CUgraph graph
        cdef CUgraphNode node
        cdef vector[CUgraphNode] wait
        cdef Py_ssize_t k, d, n = node_command.shape[0]
        _check(cydriver.cuGraphCreate(&graph, 0), "cuGraphCreate")
        self.graph = graph
        self.nodes.resize(n)
        for k in range(n):
            wait.clear()
            for d in range(dep_start[k], dep_start[k + 1]):
                wait.push_back(self.nodes[deps[d]])
            if node_command[k] < 0:
                _check(cydriver.cuGraphAddEmptyNode(&node, graph, wait.data(), wait.size()), "cuGraphAddEmptyNode")
            else:
                self.kernel.kernelParams = &self.pointers[node_command[k] * self.words]
                _check(cydriver.cuGraphAddKernelNode(&node, graph, wait.data(), wait.size(), &self.kernel),
                       "cuGraphAddKernelNode")
                if <Py_ssize_t>self.kernel_nodes.size() <= node_command[k]:
                    self.kernel_nodes.resize(node_command[k] + 1)
                self.kernel_nodes[node_command[k]] = node
            self.nodes[k] = node

    def instantiate(self) -> None:
        cdef CUgraphExec exec_
        _check(cydriver.cuGraphInstantiate(&exec_, self.graph, 0), "cuGraphInstantiate")
        self.exec = exec_

    def launch(self, uintptr_t stream) -> int:
        """One cuGraphLaunch; the CUresult."""
        return cydriver.cuGraphLaunch(self.exec, <CUstream>stream)

    def set_params(self, const int64_t[:] kernels, const uint64_t[:] params) -> None:
        """New parameters for `kernels` (params: their words, in order), cuGraphExecKernelNodeSetParams each."""
        cdef Py_ssize_t j, w, i
        cdef vector[uint64_t] values
        cdef vector[void*] pointers
        values.assign(&params[0], &params[0] + params.shape[0])
        pointers.resize(values.size())
        for j in range(<Py_ssize_t>values.size()):
            pointers[j] = &values[j]
        for j in range(kernels.shape[0]):
            i = kernels[j]
            self.kernel.kernelParams = &pointers[j * self.words]
            _check(cydriver.cuGraphExecKernelNodeSetParams(self.exec, self.kernel_nodes[i], &self.kernel),
                   "cuGraphExecKernelNodeSetParams")

    def destroy(self) -> None:
        self.free()

    cdef void free(self):
        if self.exec != NULL:
            cydriver.cuGraphExecDestroy(self.exec)
            self.exec = NULL
        if self.graph != NULL:
            cydriver.cuGraphDestroy(self.graph)
            self.graph = NULL

    def __dealloc__(self):
        self.free()
