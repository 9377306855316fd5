from libc.stdint cimport uint32_t
from libcpp.vector cimport vector

from hal.buffer cimport Buffer, BufferRef
from hal.commands cimport Command, Range
from hal.dependencies cimport Planner
from hal.program cimport Emitter, Program
from hal.races cimport RaceDetector
from hal.submit_checks cimport SubmitChecks


cdef enum:  # Recorder.phase
    INITIAL = 0
    RECORDING = 1
    ENDED = 2


cdef class Recorder:
    cdef readonly object device
    cdef readonly str mode
    cdef readonly Py_ssize_t binding_capacity
    cdef readonly str strategy
    cdef readonly str dependencies
    cdef readonly bint validate
    cdef readonly Emitter emitter  # the backend's side
    cdef readonly Py_ssize_t slots_needed  # 1 + the highest slot a command uses (after end())
    cdef readonly Py_ssize_t constant_capacity
    cdef readonly Py_ssize_t constants_needed  # 1 + the highest constant slot a dispatch uses (after end())

    # The device's limits the checks use.
    cdef object caps
    cdef Py_ssize_t max_groups_x, max_groups_y, max_groups_z, max_constant_bytes, storage_alignment
    cdef Py_ssize_t max_storage_range, fill_alignment, update_alignment, copy_alignment

    # Recording.
    cdef int phase
    cdef list sequence  # this level's commands in recording order
    cdef Py_ssize_t segment_start  # where the current segment begins in `sequence`
    cdef Py_ssize_t count, barriers
    cdef bint single_pass, uses_slot
    cdef Planner planner
    cdef RaceDetector races
    cdef uint32_t groups[3]  # a dispatch's workgroup counts, its bindings and constants as C data, written as they
    cdef vector[Range] ranges  # are checked (hal.commands.with_arguments)
    cdef vector[uint32_t] words
    cdef Program recorded  # the Program, once ended (single_pass: while recording, too)
    cdef list slot_commands
    cdef list constant_commands  # dispatches with a constant slot
    cdef dict constant_slot_types  # constant slot -> (its type, the command and constant reading it), if typed
    cdef list indirect_commands  # the indices of the dispatch_indirect commands
    cdef list region_commands  # the indices of the regions
    cdef list collective_commands  # the indices of the collectives
    cdef list nested_commands  # per execute_commands, the (start, stop) of the commands it recorded
    cdef list levels  # per open region, the enclosing level's recording state
    cdef list transients  # alloca's: hal.transients.Transient (single_pass: device buffers of their own)
    cdef object transient_plan  # hal.transients.TransientPlan, once end() placed them
    cdef object transients_of  # the command buffer whose transients this one's commands may use too (a scratch's)


    # Submission.
    cdef SubmitChecks checks  # what a submission checks (from begin())
    cdef bint ran
    cdef tuple table
    cdef object table_token
    cdef object __weakref__

    cdef bint workgroups_fit(self, tuple workgroups)
    cdef void not_recording(self, str what) except *
    cdef BufferRef check_ref(self, object r, Py_ssize_t index, str command, str name, Py_ssize_t binding, int usage)
    cdef BufferRef check_slot_ref(self, BufferRef ref, Py_ssize_t index, str command, str name, Py_ssize_t binding,
                                  int usage)
    cdef BufferRef check_parameters(self, object parameters, Py_ssize_t index, str name)
    cdef void check_static_parameters(self, BufferRef p, Py_ssize_t index, str name) except *
    cdef void add_dispatch(self, str command, object executable, object name, object workgroups, object constants,
                           object bindings, BufferRef parameters, bint dynamic) except *
    cdef void record(self, Command command, tuple refs, tuple writes) except *
