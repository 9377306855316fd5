from libc.stdint cimport uint64_t
from libcpp.vector cimport vector

from cpython.object cimport PyObject
from cuda.bindings.cydriver cimport (CUDA_KERNEL_NODE_PARAMS, CUDA_MEMCPY3D, CUDA_MEMSET_NODE_PARAMS, CUdeviceptr,
                                     CUfunction, CUgraphNode, CUresult)

from hal.buffer cimport Buffer, BufferRef
from hal.commands cimport Collective, Command


cdef enum NodeKind:  # the graph node a command becomes
    KERNEL_NODE = 1
    MEMSET_NODE = 2
    MEMCPY_NODE = 3


# The last dispatch's kernel, so that a run of dispatches of one export looks its function up once. Its
# executable is only compared by identity, while the Program (which holds the executables) is in use.
cdef struct Kernel:
    PyObject* executable
    Py_ssize_t ordinal
    CUfunction function
    unsigned int block[3]
    unsigned int shared  # bytes of dynamic shared memory
    Py_ssize_t trailing  # null pointer parameters after the bindings and constants


# A kernel parameter word that follows a slot or a constant slot: where it lives in its command's kept Node (whose
# words never move while the Node is kept), and for a binding the reference's offset into the bound buffer.
cdef struct SlotWord:
    Py_ssize_t command
    uint64_t* word
    Py_ssize_t offset


cdef class Node:
    cdef NodeKind kind
    cdef CUDA_KERNEL_NODE_PARAMS kernel
    cdef vector[uint64_t] values  # kernel parameters: one word each (a 32-bit one in the low half)
    cdef vector[void*] pointers
    cdef CUDA_MEMSET_NODE_PARAMS memset
    cdef CUDA_MEMCPY3D memcpy

    cdef bint same(self, Node other)


cdef inline Buffer resolve(BufferRef r, tuple table):
    return r.buffer if r.buffer is not None else <Buffer>table[r.slot]


cdef inline CUdeviceptr address(BufferRef r, Buffer b):
    return <CUdeviceptr>(b.handle + r.offset)


cdef inline CUdeviceptr collective_address(BufferRef r, tuple table):
    """A collective's source or target address (0 where it has none)."""
    return 0 if r is None else address(r, resolve(r, table))


cdef inline tuple collective_addresses(Collective c, tuple table):
    """Collective `c`'s source and target addresses: what its work is captured or launched with, and what a patch
    compares."""
    return collective_address(c.source, table), collective_address(c.target, table)


cdef inline size_t ref_length(BufferRef r, Buffer b):
    return r.nbytes if r.bounded else b.size - r.offset


cdef inline void add_once(vector[CUgraphNode]& nodes, CUgraphNode node):
    """Append `node` unless it is there (the driver refuses a dependency given twice)."""
    for n in nodes:
        if n == node:
            return
    nodes.push_back(node)


cdef Node node_of(Command c, tuple table, tuple constants, dict staging, Kernel* kernel, Node into)
cdef Node setter_node(CUfunction function, list words)
cdef Node words_node(CUfunction function, unsigned int blocks, unsigned int threads, list words)
cdef Node collective_kernel(Collective c, tuple addresses)
cdef tuple constant_words_of(tuple constants, Py_ssize_t n)
cdef void check(CUresult result, str what) except *
cdef void check_at(CUresult result, str what, Py_ssize_t command) except *
