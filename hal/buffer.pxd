# The fields the compiled recorder, planner and backends read without a Python attribute lookup.

from libc.stdint cimport uintptr_t


cdef enum:  # BufferUsage's flags, for compiled checks (hal.buffer.BufferUsage is made of them)
    USAGE_TRANSFER_SOURCE = 1
    USAGE_TRANSFER_TARGET = 2
    USAGE_DISPATCH_STORAGE = 4
    USAGE_ANY = 7

cdef class Buffer:
    cdef readonly object device
    cdef readonly Py_ssize_t size
    cdef readonly object usage
    cdef readonly bint released
    cdef public int usage_bits  # int(usage), for the recorder's checks
    cdef readonly BufferRef whole  # the reference to all of it
    cdef public uintptr_t handle  # the backend's: a VkBuffer, a device address (0 on the host)
    cdef readonly Py_ssize_t serial  # unique per process: integer keys for the planner's maps
    cdef object __weakref__


cdef class BufferRef:
    cdef readonly Buffer buffer  # None for a slot
    cdef readonly Py_ssize_t slot  # -1 for a buffer
    cdef readonly Py_ssize_t offset
    cdef readonly Py_ssize_t nbytes  # the length, when bounded
    cdef readonly bint bounded  # False: to the end of the bound buffer (slots only)


cdef class ConstantSlot:
    cdef readonly Py_ssize_t index  # the entry of queue_execute's constants it stands for
