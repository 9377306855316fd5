from cpython.long cimport PyLong_AsUnsignedLongMask
from libc.stdint cimport uint32_t, uint64_t, uintptr_t

from hal.buffer cimport BufferRef


cdef struct Range:  # a binding as a driver takes it: the buffer's handle (Buffer.handle), where it starts, its bytes
    uintptr_t handle
    uint64_t offset
    uint64_t size


cdef struct DispatchArguments:  # a dispatch's arguments as C data, followed by `bindings` Ranges and `words` words
    uint32_t groups[3]
    uint32_t bindings
    uint32_t words
    uint32_t size  # in bytes, all of it


cdef inline Range* argument_ranges(DispatchArguments* arguments) noexcept nogil:
    return <Range*>(arguments + 1)


cdef inline uint32_t* argument_words(DispatchArguments* arguments) noexcept nogil:
    return <uint32_t*>(argument_ranges(arguments) + arguments.bindings)


cdef class Command:
    cdef readonly Py_ssize_t index  # position in recording order
    cdef readonly Py_ssize_t segment  # the barriers recorded before it


cdef class Fill(Command):
    cdef readonly BufferRef target
    cdef readonly bytes pattern  # 1, 2 or 4 bytes


cdef class Update(Command):
    cdef readonly BufferRef target
    cdef readonly bytes data  # a private copy, taken at record time


cdef class Copy(Command):
    cdef readonly BufferRef source
    cdef readonly BufferRef target


cdef class Entry:
    cdef readonly object export
    cdef readonly object device  # the device the executable was loaded on
    cdef readonly Py_ssize_t ordinal  # the export's position in the executable
    cdef readonly Py_ssize_t bindings
    cdef readonly Py_ssize_t constants
    cdef readonly tuple constant_types  # the Export's (): untyped words
    cdef readonly tuple writes  # per binding: does the kernel write it?


cdef class Entries:
    cdef public dict entries  # export name -> Entry


cdef class Dispatch(Command):
    cdef readonly object executable
    cdef readonly object export
    cdef readonly Py_ssize_t ordinal  # the export's position in the executable
    cdef readonly tuple workgroups  # (x, y, z); for dispatch_indirect, the (1, 1, 1) its parameters replace
    cdef readonly tuple constants  # as given: ints, floats, 32-bit numpy scalars or ConstantSlots
    cdef readonly tuple bindings  # BufferRef per binding
    cdef readonly tuple writes  # per binding: does the kernel write it?
    cdef readonly BufferRef parameters  # dispatch_indirect: 12 bytes, the workgroup counts; None for dispatch
    cdef readonly bint dynamic  # dispatch_indirect: the counts may be written by earlier commands
    cdef DispatchArguments* arguments  # a plain dispatch's, made when recorded (see with_arguments); else NULL


cdef class Region(Command):
    cdef readonly bint loop  # while_nonzero (else if_nonzero)
    cdef readonly BufferRef condition  # the uint32 flag (4 bytes)
    cdef readonly object body  # the Program of the commands inside (their indices count from 0)
    cdef readonly tuple refs  # the flag and what the body accesses: the region's accesses as one command
    cdef readonly tuple writes


cdef class Collective(Command):
    cdef readonly object communicator
    cdef readonly str operation  # "all_reduce", "all_gather", "reduce_scatter", "broadcast", "send", "recv", ...
    cdef readonly BufferRef source  # None: it sends nothing (recv; broadcast off the root)
    cdef readonly BufferRef target  # None: it receives nothing (send)
    cdef readonly BufferRef order  # the communicator's order token on this device (hal.communicator)
    cdef readonly object dtype  # a numpy dtype
    cdef readonly Py_ssize_t count  # elements: per rank (all_gather's source, reduce_scatter's target)
    cdef readonly object reduction  # "sum", "prod", "max", "min", "avg"; None for the others
    cdef readonly int rank  # the rank of the device it was recorded on
    cdef readonly int peer  # broadcast: the root; send, recv: the other rank; send_recv: where it sends
    cdef readonly int source_peer  # send_recv: where it receives from (-1 otherwise)


cdef class Call(Command):
    cdef readonly object function  # fn(ctx): foreign work, recorded with the backend's own context (hal.calls)
    cdef readonly tuple bindings  # BufferRef per binding
    cdef readonly tuple writes  # per binding: does fn write it?
    cdef readonly tuple constants  # as given: values, or ConstantSlots resolved at each submit


cdef class Segment:
    cdef readonly Py_ssize_t index  # the barriers recorded before its commands
    cdef readonly list commands
    cdef public Segment next


cdef Fill new_fill(Py_ssize_t index, Py_ssize_t segment, BufferRef target, bytes pattern)
cdef Update new_update(Py_ssize_t index, Py_ssize_t segment, BufferRef target, bytes data)
cdef Copy new_copy(Py_ssize_t index, Py_ssize_t segment, BufferRef source, BufferRef target)
cdef Dispatch new_dispatch(Py_ssize_t index, Py_ssize_t segment, object executable, Entry entry, tuple workgroups,
                           tuple constants, tuple bindings, BufferRef parameters=*, bint dynamic=*)
cdef void hide_from_collector(Dispatch c) noexcept
cdef int with_arguments(Dispatch c, const uint32_t* groups, const Range* ranges, const uint32_t* words) except -1
cdef size_t arguments_size(Py_ssize_t bindings, Py_ssize_t words) noexcept
cdef Region new_region(Py_ssize_t index, Py_ssize_t segment, bint loop, BufferRef condition, object body, tuple refs,
                       tuple writes)
cdef Collective new_collective(Py_ssize_t index, Py_ssize_t segment, object communicator, str operation,
                               BufferRef source, BufferRef target, BufferRef order, tuple details)
cdef Call new_call(Py_ssize_t index, Py_ssize_t segment, object function, tuple bindings, tuple writes,
                   tuple constants)
cdef Segment new_segment(Py_ssize_t index)

cpdef unsigned int constant_word(object value) except? 0xFFFFFFFF


cdef inline unsigned int checked_word(object value) except? 0xFFFFFFFF:
    """The 32-bit word of a constant already checked (an int of 32 bits without a Python call)."""
    return <unsigned int>PyLong_AsUnsignedLongMask(value) if type(value) is int else constant_word(value)
