"""Communicators: devices that exchange data through collective commands recorded into command buffers.

`hal.create_communicator(devices)` groups devices of one process (rank i is devices[i]); with `rank`,
`world` and `rendezvous`, one process per device joins a group of `world` processes. The commands
(`cb.all_reduce`, `all_gather`, `reduce_scatter`, `broadcast`, `send`, `recv`, `send_recv`) are recorded
like any other: their buffers are reads and writes for dependency and race analysis, slots are allowed.

Order. Every rank must run a communicator's collectives in the same order (NCCL's rule, and the only way
ranks can match their parts). hal keeps each command buffer's collectives of one communicator in recording
order: each also writes the communicator's order token of its device (`order_ref`), an internal 4-byte
buffer, so the planner orders them like any two writes, and two in one segment are refused at record time.
A pairwise exchange (both ranks send and receive) is one `send_recv` command, which never deadlocks.
"""

from __future__ import annotations

import abc
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from hal.errors import UnsupportedError, ValidationError, integer

if TYPE_CHECKING:
    from hal.buffer import Buffer, BufferRef

# The element types every backend reduces (NCCL's, less those numpy lacks).
DTYPES = tuple(np.dtype(t) for t in (np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16,
                                     np.float32, np.float64))
REDUCTIONS = ("sum", "prod", "max", "min", "avg")


@runtime_checkable
class CommunicatorDevice(Protocol):
    """What communicators need of a device (a hal.Device)."""

    driver: str

    @property
    def closed(self) -> bool: ...

    def check_open(self) -> None: ...

    def allocate(self, nbytes: int) -> Buffer: ...

    def new_communicator(self, devices: tuple[CommunicatorDevice, ...], world: int, rank: int,
                         rendezvous: str | None) -> Communicator: ...


class Communicator(abc.ABC):
    """Ranks `0 .. size - 1`; this process holds `devices` (rank `first_rank + i` is devices[i]).

    Backends subclass it (a device's new_communicator makes theirs) and implement `_drain` and `_close`. Closing
    lets the devices' submitted work finish (a collective waiting for a rank that never comes keeps it waiting, as
    NCCL would: close that rank's device, whose waits then fail), then releases the backend's resources; command
    buffers that recorded collectives on it can no longer be submitted.
    """

    def __init__(self, devices: Sequence[CommunicatorDevice], size: int, first_rank: int = 0) -> None:
        self.devices = tuple(devices)
        self.size = size
        self.first_rank = first_rank
        self._closed = self._closing = False
        self._lock = threading.Lock()
        # Per device, the order token its collectives write (see the module's docstring).
        self._order: dict[int, Any] = {}
        try:
            for d in self.devices:
                self._order[id(d)] = d.allocate(4)
        except BaseException:
            self.release_tokens()
            raise

    def rank(self, device: CommunicatorDevice) -> int:
        """The rank of one of this process's devices of the communicator.

        Args:
            device: The device.

        Returns:
            Its rank.

        Raises:
            ValidationError: The device is not one of this process's devices of the communicator.
        """
        for i, d in enumerate(self.devices):
            if d is device:
                return self.first_rank + i
        raise ValidationError(f"{device!r} is not a device of {self!r}; record the command on one of its devices")

    def order_ref(self, device: CommunicatorDevice) -> BufferRef:
        """The order token of `device` (a 4-byte buffer no command of the user can name)."""
        return self._order[id(device)].whole

    @property
    def closed(self) -> bool:
        return self._closed

    def check_open(self, what: str) -> None:
        if self._closed:
            raise ValidationError(f"{what}: {self!r} is closed; create a new communicator")

    def close(self) -> None:
        """Release the communicator once the devices' submitted work is done; command buffers that recorded its
        collectives are refused from then on. Idempotent."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        try:
            self._drain()
        finally:
            self._closed = True
            try:
                self._close()
            finally:
                self.release_tokens()

    def release_tokens(self) -> None:
        """Release the order tokens (of the devices still open)."""
        for d in self.devices:
            token = self._order.pop(id(d), None)
            if token is not None and not d.closed:
                token.release()

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        ranks = f"ranks {self.first_rank}..{self.first_rank + len(self.devices) - 1} of {self.size}"
        return f"<{type(self).__name__} {ranks}{' closed' if self._closed else ''}>"

    # The backend contract.
    @abc.abstractmethod
    def _drain(self) -> None:
        """Wait for the work the devices were given, leaving its failures to their synchronize()."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Release the backend's resources (after _drain)."""


