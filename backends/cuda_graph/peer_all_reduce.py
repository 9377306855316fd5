"""Small all_reduces between the GPUs of one process as one kernel of hal's, over peer access (NVLink), in NCCL's
place.

Why. A token of the split decode all-reduces 8 KiB 32 times, one after the other; through NCCL each costs about
10 µs on the chain on 2 H200s (bench/results/nvidia-h200-x2-2026-11-29-tensor-parallel-mixing.md), most of it
latency. Where every rank is a GPU of this process and each can reach the others' memory, one block a rank does it
with one exchange of flags: the rank's kernel copies its source into its own staging buffer, raises its flag in
every rank's memory (a release store, after the block's writes), waits until every rank's flag has reached this
call's number in its own memory (an acquire load), then reads every rank's staging buffer, combines them in rank
order (so every rank gets the same bits) and writes its target. The staging buffers alternate between two halves
by the call's parity: a rank writes a half again two calls later, which it reaches only once every rank has raised
its flag for the call between, after its reads of that half. Each rank counts its calls in a word of its own
memory; NCCL's rule holds here too: every rank runs the communicator's collectives in the same order.

Which. all_reduce of int32, uint32, int64, uint64, float32 or float64 with sum, prod, max or min, at most
ONE_SHOT_BYTES a rank, on a communicator whose ranks are all in this process (2 to MAX_RANKS GPUs, each able to
access every other's memory); the rest, and everything where HAL_CUDA_PEER_ALL_REDUCE=0, goes to NCCL. The choice
depends on nothing that differs between ranks (not on addresses: the kernel copies unaligned data bytewise), so
all ranks of a collective take the same path. Captured from a stream like NCCL's work (the emitter's child graph
node), so it sits in loops and branches, and is patched as a collective is.

Peer access, once enabled between the ranks' contexts, stays enabled for the contexts' lives (the primary
contexts, which other libraries in the process share). It covers memory from cuMemAlloc, not from the stream-ordered
pools hal's buffers come from (those would need cuMemPoolSetAccess, which maps every later allocation of the pool
into the peers too), so the staging buffers and flags the peers touch are cuMemAlloc'd here, freed at release()."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
from cuda.bindings import driver

from backends.cuda_graph.api import call, fail
from hal.commands import Collective
from hal.errors import DeviceError
from hal.executable import ExecutableSource, Export

ONE_SHOT_BYTES = 64 * 1024  # a rank's part; larger all_reduces are bandwidth-bound: NCCL's
MAX_RANKS = 8
THREADS = 1024  # one block a rank
SWITCH = "HAL_CUDA_PEER_ALL_REDUCE"  # "0": NCCL for every all_reduce
TYPES = {"int32": "int", "uint32": "unsigned", "int64": "long long", "uint64": "unsigned long long",
         "float32": "float", "float64": "double"}
OPERATIONS = ("sum", "prod", "max", "min")


KERNELS = [(dtype, op) for dtype in TYPES for op in OPERATIONS]  # the exports' order


_SOURCE_TEXT = r"""
#define MAX_RANKS %(max_ranks)d

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.sys.u32 %%0, [%%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void store_release(unsigned* p, unsigned v) {
    asm volatile("st.release.sys.u32 [%%0], %%1;" :: "l"(p), "r"(v) : "memory");
}

template <typename T, int OP> __device__ __forceinline__ T combine(T a, T b) {
    if (OP == 0) return a + b;
    if (OP == 1) return a * b;
    if (OP == 2) return a > b ? a : b;
    return a < b ? a : b;
}

// Sources and targets may sit at any byte offset: unaligned ones go a byte at a time.
template <typename T> __device__ __forceinline__ T load_any(const T* p, bool aligned) {
    if (aligned) return *p;
    T v;
    const unsigned char* from = reinterpret_cast<const unsigned char*>(p);
    unsigned char* to = reinterpret_cast<unsigned char*>(&v);
    for (int k = 0; k < (int)sizeof(T); ++k) to[k] = from[k];
    return v;
}

template <typename T> __device__ __forceinline__ void store_any(T* p, T v, bool aligned) {
    if (aligned) { *p = v; return; }
    const unsigned char* from = reinterpret_cast<const unsigned char*>(&v);
    unsigned char* to = reinterpret_cast<unsigned char*>(p);
    for (int k = 0; k < (int)sizeof(T); ++k) to[k] = from[k];
}

// table: the ranks' staging buffers (MAX_RANKS pointers), then their flag words (MAX_RANKS pointers, each rank's
// `world` words: flags[p][q] is rank q's flag in rank p's memory). calls: this rank's count of calls so far.
template <typename T, int OP>
__device__ void all_reduce(const T* source, T* target, void* const* table, unsigned* calls, unsigned count,
                           unsigned rank, unsigned world, unsigned half) {
    T* const* stages = reinterpret_cast<T* const*>(table);
    unsigned* const* flags = reinterpret_cast<unsigned* const*>(table + MAX_RANKS);
    const unsigned call = *calls + 1u;
    const unsigned offset = (call & 1u) * half;
    const bool aligned = ((reinterpret_cast<unsigned long long>(source) |
                           reinterpret_cast<unsigned long long>(target)) %% sizeof(T)) == 0;
    T* mine = stages[rank] + offset;
    for (unsigned i = threadIdx.x; i < count; i += blockDim.x) mine[i] = load_any(source + i, aligned);
    __syncthreads();
    if (threadIdx.x < world) {  // thread p: this rank's flag into rank p's memory (a release: after the block's
        // writes, which the barrier showed this thread), then rank p's flag here
        store_release(flags[threadIdx.x] + rank, call);
        while ((int)(load_acquire(flags[rank] + threadIdx.x) - call) < 0) {
        }
    }
    __syncthreads();
    for (unsigned i = threadIdx.x; i < count; i += blockDim.x) {
        T v = *(const volatile T*)(stages[0] + offset + i);  // volatile: past the L1, which peers' writes miss
        for (unsigned p = 1; p < world; ++p) v = combine<T, OP>(v, *(const volatile T*)(stages[p] + offset + i));
        store_any(target + i, v, aligned);
    }
    if (threadIdx.x == 0) *calls = call;
}
"""


def _source() -> ExecutableSource:
    text = _SOURCE_TEXT % dict(max_ranks=MAX_RANKS)
    exports = []
    for dtype, op in KERNELS:
        ctype, code, name = TYPES[dtype], OPERATIONS.index(op), f"peer_all_reduce_{dtype}_{op}"
        text += (f'extern "C" __global__ void {name}(const {ctype}* source, {ctype}* target, void* const* table, '
                 f'unsigned* calls, unsigned count, unsigned rank, unsigned world, unsigned half) '
                 f'{{ all_reduce<{ctype}, {code}>(source, target, table, calls, count, rank, world, half); }}\n')
        exports.append(Export(name, bindings=4, constants=("uint32",) * 4, workgroup_size=THREADS))
    return ExecutableSource.cuda(text, exports)


SOURCE = _source()


def unavailable(devices: Sequence[Any]) -> str | None:
    """Why these ranks (every one in this process) cannot use the peer kernel, or None."""
    if os.environ.get(SWITCH) == "0":
        return f"{SWITCH}=0"
    if not 2 <= len(devices) <= MAX_RANKS:
        return f"{len(devices)} ranks (the kernel serves 2 to {MAX_RANKS})"
    for d in devices:  # acquire and release loads and stores, and warps that meet at a barrier after a divergent spin
        if d.compute_capability < (7, 0):
            return f"cuda:{d.ordinal} is of compute capability {d.compute_capability} (the kernel needs 7.0)"
    for a in devices:
        for b in devices:
            if a is not b and not call(driver.cuDeviceCanAccessPeer, a.cu_device, b.cu_device):
                return f"cuda:{a.ordinal} cannot access cuda:{b.ordinal}'s memory"
    return None


class PeerAllReduce:
    """The peer kernel's state for the ranks of one communicator, all in this process: per rank its kernels, its
    staging buffer (two halves of ONE_SHOT_BYTES), its flag words, its call count and its table of the ranks'
    addresses. `captured` counts the kernels captured (every collective is: the emitter), for tests and benchmarks."""

    def __init__(self, devices: Sequence[Any]) -> None:
        self.devices = list(devices)
        self.captured = 0
        self.shared: list[tuple[Any, int]] = []  # (device, address): what the peers touch, cuMemAlloc'd
        self.buffers: list[Any] = []  # hal buffers only this rank's kernel touches
        try:
            self._enable_peer_access()
            world = len(self.devices)
            self.executables = [d.load_executable(SOURCE) for d in self.devices]  # (kept: they hold the modules)
            stages = [self._shared_zeroed(d, 2 * ONE_SHOT_BYTES) for d in self.devices]
            flags = [self._shared_zeroed(d, 4 * world) for d in self.devices]
            self.calls = [self._kept(d.upload(np.zeros(1, np.uint32))) for d in self.devices]
            addresses = np.zeros(2 * MAX_RANKS, np.uint64)
            addresses[:world] = stages
            addresses[MAX_RANKS:MAX_RANKS + world] = flags
            self.tables = [self._kept(d.upload(addresses)) for d in self.devices]
        except BaseException:
            self.release()
            raise

    def _enable_peer_access(self) -> None:
        for a in self.devices:
            a.activate()
            for b in self.devices:
                if a is b:
                    continue
                err, = driver.cuCtxEnablePeerAccess(b.context, 0)
                if err not in (driver.CUresult.CUDA_SUCCESS, driver.CUresult.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED):
                    raise fail(err, f"cuCtxEnablePeerAccess (cuda:{a.ordinal} to cuda:{b.ordinal})")

    def _kept(self, buffer: Any) -> Any:
        self.buffers.append(buffer)
        return buffer

    def _shared_zeroed(self, device: Any, nbytes: int) -> int:
        """`nbytes` of zeros on `device` that its peers may access (cuMemAlloc: see the module's docstring)."""
        device.activate()
        address = int(call(driver.cuMemAlloc, nbytes))
        self.shared.append((device, address))
        call(driver.cuMemsetD8, address, 0, nbytes)
        return address

    @staticmethod
    def serves(c: Collective) -> bool:
        """Does the kernel do collective `c` (the same answer on every rank)?"""
        dtype = np.dtype(c.dtype)
        return c.operation == "all_reduce" and dtype.name in TYPES and c.reduction in OPERATIONS and \
            0 < c.count * dtype.itemsize <= ONE_SHOT_BYTES

    def enqueue(self, c: Collective, index: int, source: int, target: int, stream: int) -> None:
        """Queue (or capture) collective `c` of the rank that is devices[index] on `stream`."""
        dtype = np.dtype(c.dtype)
        function = self.executables[index].functions[KERNELS.index((dtype.name, c.reduction))]
        pointers = np.array([source, target, self.tables[index].handle, self.calls[index].handle], np.uint64)
        constants = np.array([c.count, index, len(self.devices), ONE_SHOT_BYTES // dtype.itemsize], np.uint32)
        parameters = np.array([pointers.ctypes.data + 8 * i for i in range(4)] +
                              [constants.ctypes.data + 4 * i for i in range(4)], np.uint64)
        self.devices[index].activate()  # the stream's context
        call(driver.cuLaunchKernel, driver.CUfunction(function), 1, 1, 1, THREADS, 1, 1, 0, driver.CUstream(stream),
             parameters.ctypes.data, 0)
        self.captured += 1

    def release(self) -> None:
        """Free the memory (once the devices' work is done and the graphs that launch the kernels are freed: the
        communicator's close)."""
        for b in self.buffers:
            b.release()
        self.buffers = []
        for device, address in self.shared:
            with contextlib.suppress(DeviceError):  # a lost device's memory went with its context
                device.activate()
                call(driver.cuMemFree, address)
        self.shared = []
