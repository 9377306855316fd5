from libcpp.map cimport map
from libcpp.unordered_map cimport unordered_map
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
    # Hazards mode: predecessors (ascending) -> group; per command, the group of it alone (-1: none yet).
    cdef map[vector[Py_ssize_t], Py_ssize_t] interned
    cdef vector[Py_ssize_t] lone_group
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


cdef struct Access:
    Py_ssize_t buffer  # Buffer.serial; -1: a slot
    Py_ssize_t start
    Py_ssize_t end
    bint write


cdef struct Range:
    Py_ssize_t map  # an _AccessMap's ident
    Py_ssize_t start
    Py_ssize_t end


cdef class HazardTracker:
    cdef list maps  # every _AccessMap made, by ident: one per buffer, then the shared one
    cdef unordered_map[Py_ssize_t, Py_ssize_t] map_of  # Buffer.serial -> ident of its map (until shared)
    cdef bint shared  # a slot reference appeared: every range is in maps[universe]
    cdef Py_ssize_t universe
    cdef Py_ssize_t current  # the command being added
    # Per command: its segment, the reduction's visit mark, and its accesses
    # touches[touch_start[i]:touch_start[i + 1]].
    cdef vector[Py_ssize_t] segment_of
    cdef vector[Py_ssize_t] stamp
    cdef vector[Py_ssize_t] touch_start
    cdef vector[Range] touches
    # The command being added: its accesses, and its candidates in the order found, each with the ranges it
    # alone last wrote; found_by[c] is the command that last found c, at position found_at[c].
    cdef vector[Access] accesses
    cdef vector[Py_ssize_t] found
    cdef vector[vector[Range]] regions
    cdef vector[Py_ssize_t] found_by
    cdef vector[Py_ssize_t] found_at
    cdef vector[Py_ssize_t] seen  # per command: the mark of the last `unique` call that met it
    cdef Py_ssize_t marks
    cdef vector[char] dropped  # prune_read_writers: per candidate
    cdef vector[Py_ssize_t] stack  # reduce: the search
    cdef vector[Py_ssize_t] kept_writers  # _AccessMap.record: the lists of a written range
    cdef vector[Py_ssize_t] kept_readers
    cdef vector[Py_ssize_t] preds  # the result: the last command's predecessors, ascending

    cdef int add(self, Command command, Program program) except -1
    cdef _AccessMap map_for(self, Py_ssize_t buffer)
    cdef void share(self)
    cdef Py_ssize_t candidate(self, Py_ssize_t command) except -1
    cdef int unique(self, vector[Py_ssize_t]& commands) except -1
    cdef int prune_read_writers(self) except -1
    cdef bint touches_any(self, Py_ssize_t command, vector[Range]& ranges) noexcept
    cdef int reduce(self, Py_ssize_t index, Program program) except -1


cdef struct Piece:
    Py_ssize_t start
    Py_ssize_t end
    Py_ssize_t floor  # the segment of the last write that covered it (see _AccessMap)
    vector[Py_ssize_t] writers
    vector[Py_ssize_t] readers


cdef class _AccessMap:
    cdef Py_ssize_t ident  # its position in HazardTracker.maps
    cdef vector[Piece] pieces

    cdef int collect(self, Py_ssize_t start, Py_ssize_t end, bint write, Py_ssize_t segment,
                     HazardTracker tracker) except -1
    cdef int record(self, Py_ssize_t start, Py_ssize_t end, bint write, Py_ssize_t index, Py_ssize_t segment,
                    HazardTracker tracker) except -1
    cdef void absorb(self, _AccessMap other)
    cdef Py_ssize_t split(self, Py_ssize_t x) except -1
    cdef Py_ssize_t first_ending_after(self, Py_ssize_t x) noexcept


cdef class RaceDetector:
    cdef dict ranges
    cdef set quiet

    cpdef reset(self)
    cpdef rebuild(self, list segment, tuple table=*)
    cpdef add(self, Command command, tuple refs, tuple writes, list segment, tuple table=*)


cpdef tuple access_range(BufferRef ref, tuple table=*)
cpdef tuple refs_and_writes(Command command)
