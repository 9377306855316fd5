"""A command's CUDA graph node, resolved through a binding table and constant slot values (compiled): what building,
patching and launching give the driver, and what a patch compares."""

from libc.stdint cimport uintptr_t
from libc.string cimport memset

from cuda.bindings cimport cydriver

from hal.buffer cimport ConstantSlot
from hal.commands cimport Collective, Copy, Dispatch, Fill, Update, checked_word

from cuda.bindings import driver

from backends.cuda_graph.api import fail
from hal.errors import DeviceError

MAX_PARAMETERS = 1024  # 32-bit words: the classic 4 KiB kernel parameter limit


cdef class Node:
    """The parameters of one command's node, resolved through a binding table and constant slot values: what
    building, patching and launching pass to the driver (and what a patch compares)."""

    cdef bint same(self, Node other):
        """Would a memset or memcpy node with `other`'s parameters be the same? (Kernel nodes are rebound in
        place: see CudaEmitter.patch.)"""
        if self.kind != other.kind:
            return False
        if self.kind == MEMSET_NODE:
            return (self.memset.dst == other.memset.dst and self.memset.width == other.memset.width and
                    self.memset.value == other.memset.value)
        return (self.memcpy.dstDevice == other.memcpy.dstDevice and self.memcpy.srcDevice == other.memcpy.srcDevice
                and self.memcpy.WidthInBytes == other.memcpy.WidthInBytes)


cdef Node node_of(Command c, tuple table, tuple constants, dict staging, Kernel* kernel, Node into):
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
        node.kind = KERNEL_NODE
        memset(&node.kernel, 0, sizeof(node.kernel))
        if kernel.executable != <PyObject*>d.executable or kernel.ordinal != d.ordinal:
            kernel.executable, kernel.ordinal = <PyObject*>d.executable, d.ordinal
            kernel.function = <CUfunction><uintptr_t>d.executable.functions[d.ordinal]
            kernel.block[0], kernel.block[1], kernel.block[2] = d.export.workgroup_size
            kernel.shared = d.executable.shared_memory[d.ordinal]
            kernel.trailing = d.executable.trailing_parameters[d.ordinal]
        node.kernel.func = kernel.function
        node.kernel.gridDimX, node.kernel.gridDimY, node.kernel.gridDimZ = d.workgroups
        node.kernel.blockDimX, node.kernel.blockDimY, node.kernel.blockDimZ = kernel.block[0], kernel.block[1], \
            kernel.block[2]
        node.kernel.sharedMemBytes = kernel.shared
        n = len(d.bindings) + len(d.constants) + kernel.trailing
        if n > MAX_PARAMETERS:
            raise DeviceError(f"command {c.index}: {n} kernel parameters, more than {MAX_PARAMETERS}")
        node.values.resize(n)
        node.pointers.resize(n)
        for i in range(n - kernel.trailing, n):
            node.values[i] = 0  # a Triton kernel's scratch pointers (backends.cuda_graph.triton)
        for i in range(len(d.bindings)):
            r = d.bindings[i]
            node.values[i] = address(r, resolve(r, table))
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
        b = resolve(r, table)
        pattern = (<Fill>c).pattern
        node.kind = MEMSET_NODE
        memset(&node.memset, 0, sizeof(node.memset))
        node.memset.dst = address(r, b)
        node.memset.value = int.from_bytes(pattern, "little")
        node.memset.elementSize = len(pattern)
        node.memset.width = ref_length(r, b) // len(pattern)
        node.memset.height = 1
    else:
        node.kind = MEMCPY_NODE
        memset(&node.memcpy, 0, sizeof(node.memcpy))
        # Unified addressing: pinned staging has a device address too.
        node.memcpy.srcMemoryType = node.memcpy.dstMemoryType = cydriver.CU_MEMORYTYPE_DEVICE
        if kind is Update:
            r = (<Update>c).target
            b = resolve(r, table)
            node.memcpy.srcDevice = <CUdeviceptr><uintptr_t>staging[c]
            node.memcpy.WidthInBytes = len((<Update>c).data)
        else:
            r = (<Copy>c).source
            b = resolve(r, table)
            node.memcpy.srcDevice = address(r, b)
            node.memcpy.WidthInBytes = ref_length(r, b)
            r = (<Copy>c).target
            b = resolve(r, table)
        node.memcpy.dstDevice = address(r, b)
        node.memcpy.Height = node.memcpy.Depth = 1
    return node


cdef Node setter_node(CUfunction function, list words):
    """The kernel node of a dispatch_indirect's setter: one thread, the parameters (device node, counts address,
    fault record address, three limits, command index) as `words`."""
    return words_node(function, 1, 1, words)


cdef Node words_node(CUfunction function, unsigned int blocks, unsigned int threads, list words):
    """A kernel node of `blocks` blocks of `threads` threads, its parameters `words` (one word each, a 32-bit
    parameter in the low half)."""
    cdef Node node = Node.__new__(Node)
    cdef Py_ssize_t i, n = len(words)
    node.kind = KERNEL_NODE
    memset(&node.kernel, 0, sizeof(node.kernel))
    node.kernel.func = function
    node.kernel.gridDimX = blocks
    node.kernel.gridDimY = node.kernel.gridDimZ = 1
    node.kernel.blockDimX = threads
    node.kernel.blockDimY = node.kernel.blockDimZ = 1
    node.values.resize(n)
    node.pointers.resize(n)
    for i in range(n):
        node.values[i] = words[i]
        node.pointers[i] = &node.values[i]
    node.kernel.kernelParams = node.pointers.data()
    return node


cdef Node collective_kernel(Collective c, tuple addresses):
    """The kernel node that collective `c` runs as from and into `addresses` (its source and target) where its
    communicator runs it as one kernel of hal's (kernel_of: the peer all_reduce); None where NCCL's captured work
    does it."""
    kernel = c.communicator.kernel_of(c, *addresses)
    return None if kernel is None else words_node(<CUfunction><uintptr_t>kernel[0], kernel[1], kernel[2], kernel[3])


cdef tuple constant_words_of(tuple constants, Py_ssize_t n):
    """The words of the first n constant slot values: what a patch compares."""
    return tuple([checked_word(constants[i]) for i in range(n)])


cdef void check(CUresult result, str what) except *:
    if result != cydriver.CUDA_SUCCESS:
        raise fail(driver.CUresult(<int>result), what)


cdef void check_at(CUresult result, str what, Py_ssize_t command) except *:
    """check for a call on behalf of one command (or node): the message is only made on a failure."""
    if result != cydriver.CUDA_SUCCESS:
        raise fail(driver.CUresult(<int>result), f"{what} (command {command})")
