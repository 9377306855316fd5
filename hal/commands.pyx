"""Command records and the segment linked list (compiled: one record is made per recorded command).

A segment is the run of commands between two execution barriers; a command buffer is a linked list
of segments. Records are typed objects holding resolved references, constants and a private copy of
update data, so recording allocates one object per command and nothing else.
"""

import struct

import numpy as np

READ = False
WRITE = True


cdef class Command:
    """One recorded command; `kind` names it ("fill", "update", "copy", "dispatch")."""

    kind = "command"

    def accesses(self):
        """(reference, writes?) for every range the command touches."""
        raise NotImplementedError

    def __repr__(self):
        return f"<{self.kind} #{self.index} in segment {self.segment}>"


cdef class Fill(Command):
    kind = "fill"

    def __init__(self, Py_ssize_t index, Py_ssize_t segment, BufferRef target, bytes pattern):
        self.index, self.segment, self.target, self.pattern = index, segment, target, pattern

    def accesses(self):
        return ((self.target, WRITE),)


cdef class Update(Command):
    kind = "update"

    def __init__(self, Py_ssize_t index, Py_ssize_t segment, BufferRef target, bytes data):
        self.index, self.segment, self.target, self.data = index, segment, target, data

    def accesses(self):
        return ((self.target, WRITE),)


cdef class Copy(Command):
    kind = "copy"

    def __init__(self, Py_ssize_t index, Py_ssize_t segment, BufferRef source, BufferRef target):
        self.index, self.segment, self.source, self.target = index, segment, source, target

    def accesses(self):
        return ((self.source, READ), (self.target, WRITE))


cdef class Dispatch(Command):
    kind = "dispatch"

    def __init__(self, Py_ssize_t index, Py_ssize_t segment, executable, export, Py_ssize_t ordinal,
                 tuple workgroups, tuple constants, tuple bindings):
        self.index, self.segment = index, segment
        self.executable, self.export, self.ordinal = executable, export, ordinal
        self.workgroups, self.constants, self.bindings = workgroups, constants, bindings
        self.writes = export.writes

    def accesses(self):
        return tuple(zip(self.bindings, self.writes))


cdef class Segment:
    """Commands between two barriers; `index` counts the barriers recorded before them."""

    def __init__(self, Py_ssize_t index):
        self.index = index
        self.commands = []
        self.next = None


cpdef unsigned int constant_word(object value) except? 0xFFFFFFFF:
    """The 32-bit word a constant becomes (int32/uint32 as two's complement, float as float32 bits).

    Raises TypeError or OverflowError for anything that is not a 32-bit value.
    """
    if type(value) is int:
        if not -(1 << 31) <= value < (1 << 32):
            raise OverflowError(f"{value} does not fit in 32 bits")
        return <unsigned int>(value & 0xFFFFFFFF)
    if isinstance(value, np.generic):
        if value.dtype.itemsize != 4 or value.dtype.kind not in "iuf":
            raise TypeError(f"numpy {value.dtype} is not a 32-bit integer or float")
        return int(np.frombuffer(value.tobytes(), np.uint32)[0])
    if isinstance(value, int):  # an int subclass (bool, IntEnum)
        return constant_word(int(value))
    if isinstance(value, float):
        return struct.unpack("<I", struct.pack("<f", value))[0]
    raise TypeError(f"{type(value).__name__} is not a 32-bit constant (int, float or 32-bit numpy scalar)")


def pack_constants(values):
    """Constants as consecutive little-endian 32-bit words: the push-constant / parameter layout."""
    return struct.pack(f"<{len(values)}I", *[constant_word(v) for v in values])
