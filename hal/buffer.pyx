"""Buffers and buffer references (compiled: the recorder reads their fields on every command).

A reference names a byte range of a buffer known at record time (`ref`) or of entry i of the binding
table given at submit (`slot`); a constant slot (`constant_slot`) stands for a dispatch constant given at
submit. References are small immutable records built once and reused; their
ranges are checked when a command uses them, so the error can name the command.
"""

import enum
from typing import Any

import numpy as np

from hal.errors import ValidationError, integer

cdef Py_ssize_t _buffers_made = 0  # the next Buffer.serial
MAX_SLOTS = 1 << 31  # binding-table and constant slots: indices and capacities stay below it


class BufferUsage(enum.IntFlag):
    """What a buffer may be used for; backends pick memory and usage flags from it (Vulkan needs them
    at creation). Commands check it: copy sources need TRANSFER_SOURCE, fill/update/copy targets
    TRANSFER_TARGET, dispatch bindings DISPATCH_STORAGE. DEFAULT allows everything."""

    TRANSFER_SOURCE = USAGE_TRANSFER_SOURCE
    TRANSFER_TARGET = USAGE_TRANSFER_TARGET
    DISPATCH_STORAGE = USAGE_DISPATCH_STORAGE
    TRANSFER = USAGE_TRANSFER_SOURCE | USAGE_TRANSFER_TARGET
    DEFAULT = USAGE_ANY


cdef class Buffer:
    """Device memory of `size` bytes, made by `Device.allocate` or `Device.upload`; commands take it whole or through
    `hal.ref`. Backends subclass it and implement `_read`, `_write`, `_free` (the backend contract, below).

    Example:
        >>> with dev.allocate(16) as buf:   # released on leaving the block
        ...     buf.write(np.arange(4, dtype=np.uint32))
        ...     buf.read(np.uint32)
        array([0, 1, 2, 3], dtype=uint32)
    """

    def __init__(self, device, size: int, usage: BufferUsage) -> None:
        self.device = device
        self.size = size
        self.usage = BufferUsage(usage)
        self.usage_bits = int(usage)
        self.released = False
        self.whole = BufferRef(self, -1, 0, size)
        global _buffers_made
        self.serial = _buffers_made
        _buffers_made += 1

    def read(self, dtype: Any = np.uint8, *, offset: int = 0, count: int | None = None) -> np.ndarray:
        """Read the buffer, after all the work submitted so far.

        Args:
            dtype: The elements' numpy type.
            offset: The first byte read.
            count: How many elements (None: as many as fit from `offset`).

        Returns:
            A fresh numpy array of `count` elements.

        Raises:
            ValidationError: The buffer was released, its device closed, or the range does not fit; or this runs
                inside a queue_host_call function of its device (the queue waits for that function).
            DeviceError: Submitted work failed and nothing has raised that failure yet (reported once).
        """
        dt = _dtype(dtype)
        self._check_live("read")
        offset = integer(offset, "offset", 0)
        if offset > self.size:
            raise ValidationError(f"read: offset {offset} is beyond the buffer's {self.size} bytes")
        if count is None:
            count = (self.size - offset) // dt.itemsize
        count = integer(count, "count", 0)
        nbytes = count * dt.itemsize
        if offset + nbytes > self.size:
            raise ValidationError(
                f"read: {count} x {dt} from offset {offset} needs {offset + nbytes} bytes; the buffer has {self.size}")
        self.device.order_host_access("read")
        return self._read(offset, nbytes).view(dt)

    def write(self, data: Any, offset: int = 0) -> None:
        """Write into the buffer, after all the work submitted so far.

        Args:
            data: A numpy array or anything with the buffer protocol.
            offset: The byte it goes to.

        Raises:
            ValidationError: The buffer was released, its device closed, or the data does not fit; or this runs
                inside a queue_host_call function of its device.
            DeviceError: Submitted work failed and nothing has raised that failure yet (nothing is written then).
        """
        self._check_live("write")
        view = bytes_view(data, "write")
        offset = integer(offset, "offset", 0)
        if offset + view.nbytes > self.size:
            raise ValidationError(
                f"write: {view.nbytes} bytes at offset {offset} end at {offset + view.nbytes}; "
                f"the buffer has {self.size}")
        self.device.order_host_access("write")
        if view.nbytes:
            self._write(offset, view)

    def release(self) -> None:
        """Free the memory once the work submitted so far no longer needs it (also what leaving a `with` block
        does). Idempotent; later use of the buffer, or of a command buffer that binds it, raises ValidationError."""
        if self.released:
            return
        self.released = True
        self.device.buffer_released()
        self._free()

    def __enter__(self) -> Buffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        return f"<{type(self).__name__} {self.size} bytes on {self.device.driver}{state}>"

    def _check_live(self, what: str) -> None:
        if self.released:
            raise ValidationError(f"{what}: the buffer was released")
        self.device.check_open()

    # The backend contract (a compiled class cannot be abstract: each refuses until a backend implements it).
    def _read(self, offset: int, nbytes: int) -> np.ndarray:
        """`nbytes` bytes from `offset` (checked) as a new uint8 array; the submitted work is done (read ordered it)."""
        raise NotImplementedError

    def _write(self, offset: int, data: memoryview) -> None:
        """Write `data` (not empty) at `offset` (checked); the submitted work is done (write ordered it)."""
        raise NotImplementedError

    def _free(self) -> None:
        """Free the memory once the work submitted until now no longer needs it (hal.lifetime)."""
        raise NotImplementedError


