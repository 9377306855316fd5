"""The word stream of graph.c: hal commands as CUDA graph nodes, or as stream launches.

Every command is `opcode, node slot, operands..., n, dependency slots...` (see graph.c):
KERNEL func gx gy gz bx by bz n params... | MEMSET target value element_size elements |
MEMCPY target source bytes | EMPTY. One stream serves three ends: building a CUgraph, patching the
nodes of an instantiated exec (rebinding), and launching on a stream in order (one-shot command
buffers). Without a C compiler the same stream is replayed through cuda-python (`replay`).
"""

from __future__ import annotations

import functools
import os
from array import array
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cuda.bindings import driver

from backends.cuda_graph.api import call, fail
from backends.native import NativeLibrary
from backends.native import load as load_library
from hal.commands import Command, Copy, Dispatch, Fill, Update, constant_word
from hal.errors import DeviceError, UnsupportedError

if TYPE_CHECKING:
    from hal.buffer import Buffer

OP_KERNEL, OP_MEMSET, OP_MEMCPY, OP_EMPTY = 1, 2, 3, 4
FIRST_PARAMETER = 10  # a KERNEL command's first parameter word: op, slot, func, grid x3, block x3, count
FUNCTIONS = ("cuGraphAddKernelNode", "cuGraphAddMemsetNode", "cuGraphAddMemcpyNode", "cuGraphAddEmptyNode",
             "cuGraphExecKernelNodeSetParams", "cuGraphExecMemsetNodeSetParams", "cuGraphExecMemcpyNodeSetParams",
             "cuLaunchKernel", "cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async", "cuMemcpyAsync")
ABI_VERSION = 12000  # graph.c declares the CUDA 12.0 forms of the structs (CUDA_KERNEL_NODE_PARAMS_v2)
SOURCE = Path(__file__).with_name("graph.c")
DECLARATIONS = """
int64_t hal_cu_build(uint64_t graph, uintptr_t stream, uint64_t n, uintptr_t fns, uintptr_t nodes, uint64_t ctx);
int64_t hal_cu_patch(uint64_t exec, uintptr_t stream, uint64_t n, uintptr_t fns, uintptr_t nodes, uint64_t ctx);
int64_t hal_cu_launch(uint64_t cu_stream, uintptr_t stream, uint64_t n, uintptr_t fns);
"""
BUILD, PATCH, LAUNCH = 0, 1, 2


@functools.lru_cache(maxsize=1)
def native() -> NativeLibrary | None:
    """graph.c loaded, or None with HAL_CUDA_DISABLE_NATIVE set or no C compiler."""
    if os.environ.get("HAL_CUDA_DISABLE_NATIVE"):
        return None
    return load_library(SOURCE, DECLARATIONS, "the native CUDA graph builder")


def functions() -> array:
    """The driver entry points graph.c calls, in its order."""
    flags = driver.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT
    addresses = [int(call(driver.cuGetProcAddress, name.encode(), ABI_VERSION, flags)[0]) for name in FUNCTIONS]
    missing = [name for name, address in zip(FUNCTIONS, addresses) if not address]
    if missing:
        raise UnsupportedError(f"the CUDA driver lacks {', '.join(missing)}; hal needs a CUDA 12 driver or newer")
    return array("Q", addresses)


