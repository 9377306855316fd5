cimport cython

from hal.buffer cimport BufferRef
from hal.recorder cimport Recorder


@cython.final  # its methods are called directly
cdef class CommandBuffer(Recorder):
    cpdef bint accepts(self, object table, object token)
    cdef void clear(self)
    cdef void release_transients(self)
    cdef BufferRef check_condition(self, object condition, str what)
    cdef void add_collective(self, str operation, object communicator, object source, object target, object dtype,
                             object reduction, object peer, object source_peer) except *
