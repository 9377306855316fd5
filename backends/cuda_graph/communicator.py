"""CUDA collectives: NCCL communicators through nccl4py's bindings (NVIDIA's), one per rank of this process.

A command buffer's collectives are captured from a stream into child graphs of its CUDA graph (the emitter
in backends.cuda_graph.command_buffer), so they run inside the graph with the kernels around them, one
launch for all; one-shot command buffers too (see Graph mixing below). Small all_reduces between ranks all in this
process run in hal's own kernel instead, where peer access allows (backends.cuda_graph.peer_all_reduce): a kernel
node of the graph (kernel_of).

Forming the group. Every rank in this process: ncclCommInitAll. One process per GPU: rank 0 writes NCCL's
unique id to the rendezvous file (new: it must not exist), every rank reads it and calls ncclCommInitRank,
and rank 0 removes the file once the group has formed.

Closing. ncclCommDestroy waits for the CUDA graphs holding the communicator's work, so close() first frees the
graphs of the command buffers that captured it (they cannot be submitted again anyway).

Connections. NCCL connects ranks lazily by default, at their first collective, which needs every rank
to take part at once. Ranks of one process capture their graphs one after the other (each command buffer's
end()), so hal sets NCCL_RUNTIME_CONNECT=0 (connect at creation) unless the environment already sets it, and
a communicator of several ranks in this process exchanges one byte between every pair of ranks (grouped,
so all at once) before it returns, which connects point-to-point transfers too.

Graph mixing. By default NCCL surrounds every collective captured into a graph with an event wait and an event record
(its way of ordering graph launches against calls made outside graphs and against other graphs on other streams).
CUDA refuses event nodes inside a conditional node's body, so the collectives of a while_nonzero or if_nonzero
could not run on the device; and NCCL documents that this mechanism has been seen to deadlock CUDA when the graphs
of several communicators are launched from one thread, which is how one process drives its ranks. hal sets
NCCL_GRAPH_MIXING_SUPPORT=0 unless the environment already sets it: NCCL then captures a collective as its kernel
alone (seen on 2 H200s with NCCL 2.28). What NCCL asks in exchange, no graph launch of a communicator outstanding
when a call outside graphs is made and no two launched in parallel, holds because hal captures every collective
(one-shot command buffers included) and launches a device's graphs in order on its one stream; the only calls
outside graphs are the connecting exchange above, before any graph exists.
"""

from __future__ import annotations

import contextlib
import os
import time
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from backends.cuda_graph import peer_all_reduce
from backends.cuda_graph.peer_all_reduce import PeerAllReduce
from hal.commands import Collective
from hal.communicator import Communicator
from hal.errors import DeviceError, DeviceLostError, HalError, TimeoutError, UnsupportedError, ValidationError

RENDEZVOUS_TIMEOUT_S = 300.0
_DTYPES = {"int8": "Int8", "uint8": "Uint8", "int32": "Int32", "uint32": "Uint32", "int64": "Int64",
           "uint64": "Uint64", "float16": "Float16", "float32": "Float32", "float64": "Float64"}
_REDUCTIONS = {"sum": "Sum", "prod": "Prod", "max": "Max", "min": "Min", "avg": "Avg"}


def nccl_bindings() -> Any:
    """nccl4py's low-level bindings, NCCL loaded; UnsupportedError saying what to install otherwise."""
    try:
        from nccl.bindings import nccl
        nccl.get_version()  # loads libnccl.so.2
    except ImportError as e:
        raise UnsupportedError(f"CUDA collectives need nccl4py ({e}): pip install 'hal-command-buffers[nccl]'") from e
    except Exception as e:  # the bindings found no libnccl
        raise UnsupportedError(f"CUDA collectives need NCCL's library: {type(e).__name__}: {e}; install NCCL "
                               f"(libnccl.so.2) or pip install nvidia-nccl-cu13") from e
    return nccl


