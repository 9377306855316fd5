from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.stdint cimport uint32_t


cdef inline bint int_within(object value, long long low, long long high, long long* got=NULL):
    """Is `value` an int (not a subclass) from `low` to `high`? If so and `got` is given, it is set to it."""
    cdef int overflow = 0
    if type(value) is not int:
        return False
    cdef long long v = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow or not low <= v <= high:
        return False
    if got != NULL:
        got[0] = v
    return True


cdef int plain_word(object c, uint32_t* word) except -1
