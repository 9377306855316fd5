cimport cython
from libcpp.map cimport map
from cpython.object cimport PyObject
from libcpp.unordered_map cimport unordered_map
from libcpp.unordered_set cimport unordered_set
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from hal.buffer cimport Buffer, BufferRef
from hal.commands cimport Command
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


cdef struct Range:
    Py_ssize_t map  # the ident of an access map (HazardTracker.maps)
    Py_ssize_t start
    Py_ssize_t end


cdef struct Touch:  # an access of a tracked command (HazardTracker.touches)
    Py_ssize_t buffer  # Buffer.serial; -1: a slot
    Range range  # in the map tracking that buffer
    bint write


cdef struct Piece:
    Py_ssize_t start
    Py_ssize_t end
    Py_ssize_t floor  # the segment of the last write that covered it (see HazardTracker)
    vector[Py_ssize_t] writers
    vector[Py_ssize_t] readers


cdef struct Wrote:  # a range that a candidate writer alone last wrote (see HazardTracker.settle)
    Py_ssize_t writer
    Range range


cdef struct Tracked:  # what HazardTracker keeps of each command
    Py_ssize_t segment
    Py_ssize_t first  # the first command of its segment
    Py_ssize_t reach  # it reaches (waits, through its predecessors) for every command in [reach, first)
    Py_ssize_t first_touch  # its accesses are touches[first_touch:end_touch]
    Py_ssize_t end_touch
    Py_ssize_t found_at  # its position among the candidates of the command being added, once settled
    Py_ssize_t visited_by  # the last command whose reduction search reached it
    Py_ssize_t mark  # the last `unique` or `settle` call that met it


cdef enum:
    RECENT = 64  # HazardTracker.recent_buffer's length, a power of two
    CHAIN_PAIRS = 64  # the most pairs of accesses HazardTracker.extends_chain compares (else the maps answer)
    SPARE_COMMANDS = 1 << 14  # the most commands the spare HazardTracker keeps room for (_give_back_tracker)
    SPARE_KEYS = 256  # the most keys the spare RaceDetector keeps room for (give_back_race_detector)
    SPARE_RANGES = 1 << 14  # and the most ranges


@cython.final  # its methods are called directly
cdef class HazardTracker:
    # Access maps by ident: disjoint pieces sorted by offset; one per buffer in order of first use, then the
    # shared one (`universe`, -1 until a slot reference appears; from then on every range goes there).
    cdef vector[vector[Piece]] maps
    cdef unordered_map[Py_ssize_t, Py_ssize_t] map_of  # Buffer.serial -> ident of its map
    # map_of's recent answers, by the serial's low bits (serials run in order of allocation): most lookups
    # then skip the hash, whose modulo costs more than the rest of an access's lookup.
    cdef Py_ssize_t recent_buffer[RECENT]
    cdef Py_ssize_t recent_map[RECENT]
    cdef vector[Py_ssize_t] map_seen  # per map: the last command that accessed it
    cdef Py_ssize_t universe
    cdef vector[Tracked] tracked  # per command
    cdef Py_ssize_t segment, segment_first  # the last command's segment and its first command
    cdef vector[Touch] touches  # every command's accesses, in recording order
    cdef Py_ssize_t applied  # the maps hold the accesses of commands [0, applied) (see add)
    # The command being added: its index; its candidates as found (repeats too), and the ranges that candidate
    # writers alone last wrote.
    cdef Py_ssize_t current
    cdef vector[Py_ssize_t] found
    cdef vector[Wrote] wrote
    cdef Py_ssize_t latest  # the latest candidate (-1: none)
    cdef vector[Py_ssize_t] preds  # the result: the predecessors of the last command added, ascending
    # Scratch space, kept to reuse its memory.
    cdef Py_ssize_t marks  # unique() and settle(): calls so far
    cdef vector[char] dropped  # settle(): per candidate
    cdef vector[Py_ssize_t] stack  # reduce(): the search
    cdef vector[pair[Py_ssize_t, Py_ssize_t]] spans  # reach_of_preds(): (end, start) of what each reaches
    cdef vector[Py_ssize_t] kept_writers  # record(): the lists of a written range
    cdef vector[Py_ssize_t] kept_readers

    cdef void reset(self) noexcept
    cdef int reserve(self, Py_ssize_t commands) except -1
    cdef int add(self, Command command, Program program, bint earlier, bint alone) except -1
    cdef inline int note(self, Py_ssize_t segment, Py_ssize_t first_touch) except -1
    cdef bint extends_chain(self, Py_ssize_t first, Py_ssize_t first_touch) noexcept
    cdef int catch_up(self) except -1
    cdef inline Py_ssize_t map_for(self, Py_ssize_t buffer) except -1
    cdef Py_ssize_t look_up_map(self, Py_ssize_t buffer) except -1
    cdef int share(self) except -1
    cdef int visit(self, Range& access, bint write, Py_ssize_t segment) except -1
    cdef inline int add_candidate(self, Py_ssize_t writer, Piece* piece, Range& access) except -1
    cdef int collect(self, Range& access, bint write, Py_ssize_t segment) except -1
    cdef int record(self, Range& access, bint write, Py_ssize_t segment) except -1
    cdef int keep_visible(self, vector[Py_ssize_t]& commands, Py_ssize_t low, Py_ssize_t high,
                          Py_ssize_t other) except -1
    cdef int unique(self, vector[Py_ssize_t]& commands) except -1
    cdef Py_ssize_t reach_of_preds(self, Py_ssize_t first) except -1
    cdef bint settle(self) except -1
    cdef bint overlaps(self, Py_ssize_t command, Range& written) noexcept
    cdef int reduce(self, Program program) except -1


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


cpdef tuple access_range(BufferRef ref, tuple table=*)
cpdef tuple refs_and_writes(Command command)


cdef RaceDetector take_race_detector()
cdef void give_back_race_detector(RaceDetector detector) except *