def create_communicator(devices: Sequence[CommunicatorDevice], *, rank: int | None = None,
                        world: int | None = None, rendezvous: str | None = None) -> Communicator:
    """A communicator: devices that run collectives together, each a rank.

    Args:
        devices: The ranks of this process, all of one driver, each once: rank i is devices[i]; with `rank`, this
            process's one device.
        rank: With one process per device: this process's first rank (`create_communicator([dev], rank=r,
            world=n, rendezvous=path)` in each of n processes).
        world: With `rank`: how many ranks the group has in all.
        rendezvous: With `rank`: a file path every process reaches, which must not exist yet (rank 0 writes the
            group's identity there and removes it once the group formed).

    Returns:
        The `hal.Communicator`, which the collectives of `CommandBuffer` take.

    Raises:
        ValidationError: No device, a device twice or of another driver, or the rank, world or rendezvous do not
            agree.
        UnsupportedError: The driver has no collectives (Vulkan), or their library is missing (CUDA: nccl4py).

    Example:
        >>> ranks = [hal.create_device("host") for _ in range(2)]
        >>> comm = hal.create_communicator(ranks)
        >>> comm.close()
        >>> for rank in ranks:
        ...     rank.close()
    """
    devices = tuple(devices) if isinstance(devices, (list, tuple)) else (devices,)
    if not devices:
        raise ValidationError("create_communicator: give at least one device")
    for d in devices:
        if not isinstance(d, CommunicatorDevice):
            raise ValidationError(f"create_communicator: {d!r} is not a hal.Device")
        d.check_open()
    if len({id(d) for d in devices}) != len(devices):
        raise ValidationError("create_communicator: a device appears twice; each rank needs a device of its own")
    drivers = {d.driver for d in devices}
    if len(drivers) > 1:
        raise ValidationError(f"create_communicator: the devices belong to several drivers {sorted(drivers)}; "
                              f"a communicator joins devices of one driver")
    if (rank is None) != (world is None) or (rank is None) != (rendezvous is None):
        raise ValidationError("create_communicator: give rank, world and rendezvous together (one process per "
                              "device), or none of them (every rank in this process)")
    if rank is None:
        return devices[0].new_communicator(devices, len(devices), 0, None)
    if len(devices) != 1:
        raise ValidationError(f"create_communicator: with rank and world, give this process's one device, got "
                              f"{len(devices)}")
    world = integer(world, "create_communicator: world", 1)
    rank = integer(rank, "create_communicator: rank", 0)
    if rank >= world:
        raise ValidationError(f"create_communicator: rank {rank} is not below world {world}")
    if not isinstance(rendezvous, str) or not rendezvous:
        raise ValidationError(f"create_communicator: rendezvous must be a file path, got {rendezvous!r}")
    return devices[0].new_communicator(devices, world, rank, rendezvous)


def unsupported(driver: str) -> UnsupportedError:
    return UnsupportedError(f"the {driver} driver has no collectives; use CUDA devices (NCCL) or host devices")


# Per operation: does it take a source, a target (True: required; None: only the root's source), a peer (what
# the message calls it) and a source_peer?
_ARGUMENTS = {"all_reduce": (True, True, None, False), "all_gather": (True, True, None, False),
              "reduce_scatter": (True, True, None, False), "broadcast": (None, True, "root", False),
              "send": (True, False, "peer", False), "recv": (False, True, "peer", False),
              "send_recv": (True, True, "peer", True)}


