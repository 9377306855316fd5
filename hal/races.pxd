cimport cython
from cpython.object cimport PyObject
from libcpp.unordered_map cimport unordered_map
from libcpp.unordered_set cimport unordered_set
from libcpp.vector cimport vector

from hal.commands cimport Command


cdef enum:
    SPARE_KEYS = 256  # the most keys the spare RaceDetector keeps room for (give_back_race_detector)
    SPARE_RANGES = 1 << 14  # and the most ranges


cdef struct KeyRanges:  # RaceDetector: one key's unions of written (ws, we) and read (rs, re) ranges, each as
    # sorted disjoint intervals; `quiet` lists the key's references in RaceDetector.quiet
    vector[Py_ssize_t] ws, we, rs, re
    vector[PyObject*] quiet


@cython.final  # its methods are called directly
cdef class RaceDetector:
    cdef unordered_map[Py_ssize_t, Py_ssize_t] index  # key -> its entry in `keys`
    cdef vector[KeyRanges] keys  # entries [0, used) are the segment's; the others keep their memory
    cdef Py_ssize_t used
    cdef unordered_set[PyObject*] quiet  # references read with no write of the segment overlapping them
    cdef list held  # the references in `quiet`, held until reset(): one pointer there never outlives its object

    cpdef reset(self)
    cpdef rebuild(self, list commands, Py_ssize_t first=*, tuple table=*)
    cdef int add(self, Command command, tuple refs, tuple writes, list commands, Py_ssize_t first=*,
                 tuple table=*) except -1


cdef RaceDetector take_race_detector()
cdef void give_back_race_detector(RaceDetector detector) except *
