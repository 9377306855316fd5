"""All_reduces up to about a megabyte between the GPUs of one process as one kernel of hal's, over peer access
(NVLink), in NCCL's place.

Why. A token of the split decode all-reduces 8 KiB 32 times, one after the other; through NCCL each costs about
10 µs on the chain on 2 H200s (bench/results/nvidia-h200-x2-2026-11-29-tensor-parallel-mixing.md), most of it
latency. Where every rank is a GPU of this process and each can reach the others' memory, the kernel does it in one
one-way trip: each thread takes elements of the source and writes each 32-bit word of them into this rank's slot in
every rank's staging buffer as a line, the word beside the call's number in one 64-bit store; then, in its own
memory, it waits for each rank's lines of the same elements to carry this call's number and combines the ranks'
parts in rank order (so every rank gets the same bits). No fence and no flag: a line's data comes with its number.
(The first version raised a flag after a fenced copy and read the peers' buffers: a round trip more, measured
bench/results/nvidia-h200-x2-2026-11-29-peer-all-reduce.md.) A block of THREADS threads takes BLOCK_WORDS
(2 x THREADS) words of the part, so a part of up to 8 KiB is one block, and larger ones spread over as many blocks
as they need, all at once (one block took 17 µs for 64 KiB, its stores reaching the peer at about 5 GB/s; 64 KiB in
8 blocks 3.5 µs): word w is always block w / BLOCK_WORDS's, whatever the part's size, so each block counts the calls
it took part in, in a word of its rank's memory, and blocks share nothing. The staging buffers alternate between two
halves by the parity of that count: a block writes a half again two of its calls later, which it reaches only once every
rank's block has written its part of the call between, after its reads of that half (a rank's calls run in its
stream's order: each waits for the kernels before it, which end after theirs, plain edges or early_launch's
contract). A line left from an earlier call carries that call's number, so it passes for this one only if it was
last written 2^32 calls ago (about five hours of back-to-back calls with that line unused). NCCL's rule holds here
too: every rank runs the communicator's collectives in the same order, with the same counts.

Which. all_reduce of int32, uint32, int64, uint64, float32 or float64 with sum, prod, max or min, at most
one_shot_bytes(world) a rank, on a communicator whose ranks are all in this process (2 to MAX_RANKS GPUs, each able to
access every other's memory); the rest, and everything where HAL_CUDA_PEER_ALL_REDUCE=0, goes to NCCL. The choice
depends on nothing that differs between ranks (not on addresses: the kernel copies unaligned data bytewise), so
all ranks of a collective take the same path. A kernel node of the rank's graph (CudaCommunicator.kernel_of, which
the emitter asks before it captures NCCL's work), so it sits in loops and branches and is patched like a dispatch;
it waits for the kernels before it itself (griddepcontrol.wait), so edges from kernels into it are programmatic where
the device has early launch, and so are its edges into early_launch dispatches: those launch while it exchanges,
and load what they may before their own wait (the decode's kernels, their weights).

Peer access, once enabled between the ranks' contexts, stays enabled for the contexts' lives (the primary
contexts, which other libraries in the process share). It covers memory from cuMemAlloc, not from the stream-ordered
pools hal's buffers come from (those would need cuMemPoolSetAccess, which maps every later allocation of the pool
into the peers too), so the staging buffers the peers touch are cuMemAlloc'd here, freed at release()."""

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

# What a rank stores in a call at most, a line (8 bytes) per 32-bit word of its part in each of the world ranks:
# one_shot_bytes. (The staging buffers take twice as much, 8 MiB a rank.)
STORED_BYTES = 4 << 20
MAX_RANKS = 8
THREADS = 1024  # a block's (blocks of 256 measured slower in the split decode: 860 µs a token against 844)
ELEMENT_WORDS = 2  # a thread's 32-bit words of a call (even: whole 64-bit elements), their lines loaded together
BLOCK_WORDS = THREADS * ELEMENT_WORDS  # a block's 32-bit words of a part: word w is always block w // BLOCK_WORDS's
MULTIPROCESSORS = driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
SWITCH = "HAL_CUDA_PEER_ALL_REDUCE"  # "0": NCCL for every all_reduce
TYPES = {"int32": "int", "uint32": "unsigned", "int64": "long long", "uint64": "unsigned long long",
         "float32": "float", "float64": "double"}
OPERATIONS = ("sum", "prod", "max", "min")


KERNELS = [(dtype, op) for dtype in TYPES for op in OPERATIONS]  # the exports' order


