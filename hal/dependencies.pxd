from libcpp.vector cimport vector

from hal.buffer cimport Buffer, BufferRef
from hal.commands cimport Command
from hal.program cimport Program


cdef class Planner:
    cdef readonly Program program
    cdef bint hazards
    cdef bint single_pass
    cdef Py_ssize_t lanes  # the lane limit (0: none)
    cdef HazardTracker tracker  # hazards mode
    cdef dict interned  # hazards mode: predecessor tuple -> group
    # Barriers mode: the segment of the last command, where it started, and the group its commands wait on.
    cdef Py_ssize_t dag_segment
    cdef Py_ssize_t open_start
    cdef Py_ssize_t open_group
    # Barrier placement: the first command after the last barrier, and the last command's segment.
    cdef Py_ssize_t fence
    cdef Py_ssize_t barrier_segment
    # Layout: the segment being laid out, its first command and lane width; group -> join node.
    cdef Py_ssize_t layout_segment
    cdef Py_ssize_t layout_start
    cdef Py_ssize_t layout_width
    cdef dict joins
    cdef vector[Py_ssize_t] uses  # deferred: commands per group

    cpdef add(self, Command command)
    cpdef plan(self, list segments)
    cdef void dag(self, Command command)
    cdef void lay_out(self, Command command, Py_ssize_t size, bint shared)
    cdef void fan_in(self, Py_ssize_t group, vector[Py_ssize_t]& deps, bint shared)


cdef class HazardTracker:
    cdef dict maps
    cdef bint shared
    cdef list segment_of
    cdef vector[Py_ssize_t] stamp
    cdef list touched

    cdef tuple add(self, Command command, Program program)
    cdef tuple _reduce(self, dict found, Py_ssize_t index, Program program)


cdef class RaceDetector:
    cdef dict ranges
    cdef set quiet

    cpdef reset(self)
    cpdef rebuild(self, list segment, tuple table=*)
    cpdef add(self, Command command, tuple refs, tuple writes, list segment, tuple table=*)


cpdef tuple access_range(BufferRef ref, tuple table=*)
cpdef tuple refs_and_writes(Command command)
