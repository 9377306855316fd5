from hal.program cimport Program


cdef class SubmitChecks:
    cdef object device
    cdef object caps
    cdef Py_ssize_t binding_capacity
    cdef bint validate
    cdef object live_token
    cdef tuple direct_buffers
    cdef dict dispatched
    cdef tuple slot_index
    cdef Program program
    cdef list slot_commands
    cdef list collective_commands
    cdef Py_ssize_t slots_needed

    cdef void forget(self)
    cdef void ended(self, Program program, list slot_commands, list collective_commands, Py_ssize_t slots_needed)
    cdef void check_table(self, tuple table, object token, tuple last) except *
    cdef tuple index_slots(self)
    cdef tuple direct(self, tuple commands)
    cdef void check_released(self, str what, tuple commands, list collectives, object token) except *


cdef dict segments_of(commands)
cdef bint same_entries(tuple table, tuple last)