cdef class BufferRef:
    """A byte range of a buffer (`slot` -1), or of binding-table entry `slot` (`buffer` None). Immutable.

    `length` None means "to the end of the bound buffer" (slots only: for a buffer it is resolved here).
    `end` is offset + length, or None when only the bound buffer will tell. A negative offset or length
    is refused here; whether the range fits its buffer is checked when a command uses it.
    """

    def __init__(self, buffer: Buffer | None, slot: int, offset: int, length: int | None) -> None:
        if buffer is None:
            slot = slot_count(slot, "slot index", MAX_SLOTS - 1)
        elif slot != -1:
            raise ValidationError(f"a reference to a buffer has slot -1, got {slot!r}")
        offset = integer(offset, "reference offset", 0)
        if length is None and buffer is not None:
            length = buffer.size - offset
        self.buffer = buffer
        self.slot = slot
        self.offset = offset
        self.bounded = length is not None
        self.nbytes = integer(length, "reference length", 0) if self.bounded else 0

    @property
    def length(self) -> int | None:
        """Bytes, or None: to the end of the bound buffer."""
        return self.nbytes if self.bounded else None

    @property
    def end(self) -> int | None:
        """offset + length, or None when the bound buffer decides."""
        return self.offset + self.nbytes if self.bounded else None

    def __repr__(self) -> str:
        where = f"slot({self.slot})" if self.buffer is None else repr(self.buffer)
        length = f"{self.nbytes} bytes" if self.bounded else "to end"
        return f"<BufferRef {where} offset {self.offset}, {length}>"


def ref(buffer: Buffer, offset: int = 0, length: int | None = None) -> BufferRef:
    """A range of a buffer, which commands take wherever they take a buffer.

    Args:
        buffer: The `hal.Buffer`.
        offset: The first byte.
        length: How many bytes (None: to the end of the buffer).

    Returns:
        The `hal.BufferRef` of bytes [offset, offset + length).

    Raises:
        ValidationError: `buffer` is not a buffer, or the offset or length is negative or the offset past its end.
            Whether the range fits is checked when a command uses it.

    Example:
        >>> second_half = hal.ref(buf, offset=buf.size // 2)
    """
    if not isinstance(buffer, Buffer):
        raise ValidationError(f"ref: expected a hal.Buffer, got {type(buffer).__name__}")
    offset = integer(offset, "ref offset", 0)
    if length is None:
        if offset > buffer.size:
            raise ValidationError(f"ref offset {offset} is past the end of the {buffer.size}-byte buffer")
        length = buffer.size - offset
    return BufferRef(buffer, -1, offset, integer(length, "ref length", 0))


def slot(index: int, offset: int = 0, length: int | None = None) -> BufferRef:
    """A range of binding-table entry `index`: the buffer comes with each `queue_execute`.

    Args:
        index: The table entry (the command buffer needs binding_capacity > index).
        offset: The first byte of the range in the bound buffer.
        length: How many bytes (None: to the end of the bound buffer).

    Returns:
        A `hal.BufferRef` whose `slot` is `index`.

    Raises:
        ValidationError: The index, offset or length is negative (or the index too large). The range is checked
            against the bound buffer at submit.

    Example:
        >>> cb = dev.create_command_buffer(mode="reusable", binding_capacity=1)
        >>> with cb:
        ...     cb.fill_buffer(hal.slot(0), np.uint32(3))
        >>> dev.queue_execute(cb, binding_table=(buf,))
    """
    index = slot_count(index, "slot index", MAX_SLOTS - 1)
    offset = integer(offset, "slot offset", 0)
    return BufferRef(None, index, offset, None if length is None else integer(length, "slot length", 0))


cdef class ConstantSlot:
    """A dispatch constant given at each queue_execute: entry `index` of its `constants`. Immutable."""

    def __init__(self, index: int) -> None:
        self.index = slot_count(index, "constant slot index", MAX_SLOTS - 1)

    def __eq__(self, other: object) -> bool:
        return type(other) is ConstantSlot and (<ConstantSlot>other).index == self.index

    def __hash__(self) -> int:
        return hash((ConstantSlot, self.index))

    def __repr__(self) -> str:
        return f"hal.constant_slot({self.index})"


def constant_slot(index: int) -> ConstantSlot:
    """A dispatch constant whose value comes with each submit: entry `index` of `queue_execute`'s `constants`.

    Args:
        index: The entry (the command buffer needs constant_capacity > index).

    Returns:
        The `hal.ConstantSlot`, which `dispatch` takes among its constants.

    Raises:
        ValidationError: The index is negative or too large.
    """
    return ConstantSlot(index)


def slot_count(value: Any, what: str, maximum: int) -> int:
    """A slot index or capacity: an integer from 0 to `maximum` (the compiled records hold it in a C integer)."""
    value = integer(value, what, 0)
    if value > maximum:
        raise ValidationError(f"{what} {value} is too large: at most {maximum}")
    return value


def _dtype(dtype: Any) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except (TypeError, ValueError) as e:
        raise ValidationError(f"not a numpy dtype: {dtype!r}") from e
    if dt.itemsize == 0 or dt.hasobject:
        raise ValidationError(f"read: {dt} has no fixed-size binary layout; use a numeric dtype")
    return dt


def bytes_view(data: Any, what: str) -> memoryview:
    """A flat, contiguous byte view of bytes-like or ndarray `data` (copied only when it is strided)."""
    if isinstance(data, np.ndarray):
        if data.dtype.hasobject:
            raise ValidationError(f"{what}: an array of Python objects has no binary layout")
        return memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8))
    try:
        view = memoryview(data)
    except TypeError as e:
        raise ValidationError(f"{what}: expected bytes-like data or a numpy array, got {type(data).__name__}") from e
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    return view.cast("B") if view.ndim != 1 or view.format != "B" else view
