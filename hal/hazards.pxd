cimport cython
from libcpp.unordered_map cimport unordered_map
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from hal.commands cimport Command
from hal.program cimport Program


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
    SPARE_COMMANDS = 1 << 14  # the most commands the spare HazardTracker keeps room for (give_back_tracker)


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


cdef HazardTracker take_tracker()
cdef void give_back_tracker(HazardTracker tracker) noexcept