class Words:
    """Encodes commands into a stream, resolving references through `table` and update data through
    `staging` (command index -> device address of its bytes in pinned memory).

    A recording repeats the same kernel, workgroups and constants tuple from command to command (a
    literal in a loop is one object), so the words they give are kept from the last dispatch and
    reused while the objects are the same: a third of the encoding's time for a chain."""

    __slots__ = ("table", "staging", "_executable", "_export", "_workgroups", "_head", "_constants",
                 "_constant_words")

    def __init__(self, table: tuple[Buffer, ...], staging: dict[int, int]) -> None:
        self.table = table
        self.staging = staging
        self._executable: Any = None  # the last dispatch's kernel and workgroups, and their words
        self._export: Any = None
        self._workgroups: Any = None
        self._head: tuple[int, ...] = ()
        self._constants: Any = None  # the last dispatch's constants, and their words
        self._constant_words: list[int] = []

    def address(self, r: Any) -> tuple[int, int]:
        """(device address, bytes) of a reference."""
        b = r._buffer
        if b is None:
            b = self.table[r._slot]
        return b.address + r._offset, (b.size - r._offset if r._length is None else r._length)

    def command(self, c: Command, slot: int) -> list[int]:
        """The words of `c` up to, not including, its dependencies."""
        words: list[int] = []
        self.emit(c, slot, words)
        return words

    def emit(self, c: Command, slot: int, stream: list[int]) -> None:
        """Append the words of `c` up to, not including, its dependencies to `stream`."""
        if type(c) is Dispatch:  # this runs once per node at every build
            bindings, constants, export, workgroups = c.bindings, c.constants, c.export, c.workgroups
            if export is not self._export or workgroups is not self._workgroups or \
                    c.executable is not self._executable:  # an export may serve several executables
                self._executable, self._export, self._workgroups = c.executable, export, workgroups
                self._head = (c.executable.functions[c.ordinal], *workgroups, *export.workgroup_size,
                              len(bindings) + len(constants))
            stream.append(OP_KERNEL)
            stream.append(slot)
            stream += self._head
            table = self.table
            for r in bindings:
                b = r._buffer
                stream.append((b if b is not None else table[r._slot]).address + r._offset)
            if constants is not self._constants:
                self._constants = constants
                self._constant_words = [x & 0xFFFFFFFF if type(x) is int else constant_word(x) for x in constants]
            stream += self._constant_words
        elif type(c) is Fill:
            target, size = self.address(c.target)
            p = c.pattern
            stream += (OP_MEMSET, slot, target, int.from_bytes(p, "little"), len(p), size // len(p))
        elif type(c) is Update:
            target, _ = self.address(c.target)
            stream += (OP_MEMCPY, slot, target, self.staging[c.index], len(c.data))
        elif type(c) is Copy:
            source, size = self.address(c.source)
            target, _ = self.address(c.target)
            stream += (OP_MEMCPY, slot, target, source, size)
        else:  # pragma: no cover - the command kinds are closed
            raise TypeError(f"unknown command {c!r}")


def run(mode: int, target: int, stream: list[int] | array, fns: array, nodes: array | None, context: int = 0) -> None:
    """Build (target: CUgraph), patch (target: CUgraphExec) or launch (target: CUstream) `stream`;
    memset and memcpy nodes run in `context`."""
    words = stream if isinstance(stream, array) else array("Q", stream)
    lib = native()
    if lib is None:
        replay(mode, target, words, nodes, context)
        return
    address, n = words.buffer_info()
    table = fns.buffer_info()[0]
    if mode == BUILD:
        result = lib.lib.hal_cu_build(target, address, n, table, nodes.buffer_info()[0], context)
    elif mode == PATCH:
        result = lib.lib.hal_cu_patch(target, address, n, table, nodes.buffer_info()[0], context)
    else:
        result = lib.lib.hal_cu_launch(target, address, n, table)
    if result:
        code, at = result & 0xFFFFFFFF, (result >> 32) - 1
        if code == 0xFFFFFFFF:  # pragma: no cover - the stream comes from this module
            raise DeviceError(f"internal error: graph.c rejected word {at} of its stream")
        what = ("cuGraphAdd", "cuGraphExecSetParams", "launch")[mode]
        raise fail(code, f"{what} ({_op_name(words[at])} node {words[at + 1]})")


def _op_name(op: int) -> str:
    return {OP_KERNEL: "kernel", OP_MEMSET: "memset", OP_MEMCPY: "memcpy", OP_EMPTY: "empty"}.get(op, str(op))


def replay(mode: int, target: int, s: array, nodes: array | None, context: int) -> None:
    """The stream through cuda-python, call by call (without the native helper)."""
    i, n = 0, len(s)
    ctx = driver.CUcontext(context)
    graph = driver.CUgraph(target) if mode == BUILD else None
    exec_ = driver.CUgraphExec(target) if mode == PATCH else None
    cu_stream = driver.CUstream(target) if mode == LAUNCH else None
    while i < n:
        op, slot = s[i], s[i + 1]
        i += 2
        if op == OP_KERNEL:
            func, gx, gy, gz, bx, by, bz, count = s[i:i + 8]
            params = array("Q", s[i + 8:i + 8 + count])
            pointers = array("Q", [params.buffer_info()[0] + 8 * k for k in range(count)])
            i += 8 + count
            p = driver.CUDA_KERNEL_NODE_PARAMS()
            p.func = driver.CUfunction(func)
            p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY, p.blockDimZ = gx, gy, gz, bx, by, bz
            p.sharedMemBytes = 0
            p.kernelParams = pointers.buffer_info()[0] if count else 0
        elif op == OP_MEMSET:
            dst, value, size, elements = s[i:i + 4]
            i += 4
            p = driver.CUDA_MEMSET_NODE_PARAMS()
            p.dst, p.value, p.elementSize, p.width, p.height, p.pitch = dst, value, size, elements, 1, 0
        elif op == OP_MEMCPY:
            dst, src, size = s[i:i + 3]
            i += 3
            p = driver.CUDA_MEMCPY3D()
            p.srcMemoryType = p.dstMemoryType = driver.CUmemorytype.CU_MEMORYTYPE_DEVICE
            p.srcDevice, p.dstDevice, p.WidthInBytes, p.Height, p.Depth = src, dst, size, 1, 1
        else:
            p = None
        ndeps = s[i]
        deps = [driver.CUgraphNode(nodes[d]) for d in s[i + 1:i + 1 + ndeps]] if mode == BUILD else []
        i += 1 + ndeps
        if mode == BUILD:
            adder = {OP_KERNEL: driver.cuGraphAddKernelNode, OP_MEMSET: driver.cuGraphAddMemsetNode,
                     OP_MEMCPY: driver.cuGraphAddMemcpyNode}.get(op)
            args = (graph, deps, len(deps)) + ((p,) if op == OP_KERNEL else (p, ctx) if p is not None else ())
            node = call(adder or driver.cuGraphAddEmptyNode, *args)
            nodes[slot] = int(node)
        elif mode == PATCH:
            node = driver.CUgraphNode(nodes[slot])
            if op == OP_KERNEL:
                call(driver.cuGraphExecKernelNodeSetParams, exec_, node, p)
            elif op == OP_MEMSET:
                call(driver.cuGraphExecMemsetNodeSetParams, exec_, node, p, ctx)
            elif op == OP_MEMCPY:
                call(driver.cuGraphExecMemcpyNodeSetParams, exec_, node, p, ctx)
        elif op == OP_KERNEL:
            call(driver.cuLaunchKernel, p.func, p.gridDimX, p.gridDimY, p.gridDimZ, p.blockDimX, p.blockDimY,
                 p.blockDimZ, 0, cu_stream, p.kernelParams, 0)
        elif op == OP_MEMSET:
            setter = {1: driver.cuMemsetD8Async, 2: driver.cuMemsetD16Async, 4: driver.cuMemsetD32Async}[p.elementSize]
            call(setter, p.dst, p.value, p.width, cu_stream)
        elif op == OP_MEMCPY:
            call(driver.cuMemcpyAsync, p.dstDevice, p.srcDevice, p.WidthInBytes, cu_stream)
