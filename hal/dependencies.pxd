cimport cython
from libcpp.map cimport map
from libcpp.vector cimport vector

from hal.commands cimport Command
from hal.hazards cimport HazardTracker
from hal.program cimport Program


@cython.final  # its methods are called directly
cdef class Planner:
    cdef readonly Program program
    cdef bint hazards
    cdef bint single_pass
    cdef bint layout_now  # lay the graph out while planning (else on first use: Program.need_layout)
    cdef bint after_earlier, only_segment  # deferred, hazards mode: the segment being planned has non-empty
    # segments before it; it is the only non-empty one
    cdef Py_ssize_t lanes  # the lane limit (0: none)
    cdef HazardTracker tracker  # hazards mode
    # Hazards mode: predecessors (ascending) -> group; per command, the group of it alone (-1: none yet).
    cdef map[vector[Py_ssize_t], Py_ssize_t] interned
    cdef vector[Py_ssize_t] lone_group
    # Barriers mode: the segment of the last command, where it started, and the group its commands wait on.
    cdef Py_ssize_t dag_segment
    cdef Py_ssize_t open_start
    cdef Py_ssize_t open_group
    cdef vector[Py_ssize_t] previous  # scratch: the previous segment's commands, kept to reuse its memory
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
    cpdef plan(self, tuple commands)
    cpdef Program finish(self, tuple commands, dict slot_users, Py_ssize_t slots_needed, dict constant_users,
                         Py_ssize_t constants_needed, tuple indirect=*, tuple regions=*, tuple collectives=*,
                         tuple nested=*)
    cdef void lay_out_program(self) except *
    cdef void lay_out_segments(self, tuple commands) except *
    cdef int dag(self, Command command) except -1
    cdef int lay_out(self, Command command, Py_ssize_t size, bint shared) except -1
    cdef int fan_in(self, Py_ssize_t group, vector[Py_ssize_t]& deps, bint shared) except -1
