"""Host collectives: ranks are host devices of this process, and each rank's queue worker meets the others.

The host is the oracle of the GPU backends' collectives. A collective of all ranks (all_reduce, all_gather,
reduce_scatter, broadcast) is a round: the n-th such command each rank runs joins round n, leaves a copy of
its source there, waits for every rank, then computes its own result in numpy (reductions add in rank order).
Ranks that disagree on a round (another operation, dtype, count, op or root) all fail with a DeviceError,
where NCCL would hang or compute garbage. Point-to-point data goes through one mailbox per (sender, receiver)
pair: a send leaves a copy and returns (more lenient than NCCL, whose send may wait for its recv), a recv waits
for the oldest one. A rank waits until the others come, or until the communicator or one of its devices is
closed (then DeviceLostError); a rank that never comes (its submission failed before, or it ran a
point-to-point operation there) keeps the others waiting, as on NCCL.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Sequence

import numpy as np

from hal.commands import Collective
from hal.communicator import Communicator
from hal.device import Device
from hal.errors import DeviceError, DeviceLostError

POLL_S = 0.05  # how often a waiting rank looks for a closed device (the others' arrival wakes it at once)
_REDUCE = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum, "avg": np.add}


class _Round:
    __slots__ = ("parts", "left")

    def __init__(self) -> None:
        self.parts: dict[int, tuple] = {}  # rank -> (what it ran, a copy of its source)
        self.left = 0  # ranks that have not taken their result yet


class HostCommunicator(Communicator):
    """In-process collectives among host devices (rank i is devices[i])."""

    def __init__(self, devices: Sequence[Device]) -> None:
        super().__init__(devices, len(devices))
        self._cv = threading.Condition()
        self._rounds: dict[int, _Round] = {}
        self._joined = [0] * self.size  # per rank, the rounds it has joined
        self._mail: dict[tuple[int, int], collections.deque] = collections.defaultdict(collections.deque)

    def run(self, c: Collective, source: np.ndarray | None, target: np.ndarray | None) -> None:
        """Run collective `c` for its rank, on the views of its source and target (None where it has none)."""
        if c.operation in ("send", "recv", "send_recv"):
            if c.operation != "recv":
                with self._cv:
                    self._mail[(c.rank, c.peer)].append(source.copy())
                    self._cv.notify_all()
            if c.operation != "send":
                peer = c.peer if c.operation == "recv" else c.source_peer
                target[:] = self._receive(c, peer, target.nbytes)
            return
        result = self._meet(c, source)
        target[:] = result.view(np.uint8)

    def _receive(self, c: Collective, peer: int, nbytes: int) -> np.ndarray:
        with self._cv:
            box = self._mail[(peer, c.rank)]
            self._wait(lambda: bool(box), c, f"rank {peer}'s send")
            data = box.popleft()
        if data.nbytes != nbytes:
            raise DeviceError(f"host: command {c.index} ({c.kind}) on rank {c.rank}: rank {peer} sent {data.nbytes} "
                              f"bytes, it receives {nbytes}; record matching sizes")
        return data

    def _meet(self, c: Collective, source: np.ndarray | None) -> np.ndarray:
        what = (c.operation, c.dtype, c.count, c.reduction, c.peer)
        with self._cv:
            number = self._joined[c.rank]
            self._joined[c.rank] += 1
            meeting = self._rounds.setdefault(number, _Round())
            meeting.parts[c.rank] = (what, None if source is None else source.copy())
            meeting.left += 1
            self._cv.notify_all()
            self._wait(lambda: len(meeting.parts) == self.size, c, f"the other ranks at collective {number}")
            meeting.left -= 1
            if not meeting.left:
                del self._rounds[number]
        differ = sorted(r for r, (w, _) in meeting.parts.items() if w != what)
        if differ:
            theirs = meeting.parts[differ[0]][0]
            raise DeviceError(f"host: command {c.index} ({c.kind}) on rank {c.rank}: collective {number} differs "
                              f"between ranks: {self._describe(what)} here, {self._describe(theirs)} on rank "
                              f"{differ[0]}; every rank must record the same collectives in the same order")
        parts = [meeting.parts[r][1] for r in range(self.size)]
        return _combine(c, parts)

    def _wait(self, ready, c: Collective, what: str) -> None:
        """Under the lock: wait until `ready()`, unless the communicator or one of its devices closes."""
        while not ready():
            closed = [d for d in self.devices if d.closed]
            if self.closed or closed:
                cause = "the communicator" if self.closed else f"{closed[0]!r}"
                raise DeviceLostError(f"host: command {c.index} ({c.kind}) on rank {c.rank} waited for {what}, but "
                                      f"{cause} was closed")
            self._cv.wait(POLL_S)

    @staticmethod
    def _describe(what: tuple) -> str:
        operation, dtype, count, reduction, peer = what
        extra = f" {reduction}" if reduction else f" root {peer}" if operation == "broadcast" else ""
        return f"{operation} of {count} x {dtype}{extra}"

    def _drain(self) -> None:
        for d in self.devices:
            if not d.closed:
                d.wait_for_queue()

    def _close(self) -> None:
        with self._cv:
            self._cv.notify_all()  # waiters see the communicator closed


def _combine(c: Collective, parts: list[np.ndarray | None]) -> np.ndarray:
    """Rank c.rank's result of an all-rank collective from every rank's source bytes (in rank order)."""
    if c.operation == "broadcast":
        return parts[c.peer]
    values = [p.view(c.dtype) for p in parts]
    if c.operation == "all_gather":
        return np.concatenate(values)
    total = values[0].copy()
    for v in values[1:]:
        _REDUCE[c.reduction](total, v, out=total)
    if c.reduction == "avg":
        total = (total / len(values)).astype(c.dtype)
    if c.operation == "reduce_scatter":
        return total[c.rank * c.count:(c.rank + 1) * c.count]
    return total