_SOURCE_TEXT = r"""
#define MAX_RANKS %(max_ranks)d

// A line: one 32-bit word of data beside the call's number, stored and loaded as one 64-bit word (single-copy
// atomic), so a reader that sees the number has the data with it, without a fence or a flag of its own.
__device__ __forceinline__ unsigned long long load_line(const unsigned long long* p) {
    unsigned long long v;
    asm volatile("ld.relaxed.sys.u64 %%0, [%%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void store_line(unsigned long long* p, unsigned call, unsigned word) {
    asm volatile("st.relaxed.sys.u64 [%%0], %%1;" :: "l"(p), "l"(((unsigned long long)call << 32) | word) : "memory");
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

// table: the ranks' staging buffers (MAX_RANKS pointers), each two halves of `world` slots of `slot` lines: slot q
// of a half in rank p's memory receives rank q's part. A block takes %(element_words)d * blockDim.x words of the part
// (a thread ELEMENTS elements, blockDim.x apart), the same in both phases (so source and target may be one), and word w
// is always block w / (%(element_words)d * blockDim.x)'s, whatever the count: blocks share nothing, each counts the
// calls it took part in (calls[block]: equal on every rank, which all run the same calls), and each line's number
// and half are its block's.
template <typename T, int OP>
__device__ void all_reduce(const T* source, T* target, unsigned long long* const* stages, unsigned* calls,
                           unsigned count, unsigned rank, unsigned world, unsigned slot) {
    constexpr unsigned WORDS = sizeof(T) / 4;
    constexpr unsigned ELEMENTS = %(element_words)d / WORDS;
#if __CUDA_ARCH__ >= 900
    // Launched early (a programmatic edge: the emitter's), it waits here for the kernels before it to end, then lets
    // the kernels after it launch; after a plain edge both return at once.
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    const unsigned call = calls[blockIdx.x] + 1u;
    const unsigned half = (call & 1u) * world * slot;
    const unsigned first = blockIdx.x * ELEMENTS * blockDim.x + threadIdx.x;
    const bool aligned = ((reinterpret_cast<unsigned long long>(source) |
                           reinterpret_cast<unsigned long long>(target)) %% sizeof(T)) == 0;
    unsigned words[WORDS];
    #pragma unroll
    for (unsigned e = 0; e < ELEMENTS; ++e) {  // this rank's part into its slot everywhere
        const unsigned i = first + e * blockDim.x;
        if (i < count) {
            T mine = load_any(source + i, aligned);
            memcpy(words, &mine, sizeof(T));
            for (unsigned p = 0; p < world; ++p) {
                unsigned long long* line = stages[p] + half + rank * slot + i * WORDS;
                for (unsigned k = 0; k < WORDS; ++k) store_line(line + k, call, words[k]);
            }
        }
    }
    // Then every rank's lines of the same elements, all their loads in flight at once before any is waited for.
    const unsigned long long* received = stages[rank] + half;  // slot q: rank q's part
    unsigned long long lines[ELEMENTS][MAX_RANKS][WORDS];
    #pragma unroll
    for (unsigned e = 0; e < ELEMENTS; ++e)
        #pragma unroll
        for (unsigned q = 0; q < MAX_RANKS; ++q)
            #pragma unroll
            for (unsigned k = 0; k < WORDS; ++k)
                if (first + e * blockDim.x < count && q < world)
                    lines[e][q][k] = load_line(received + q * slot + (first + e * blockDim.x) * WORDS + k);
    #pragma unroll
    for (unsigned e = 0; e < ELEMENTS; ++e) {
        const unsigned i = first + e * blockDim.x;
        if (i >= count) break;
        T sum;
        #pragma unroll
        for (unsigned q = 0; q < MAX_RANKS; ++q) {  // in rank order, each once it carries this call's number
            if (q >= world) break;
            #pragma unroll
            for (unsigned k = 0; k < WORDS; ++k) {
                while ((unsigned)(lines[e][q][k] >> 32) != call)
                    lines[e][q][k] = load_line(received + q * slot + i * WORDS + k);
                words[k] = (unsigned)lines[e][q][k];
            }
            T part;
            memcpy(&part, words, sizeof(T));
            sum = q ? combine<T, OP>(sum, part) : part;
        }
        store_any(target + i, sum, aligned);
    }
    __syncthreads();  // (every thread has read the count)
    if (threadIdx.x == 0) calls[blockIdx.x] = call;
}
"""


def _source() -> ExecutableSource:
    text = _SOURCE_TEXT % dict(max_ranks=MAX_RANKS, element_words=ELEMENT_WORDS)
    exports = []
    for dtype, op in KERNELS:
        ctype, code, name = TYPES[dtype], OPERATIONS.index(op), f"peer_all_reduce_{dtype}_{op}"
        text += (f'extern "C" __global__ void __launch_bounds__({THREADS}, 1) {name}(const {ctype}* source, '
                 f'{ctype}* target, unsigned long long* const* stages, unsigned* calls, unsigned count, '
                 f'unsigned rank, unsigned world, unsigned slot) '
                 f'{{ all_reduce<{ctype}, {code}>(source, target, stages, calls, count, rank, world, slot); }}\n')
        exports.append(Export(name, bindings=4, constants=("uint32",) * 4, workgroup_size=THREADS))
    return ExecutableSource.cuda(text, exports)


