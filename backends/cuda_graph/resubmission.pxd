cimport cython


@cython.final
cdef class Resubmission:
    cdef readonly object token
