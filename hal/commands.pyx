"""Command records and the segment linked list (compiled: one record is made per recorded command).

A segment is the run of commands between two execution barriers; CommandBuffer.segments() shows a
recording as a linked list of them. Records are typed objects holding resolved references, constants and a
private copy of update data. The recorder keeps them in one list, and a barrier makes no object: every object
recording makes is one more for Python's cyclic garbage collector to pass over.

A dispatch whose record reaches only numbers, executables and device buffers is hidden from that collector
(`hide_from_collector`): it and its bindings then cost no pass at each young collection (what that saves:
bench/README.md). Nothing such a record reaches holds a command buffer or a Program, except a device's
queue while it runs them, so no reference cycle can pass through it, and reference counting frees it with its
command buffer. A transient's device is its command buffer, so a record that binds a transient stays tracked.

Such a record that binds only device buffers also holds its arguments as C data (`DispatchArguments`: workgroup
counts, each binding's handle, offset and length, the constants' words), written by the recorder as it checks them,
for a backend that reads them (hal.program.Emitter.reads_arguments). It reads them without a Python object, and so
without the GIL: the Vulkan backend's worker thread encodes them (backends.vulkan.call_stream), where the recording
thread would otherwise walk the record's tuples again.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.math cimport isinf
from libc.string cimport memcpy

from hal.buffer cimport ConstantSlot

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void* op) noexcept

import enum
import struct

import numpy as np

READ = False
WRITE = True
cdef tuple _NUMPY_WORD_TYPES = (np.float32, np.int32, np.uint32)  # constants whose bytes are their word


class CommandKind(str, enum.Enum):
    """What a recorded command does: `Command.kind`. Each kind is also the string of its name ("fill", ...), so
    `command.kind == "fill"` holds too, and a message shows the name."""

    FILL = "fill"
    UPDATE = "update"
    COPY = "copy"
    DISPATCH = "dispatch"
    WHILE_NONZERO = "while_nonzero"
    IF_NONZERO = "if_nonzero"
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    BROADCAST = "broadcast"
    SEND = "send"
    RECV = "recv"
    SEND_RECV = "send_recv"
    CALL = "call"

    def __str__(self) -> str:
        return self.value

    __format__ = str.__format__


cdef class Command:
    """One recorded command; `kind` (a CommandKind) says what it does."""

    def accesses(self):
        """(reference, writes?) for every range the command touches."""
        raise NotImplementedError

    def __repr__(self):
        return f"<{self.kind} #{self.index} in segment {self.segment}>"


cdef class Fill(Command):
    kind = CommandKind.FILL

    def accesses(self):
        return ((self.target, WRITE),)


cdef class Update(Command):
    kind = CommandKind.UPDATE

    def accesses(self):
        return ((self.target, WRITE),)


cdef class Copy(Command):
    kind = CommandKind.COPY

    def accesses(self):
        return ((self.source, READ), (self.target, WRITE))


cdef class Dispatch(Command):
    """A dispatch; with `parameters`, a dispatch_indirect, whose workgroup counts are read from there."""

    kind = CommandKind.DISPATCH

    def __dealloc__(self):
        PyMem_Free(self.arguments)

    def accesses(self):
        accessed = tuple(zip(self.bindings, self.writes))
        return accessed if self.parameters is None else accessed + ((self.parameters, READ),)

    @property
    def c_arguments(self):
        """The arguments held as C data (see the module's docstring), as ((x, y, z), ((handle, offset, length), ...),
        (word, ...)); None for a dispatch that holds none."""
        if self.arguments == NULL:
            return None
        cdef Range* ranges = argument_ranges(self.arguments)
        cdef uint32_t* words = argument_words(self.arguments)
        return (tuple([self.arguments.groups[i] for i in range(3)]),
                tuple([(ranges[i].handle, ranges[i].offset, ranges[i].size) for i in range(self.arguments.bindings)]),
                tuple([words[i] for i in range(self.arguments.words)]))


cdef class Region(Command):
    """A region: the commands of `body` (a Program) run while (or if) the uint32 at `condition` is non-zero,
    checked before each iteration. To the commands around it, it is one command accessing what its body does."""

    @property
    def kind(self):
        return CommandKind.WHILE_NONZERO if self.loop else CommandKind.IF_NONZERO

    def accesses(self):
        return tuple(zip(self.refs, self.writes))


cdef class Collective(Command):
    """A collective operation of `communicator` (hal.communicator): reads `source`, writes `target`, and writes
    the communicator's order token, which keeps one communicator's collectives in recording order."""

    @property
    def kind(self):
        return CommandKind(self.operation)

    def accesses(self):
        accessed = () if self.source is None else ((self.source, READ),)
        accessed += () if self.target is None else ((self.target, WRITE),)
        return accessed + ((self.order, WRITE),)


cdef class Call(Command):
    """Foreign work (a library's): `function(ctx)` records it with the backend's own recording context, over
    `bindings`, of which it writes those `writes` says, with `constants` (hal.calls)."""

    kind = CommandKind.CALL

    def accesses(self):
        return tuple(zip(self.bindings, self.writes))

    def constant_values(self, tuple slot_values) -> tuple:
        """Its constants as its function sees them: each constant slot replaced by the submission's value in
        `slot_values`."""
        return tuple([slot_values[(<ConstantSlot>v).index] if type(v) is ConstantSlot else v for v in self.constants])


cdef class Entry:
    """What the recorder needs of one export of a loaded executable, as typed fields (its device too: the recorder
    checks a dispatch's executable belongs to its device there): `Executable.entries` maps each export's name to
    one."""

    def __init__(self, export, Py_ssize_t ordinal, device):
        self.export = export
        self.device = device
        self.ordinal = ordinal
        self.bindings = export.bindings
        self.constants = export.constants
        self.constant_types = export.constant_types
        self.writes = tuple([i not in export.readonly for i in range(export.bindings)])

    def __repr__(self):
        return f"<Entry {self.ordinal}: {self.export!r}>"


@cython.auto_pickle(False)  # a copy (of an Executable) would be a second owner of its device objects
cdef class Entries:
    """What the recorder reads of a loaded executable, as a typed field: `entries` maps each export's name to its Entry
    (empty once released). hal.executable.Executable derives from it."""


cdef class Segment:
    """Commands between two barriers; `index` counts the barriers recorded before them (each of the commands'
    `segment`). CommandBuffer.segments() makes them when asked."""


# Records are made only by the recorder, which has checked every field: these set them without a Python call.
cdef Fill new_fill(Py_ssize_t index, Py_ssize_t segment, BufferRef target, bytes pattern):
    cdef Fill c = Fill.__new__(Fill)
    c.index, c.segment, c.target, c.pattern = index, segment, target, pattern
    return c


cdef Update new_update(Py_ssize_t index, Py_ssize_t segment, BufferRef target, bytes data):
    cdef Update c = Update.__new__(Update)
    c.index, c.segment, c.target, c.data = index, segment, target, data
    return c


cdef Copy new_copy(Py_ssize_t index, Py_ssize_t segment, BufferRef source, BufferRef target):
    cdef Copy c = Copy.__new__(Copy)
    c.index, c.segment, c.source, c.target = index, segment, source, target
    return c


cdef Dispatch new_dispatch(Py_ssize_t index, Py_ssize_t segment, object executable, Entry entry, tuple workgroups,
                           tuple constants, tuple bindings, BufferRef parameters=None, bint dynamic=False):
    cdef Dispatch c = Dispatch.__new__(Dispatch)
    c.index, c.segment = index, segment
    c.executable, c.export, c.ordinal = executable, entry.export, entry.ordinal
    c.workgroups, c.constants, c.bindings, c.writes = workgroups, constants, bindings, entry.writes
    c.parameters, c.dynamic = parameters, dynamic
    return c


cdef void hide_from_collector(Dispatch c) noexcept:
    """Untrack `c` and its bindings tuple: for a record of plain constants that binds no transient (see above)."""
    PyObject_GC_UnTrack(<void*>c)
    PyObject_GC_UnTrack(<void*>c.bindings)


cdef int with_arguments(Dispatch c, const uint32_t* groups, const Range* ranges,
                        const uint32_t* words) except -1:
    """Give `c` its arguments as C data, from its workgroup counts' `groups`, its bindings' `ranges` and its constants'
    `words`, which the recorder wrote as it checked them: for a dispatch without parameters whose bindings are device
    buffers and whose constants are plain words (the recorder decides)."""
    cdef uint32_t bindings = len(c.bindings), count = len(c.constants)
    cdef size_t size = arguments_size(bindings, count)
    cdef DispatchArguments* arguments = <DispatchArguments*>PyMem_Malloc(size)
    if arguments == NULL:
        raise MemoryError()
    arguments.bindings, arguments.words, arguments.size = bindings, count, size
    memcpy(arguments.groups, groups, sizeof(arguments.groups))
    memcpy(argument_ranges(arguments), ranges, bindings * sizeof(Range))
    memcpy(argument_words(arguments), words, 4 * count)
    c.arguments = arguments
    return 0


cdef size_t arguments_size(Py_ssize_t bindings, Py_ssize_t words) noexcept:
    """The bytes of the DispatchArguments of a dispatch with these counts: a multiple of 8, as its Ranges are."""
    return (sizeof(DispatchArguments) + bindings * sizeof(Range) + 4 * words + 7) // 8 * 8


cdef Region new_region(Py_ssize_t index, Py_ssize_t segment, bint loop, BufferRef condition, object body, tuple refs,
                       tuple writes):
    cdef Region c = Region.__new__(Region)
    c.index, c.segment = index, segment
    c.loop, c.condition, c.body, c.refs, c.writes = loop, condition, body, refs, writes
    return c


cdef Collective new_collective(Py_ssize_t index, Py_ssize_t segment, object communicator, str operation,
                               BufferRef source, BufferRef target, BufferRef order, tuple details):
    """`details`: hal.communicator.check_collective's (dtype, count, reduction, rank, peer, source_peer)."""
    cdef Collective c = Collective.__new__(Collective)
    c.index, c.segment = index, segment
    c.communicator, c.operation, c.source, c.target, c.order = communicator, operation, source, target, order
    c.dtype, c.count, c.reduction, c.rank, c.peer, c.source_peer = details
    return c


cdef Call new_call(Py_ssize_t index, Py_ssize_t segment, object function, tuple bindings, tuple writes,
                   tuple constants):
    cdef Call c = Call.__new__(Call)
    c.index, c.segment = index, segment
    c.function, c.bindings, c.writes, c.constants = function, bindings, writes, constants
    return c


cdef Segment new_segment(Py_ssize_t index):
    cdef Segment s = Segment.__new__(Segment)
    s.index = index
    s.commands = []
    return s


cpdef unsigned int constant_word(object value) except? 0xFFFFFFFF:
    """The 32-bit word a constant becomes (int32/uint32 as two's complement, float as float32 bits).

    Raises TypeError or OverflowError for anything that is not a 32-bit value.
    """
    if type(value) is int:
        if not -(1 << 31) <= value < (1 << 32):
            raise OverflowError(f"{value} does not fit in 32 bits")
        return <unsigned int>(value & 0xFFFFFFFF)
    if type(value) is float:
        return _float_word(value)
    if type(value) in _NUMPY_WORD_TYPES:
        return _scalar_word(value)
    if isinstance(value, np.generic):
        if value.dtype.itemsize != 4 or value.dtype.kind not in "iuf":
            raise TypeError(f"numpy {value.dtype} is not a 32-bit integer or float")
        return int(np.frombuffer(value.tobytes(), np.uint32)[0])
    if isinstance(value, int):  # an int subclass (bool, IntEnum)
        return constant_word(int(value))
    if isinstance(value, float):  # a float subclass
        return _float_word(value)
    raise TypeError(f"{type(value).__name__} is not a 32-bit constant (int, float or 32-bit numpy scalar)")


cdef unsigned int _scalar_word(object value) except? 0xFFFFFFFF:
    """The four bytes of a 32-bit numpy scalar as they are (a NaN's payload too), through the buffer protocol: numpy's
    own calls (tobytes, frombuffer) cost thirty times this at every encoding."""
    cdef Py_buffer view
    cdef unsigned int word
    PyObject_GetBuffer(value, &view, PyBUF_SIMPLE)  # (called only for the 4-byte types of _NUMPY_WORD_TYPES)
    memcpy(&word, view.buf, sizeof(word))
    PyBuffer_Release(&view)
    return word


cdef unsigned int _float_word(double value) except? 0xFFFFFFFF:
    """The bits of `value` as a float32, rounded to nearest, as struct.pack("<f") gives them (a NaN quieted, as the C
    cast does), in C: a float constant is converted at every encoding, where struct's two calls cost ten times this."""
    cdef float single = <float>value
    cdef unsigned int word
    if isinf(single) and not isinf(value):
        raise OverflowError(f"{value} is out of a 32-bit float's range")
    memcpy(&word, &single, sizeof(word))
    return word


def pack_constants(values):
    """Constants as consecutive little-endian 32-bit words: the push-constant / parameter layout."""
    return struct.pack(f"<{len(values)}I", *[constant_word(v) for v in values])


def rebase(commands, dict placed):
    """Point the references of `commands` (and of their regions' bodies) to transients at the arena instead:
    `placed` maps id(transient) to (arena buffer, offset). The command buffer's end() calls it, before the
    backend sees the Program (hal.transients). Returns what `restore` needs to undo it."""
    cdef list moved = []
    cdef Command c
    cdef Dispatch d
    cdef Region r
    cdef Collective k
    for c in commands:
        if type(c) is Fill:
            moved.append((c, ((<Fill>c).target,)))
            (<Fill>c).target = _placed((<Fill>c).target, placed)
        elif type(c) is Update:
            moved.append((c, ((<Update>c).target,)))
            (<Update>c).target = _placed((<Update>c).target, placed)
        elif type(c) is Copy:
            moved.append((c, ((<Copy>c).source, (<Copy>c).target)))
            (<Copy>c).source = _placed((<Copy>c).source, placed)
            (<Copy>c).target = _placed((<Copy>c).target, placed)
        elif type(c) is Dispatch:
            d = <Dispatch>c
            moved.append((c, (d.bindings, d.parameters)))
            d.bindings = tuple([_placed(b, placed) for b in d.bindings])
            d.parameters = _placed(d.parameters, placed)
        elif type(c) is Region:
            r = <Region>c
            moved.append((c, (r.condition, r.refs)))
            r.condition = _placed(r.condition, placed)
            r.refs = tuple([_placed(b, placed) for b in r.refs])
            moved.extend(rebase(r.body.commands, placed))
        elif type(c) is Collective:
            k = <Collective>c
            moved.append((c, (k.source, k.target)))
            k.source = _placed(k.source, placed)
            k.target = _placed(k.target, placed)
    return moved


def restore(list moved):
    """Undo `rebase` (its result): the commands point at their transients again."""
    cdef Command c
    for c, fields in moved:
        if type(c) is Fill:
            (<Fill>c).target = fields[0]
        elif type(c) is Update:
            (<Update>c).target = fields[0]
        elif type(c) is Copy:
            (<Copy>c).source, (<Copy>c).target = fields
        elif type(c) is Dispatch:
            (<Dispatch>c).bindings, (<Dispatch>c).parameters = fields
        elif type(c) is Region:
            (<Region>c).condition, (<Region>c).refs = fields
        elif type(c) is Collective:
            (<Collective>c).source, (<Collective>c).target = fields


cdef BufferRef _placed(BufferRef ref, dict placed):
    if ref is None or ref.buffer is None:
        return ref
    where = placed.get(id(ref.buffer))
    if where is None:
        return ref
    return BufferRef(where[0], -1, where[1] + ref.offset, ref.nbytes)