SOURCE = _source()


def one_shot_bytes(world: int) -> int:
    """A rank's part at most on `world` ranks: its stores grow with the ranks, so the limit falls. On 2 H200s, in a
    graph back to back: 4 KiB to 128 KiB 2.8-3.7 µs against NCCL's 7.1-8.9, 1 MiB 8.6 against 14.7 (4 and 8 ranks
    not measured). A GPU of fewer SMs than the part's blocks lowers it further (PeerAllReduce.limit)."""
    return STORED_BYTES // (2 * world) // 8 * 8


def unavailable(devices: Sequence[Any]) -> str | None:
    """Why these ranks (every one in this process) cannot use the peer kernel, or None."""
    if os.environ.get(SWITCH) == "0":
        return f"{SWITCH}=0"
    if not 2 <= len(devices) <= MAX_RANKS:
        return f"{len(devices)} ranks (the kernel serves 2 to {MAX_RANKS})"
    for d in devices:  # 64-bit relaxed system-scope loads and stores, and threads that spin independently
        if d.compute_capability < (7, 0):
            return f"cuda:{d.ordinal} is of compute capability {d.compute_capability} (the kernel needs 7.0)"
    for a in devices:
        for b in devices:
            if a is not b and not call(driver.cuDeviceCanAccessPeer, a.cu_device, b.cu_device):
                return f"cuda:{a.ordinal} cannot access cuda:{b.ordinal}'s memory"
    return None


class PeerAllReduce:
    """The peer kernel's state for the ranks of one communicator, all in this process: per rank its kernels, its
    staging buffer (two halves of a slot of `slot_lines` lines per rank: a line a 32-bit word), its blocks' counts of
    calls and its table of the ranks' staging addresses. `emitted` counts the kernels handed to graphs, for tests and
    benchmarks."""

    def __init__(self, devices: Sequence[Any]) -> None:
        self.devices = list(devices)
        self.emitted = 0
        self.shared: list[tuple[Any, int]] = []  # (device, address): what the peers touch, cuMemAlloc'd
        self.buffers: list[Any] = []  # hal buffers only this rank's kernel touches
        try:
            self._enable_peer_access()
            world = len(self.devices)
            # At most a block per SM of the smallest rank: a call's blocks can all run at once (each waits for its
            # peers' block of the same words, which must not wait for an SM that a waiting block holds).
            smallest = min(int(call(driver.cuDeviceGetAttribute, MULTIPROCESSORS, d.cu_device)) for d in self.devices)
            self.limit = min(one_shot_bytes(world), smallest * BLOCK_WORDS * 4)
            self.slot_lines = self.limit // 4
            self.executables = [d.load_executable(SOURCE) for d in self.devices]  # (kept: they hold the modules)
            stages = [self._shared_zeroed(d, 2 * world * self.slot_lines * 8) for d in self.devices]
            blocks = -(-self.slot_lines // BLOCK_WORDS)
            self.calls = [self._kept(d.upload(np.zeros(blocks, np.uint32))) for d in self.devices]
            addresses = np.zeros(MAX_RANKS, np.uint64)
            addresses[:world] = stages
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

    def serves(self, c: Collective) -> bool:
        """Does the kernel do collective `c` (the same answer on every rank)?"""
        dtype = np.dtype(c.dtype)
        return c.operation == "all_reduce" and dtype.name in TYPES and c.reduction in OPERATIONS and \
            0 < c.count * dtype.itemsize <= self.limit

    def kernel(self, c: Collective, index: int, source: int, target: int) -> tuple[int, int, int, list[int]]:
        """Collective `c` of the rank that is devices[index], from `source` into `target` (device addresses): its
        kernel's function handle, blocks, threads a block and parameters (a word each), for a kernel node of the
        rank's graph: a block per BLOCK_WORDS words of the part (the same grid on every rank)."""
        dtype = np.dtype(c.dtype)
        function = self.executables[index].functions[KERNELS.index((dtype.name, c.reduction))]
        blocks = -(-(c.count * dtype.itemsize // 4) // BLOCK_WORDS)
        self.emitted += 1
        return function, blocks, THREADS, [source, target, self.tables[index].handle, self.calls[index].handle,
                                           c.count, index, len(self.devices), self.slot_lines]

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
