"""Command records and the segment linked list.

A segment is the run of commands between two execution barriers; a command buffer is a linked list
of segments. Records are small slotted objects holding resolved references, constants and a private
copy of update data, so recording allocates one object per command and nothing else.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterable

    from hal.buffer import BufferRef
    from hal.executable import Executable, Export

READ = False
WRITE = True


class Command:
    __slots__ = ("index", "segment")
    kind = "command"

    def accesses(self) -> Iterable[tuple[BufferRef, bool]]:
        """(reference, writes?) for every range the command touches (iterate it once)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.kind} #{self.index} in segment {self.segment}>"


class Fill(Command):
    __slots__ = ("target", "pattern")
    kind = "fill"

    def __init__(self, index: int, segment: int, target: BufferRef, pattern: bytes) -> None:
        self.index, self.segment, self.target, self.pattern = index, segment, target, pattern

    def accesses(self) -> Iterable[tuple[BufferRef, bool]]:
        return ((self.target, WRITE),)


class Update(Command):
    __slots__ = ("target", "data")
    kind = "update"

    def __init__(self, index: int, segment: int, target: BufferRef, data: bytes) -> None:
        self.index, self.segment, self.target, self.data = index, segment, target, data

    def accesses(self) -> Iterable[tuple[BufferRef, bool]]:
        return ((self.target, WRITE),)


class Copy(Command):
    __slots__ = ("source", "target")
    kind = "copy"

    def __init__(self, index: int, segment: int, source: BufferRef, target: BufferRef) -> None:
        self.index, self.segment, self.source, self.target = index, segment, source, target

    def accesses(self) -> Iterable[tuple[BufferRef, bool]]:
        return ((self.source, READ), (self.target, WRITE))


class Dispatch(Command):
    __slots__ = ("executable", "export", "ordinal", "workgroups", "constants", "bindings")
    kind = "dispatch"

    def __init__(self, index: int, segment: int, executable: Executable, export: Export, ordinal: int,
                 workgroups: tuple[int, int, int], constants: tuple[Any, ...],
                 bindings: tuple[BufferRef, ...]) -> None:
        self.index, self.segment = index, segment
        self.executable, self.export, self.ordinal = executable, export, ordinal
        self.workgroups, self.constants, self.bindings = workgroups, constants, bindings

    def accesses(self) -> Iterable[tuple[BufferRef, bool]]:
        return zip(self.bindings, self.export.writes)


class Segment:
    """Commands between two barriers; `index` counts the barriers recorded before them."""

    __slots__ = ("index", "commands", "next")

    def __init__(self, index: int) -> None:
        self.index = index
        self.commands: list[Command] = []
        self.next: Segment | None = None


def constant_word(value: Any) -> int:
    """The 32-bit word a constant becomes (int32/uint32 as two's complement, float as float32 bits).

    Raises TypeError or OverflowError for anything that is not a 32-bit value.
    """
    if isinstance(value, np.generic):
        if value.dtype.itemsize != 4 or value.dtype.kind not in "iuf":
            raise TypeError(f"numpy {value.dtype} is not a 32-bit integer or float")
        return int(np.frombuffer(value.tobytes(), np.uint32)[0])
    if isinstance(value, int):
        if not -(1 << 31) <= value < (1 << 32):
            raise OverflowError(f"{value} does not fit in 32 bits")
        return value & 0xFFFFFFFF
    if isinstance(value, float):
        return struct.unpack("<I", struct.pack("<f", value))[0]
    raise TypeError(f"{type(value).__name__} is not a 32-bit constant (int, float or 32-bit numpy scalar)")


def pack_constants(values: tuple[Any, ...]) -> bytes:
    """Constants as consecutive little-endian 32-bit words: the push-constant / parameter layout."""
    return struct.pack(f"<{len(values)}I", *map(constant_word, values))