class CudaCommunicator(Communicator):
    """NCCL communicators for this process's ranks (`comms[i]` serves devices[i])."""

    def __init__(self, devices: Sequence[Any], world: int, rank: int, rendezvous: str | None) -> None:
        self.nccl = nccl_bindings()
        os.environ.setdefault("NCCL_RUNTIME_CONNECT", "0")  # see the module's docstring
        os.environ.setdefault("NCCL_GRAPH_MIXING_SUPPORT", "0")  # (the same)
        super().__init__(devices, world, rank)
        self.captors: weakref.WeakSet = weakref.WeakSet()  # see captured_by
        self.comms: list = []
        self.peer: PeerAllReduce | None = None  # all_reduces up to its limit in hal's kernel (peer_all_reduce)
        self.peer_unavailable: str | None = "ranks in other processes"  # or why not, where they are all here
        try:
            if rendezvous is None:
                self.comms = self._init_all()
                self._start_peer_all_reduce()
            else:
                self.comms = [self._init_rank(world, rank, rendezvous)]
        except BaseException:
            self._destroy(self.comms)
            self.release_tokens()
            raise
        self._dtypes = {np.dtype(k): int(getattr(self.nccl.DataType, v)) for k, v in _DTYPES.items()}
        self._reductions = {k: int(getattr(self.nccl.RedOp, v)) for k, v in _REDUCTIONS.items()}

    def _init_all(self) -> list:
        ordinals = [d.ordinal for d in self.devices]
        if len(set(ordinals)) < len(ordinals):
            raise ValidationError(f"create_communicator: two devices are the same GPU (ordinals {ordinals}); NCCL "
                                  f"needs a GPU per rank")
        comms = list(self.call("ncclCommInitAll", self.nccl.comm_init_all, len(self.devices), ordinals))
        try:
            if len(self.devices) > 1:
                self._connect_pairs(comms)
        except BaseException:
            self._destroy(comms)
            raise
        return comms

    def _connect_pairs(self, comms: list) -> None:
        """One byte between every pair of ranks, as one group: NCCL connects them now, not during a capture."""
        buffers = [d.allocate(2 * self.size) for d in self.devices]
        try:
            self.call("ncclGroupStart", self.nccl.group_start)
            try:
                byte = self._dtype_code("uint8")
                for r, (d, comm, b) in enumerate(zip(self.devices, comms, buffers)):
                    for peer in range(self.size):
                        if peer != r:
                            self.call("ncclSend", self.nccl.send, b.handle + peer, 1, byte, peer, comm,
                                      d.stream_handle)
                            self.call("ncclRecv", self.nccl.recv, b.handle + self.size + peer, 1, byte, peer, comm,
                                      d.stream_handle)
            finally:
                self.call("ncclGroupEnd", self.nccl.group_end)
            for d in self.devices:
                d.synchronize()
        finally:
            for b in buffers:
                b.release()

    def _start_peer_all_reduce(self) -> None:
        """The peer kernel for all_reduces up to its limit where these ranks allow it; NCCL for all where not (the
        reason kept in `peer_unavailable`: one decision for every rank, all of them in this process)."""
        self.peer_unavailable = peer_all_reduce.unavailable(self.devices)
        if self.peer_unavailable is None:
            try:
                self.peer = PeerAllReduce(self.devices)
            except HalError as e:  # peer access refused, no NVRTC, say: NCCL does them all
                if isinstance(e, DeviceLostError):
                    raise
                self.peer_unavailable = f"{type(e).__name__}: {e}"

    def _dtype_code(self, name: str) -> int:
        return int(getattr(self.nccl.DataType, _DTYPES[name]))

    def _init_rank(self, world: int, rank: int, path: str) -> Any:
        nccl = self.nccl
        if rank == 0:
            if os.path.exists(path):
                raise ValidationError(f"create_communicator: the rendezvous file {path} exists; rank 0 writes a new "
                                      f"one (remove it, or give each group its own path)")
            uid = self.call("ncclGetUniqueId", nccl.get_unique_id)
            temporary = f"{path}.{os.getpid()}.tmp"
            with open(temporary, "wb") as f:
                f.write(bytes(uid))
            os.replace(temporary, path)  # whole, or not there: readers never see half an id
        else:
            uid = nccl.UniqueId.from_buffer(self._read_id(path))
        self.devices[0].activate()
        try:
            return self.call("ncclCommInitRank", nccl.comm_init_rank, world, uid, rank)
        finally:
            if rank == 0:  # every rank has read it: ncclCommInitRank returns once all have joined
                with contextlib.suppress(OSError):
                    os.remove(path)

    @staticmethod
    def _read_id(path: str) -> bytes:
        deadline = time.monotonic() + RENDEZVOUS_TIMEOUT_S
        while True:
            with contextlib.suppress(FileNotFoundError):
                with open(path, "rb") as f:
                    data = f.read()
                if len(data) == 128:
                    return data
            if time.monotonic() > deadline:
                raise TimeoutError(f"create_communicator: rank 0 wrote no NCCL id to {path} within "
                                   f"{RENDEZVOUS_TIMEOUT_S:.0f} s")
            time.sleep(0.01)

    def call(self, what: str, function: Any, *args: Any) -> Any:
        try:
            return function(*args)
        except self.nccl.NCCLError as e:
            raise DeviceError(f"{what} failed: {e}") from e

    def kernel_of(self, c: Collective, source: int, target: int) -> tuple[int, int, int, list[int]] | None:
        """Collective `c` of this process's rank c.rank as one kernel of hal's, from `source` into `target`
        (device addresses): its function handle, blocks, threads a block and parameters (a word each), where the
        peer kernel serves it; else None, and `enqueue` gives NCCL's work."""
        if self.peer is None or not self.peer.serves(c):
            return None
        return self.peer.kernel(c, c.rank - self.first_rank, source, target)

    def enqueue(self, c: Collective, source: int, target: int, stream: int) -> None:
        """Queue collective `c` of this process's rank c.rank on `stream` (a CUstream handle, maybe capturing);
        `source` and `target` are device addresses (0 where it has none)."""
        nccl = self.nccl
        comm = self.comms[c.rank - self.first_rank]
        dtype = self._dtypes[c.dtype]
        what = f"command {c.index} ({c.kind})"
        op = c.operation
        reduction = self._reductions.get(c.reduction)
        if op == "all_reduce":
            self.call(what, nccl.all_reduce, source, target, c.count, dtype, reduction, comm, stream)
        elif op == "all_gather":
            self.call(what, nccl.all_gather, source, target, c.count, dtype, comm, stream)
        elif op == "reduce_scatter":
            self.call(what, nccl.reduce_scatter, source, target, c.count, dtype, reduction, comm,
                      stream)
        elif op == "broadcast":
            self.call(what, nccl.broadcast, source, target, c.count, dtype, c.peer, comm, stream)
        elif op == "send":
            self.call(what, nccl.send, source, c.count, dtype, c.peer, comm, stream)
        elif op == "recv":
            self.call(what, nccl.recv, target, c.count, dtype, c.peer, comm, stream)
        else:  # send_recv: one group, so neither side waits for the other's order
            self.call(what, nccl.group_start)
            try:
                self.call(what, nccl.send, source, c.count, dtype, c.peer, comm, stream)
                self.call(what, nccl.recv, target, c.count, dtype, c.source_peer, comm, stream)
            finally:
                self.call(what, nccl.group_end)

    def captured_by(self, emitter: Any) -> None:
        """Note a command buffer's emitter (backends.cuda_graph.command_buffer) whose graph holds this
        communicator's work: closing frees that graph first, since ncclCommDestroy waits for it."""
        self.captors.add(emitter)

    def _drain(self) -> None:
        for d in self.devices:
            if not d.closed:
                d.wait_for_work()

    def _close(self) -> None:
        try:
            for emitter in list(self.captors):
                emitter.release_graphs()
        finally:
            self._destroy(self.comms)
            self.comms = []
            peer, self.peer = self.peer, None
            if peer is not None:
                peer.release()

    def _destroy(self, comms: list) -> None:
        for comm in comms:
            with contextlib.suppress(Exception):  # closing: nothing more to do about a failure
                self.nccl.comm_destroy(comm)