def check_collective(operation: str, communicator: Any, device: CommunicatorDevice, source: BufferRef | None,
                     target: BufferRef | None, dtype: Any, reduction: Any, peer: Any, source_peer: Any,
                     index: int) -> tuple:
    """Check a collective's arguments (the references' ranges are already checked); returns
    (dtype, count, reduction, rank, peer, source_peer) as the record keeps them."""
    where = f"command {index} ({operation})"
    if not isinstance(communicator, Communicator):
        raise ValidationError(f"{where}: communicator must come from hal.create_communicator(), got "
                              f"{type(communicator).__name__}")
    communicator.check_open(where)
    if communicator.devices[0].driver != device.driver:
        raise ValidationError(f"{where}: {communicator!r} joins {communicator.devices[0].driver} devices, not this "
                              f"{device.driver} device")
    closed = [d for d in communicator.devices if d.closed]
    if closed:
        raise ValidationError(f"{where}: {closed[0]!r}, a rank of {communicator!r}, is closed; its collectives "
                              f"could never meet it")
    rank = communicator.rank(device)
    size = communicator.size
    if dtype is None:
        raise ValidationError(f"{where}: give the dtype of the elements")
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise ValidationError(f"{where}: dtype {dtype!r} is not a numpy dtype") from e
    if dt not in DTYPES:
        raise ValidationError(f"{where}: dtype {dt} is not one of {', '.join(str(t) for t in DTYPES)}")
    if operation in ("all_reduce", "reduce_scatter"):
        if reduction not in REDUCTIONS:
            raise ValidationError(f"{where}: op must be one of {REDUCTIONS}, got {reduction!r}")
        if reduction == "avg" and dt.kind != "f":
            raise ValidationError(f"{where}: op 'avg' needs a floating dtype, got {dt}")
    else:
        reduction = None
    takes_source, takes_target, peer_name, takes_source_peer = _ARGUMENTS[operation]
    for name, value, wanted in (("source", source, takes_source), ("target", target, takes_target)):
        if wanted and value is None:
            raise ValidationError(f"{where}: give the {name}")
        if wanted is False and value is not None:
            raise ValidationError(f"{where}: takes no {name}")
    for name, value, wanted in ((peer_name, peer, peer_name is not None), ("source_peer", source_peer,
                                                                           takes_source_peer)):
        if wanted and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < size):
            raise ValidationError(f"{where}: {name} must be a rank in 0..{size - 1}, got {value!r}")
    if operation == "broadcast" and rank == peer and source is None:
        raise ValidationError(f"{where}: rank {rank} is the root: give the source it broadcasts")
    if operation in ("send", "recv", "send_recv") and rank in (peer, source_peer):
        raise ValidationError(f"{where}: rank {rank} cannot exchange with itself; copy_buffer does that")
    for name, r in (("source", source), ("target", target)):
        if r is not None and not r.bounded:
            raise ValidationError(f"{where}: the {name} is a slot of unknown length; give it one: "
                                  f"hal.slot(i, offset, length)")
        if r is not None and r.nbytes % dt.itemsize:
            raise ValidationError(f"{where}: the {name} range of {r.nbytes} bytes is not a whole number of "
                                  f"{dt} elements")
    sent = source.nbytes // dt.itemsize if source is not None else 0
    got = target.nbytes // dt.itemsize if target is not None else 0
    # The elements per rank, and what each range must hold.
    count, need = {"all_reduce": (sent, (sent, sent)), "all_gather": (sent, (sent, sent * size)),
                   "reduce_scatter": (got, (got * size, got)), "broadcast": (got, (got, got)),
                   "send": (sent, (sent, 0)), "recv": (got, (0, got)), "send_recv": (sent, (sent, sent))}[operation]
    if count == 0:
        raise ValidationError(f"{where}: the range holds no {dt} element")
    scale = f" for a communicator of {size} ranks" if operation in ("all_gather", "reduce_scatter") else ""
    for name, r, n in (("source", source, need[0]), ("target", target, need[1])):
        if r is not None and r.nbytes != n * dt.itemsize:
            raise ValidationError(f"{where}: the {name} must hold {n} x {dt} ({n * dt.itemsize} bytes){scale}, got "
                                  f"{r.nbytes} bytes")
    if source is not None and target is not None and not same_or_disjoint(operation, _range(source),
                                                                           _range(target)):
        raise ValidationError(f"{where}: the source and target ranges overlap; they must be the same range "
                              f"(in place: all_reduce, broadcast) or disjoint")
    return (dt, count, reduction, rank, -1 if peer_name is None else peer,
            source_peer if takes_source_peer else -1)


def same_or_disjoint(operation: str, source: tuple, target: tuple) -> bool:
    """May a collective's source and target be these (key, start, end) ranges? Disjoint, or for the in-place
    operations (all_reduce, broadcast) the same range."""
    if source[0] != target[0] or source[2] <= target[1] or target[2] <= source[1]:
        return True
    return operation in ("all_reduce", "broadcast") and source[1:] == target[1:]


def _range(r: BufferRef) -> tuple:
    """(key, start, end) of a bounded reference: key is the Buffer, or the slot index."""
    return (r.buffer if r.buffer is not None else r.slot), r.offset, r.offset + r.nbytes
