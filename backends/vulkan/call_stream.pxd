cimport cython
from libc.stdint cimport uint32_t, uint64_t
from libcpp.atomic cimport atomic
from libcpp.condition_variable cimport condition_variable
from libcpp.deque cimport deque
from libcpp.mutex cimport mutex
from libcpp.vector cimport vector

from backends.vulkan.calls cimport Calls, DeviceCommands
from backends.vulkan.khronos cimport VkCommandBuffer, VkWriteDescriptorSet


cdef enum Kind:
    ENCODE_DISPATCH
    DISPATCH_INDIRECT
    FILL_BUFFER
    UPDATE_BUFFER
    COPY_BUFFER
    PIPELINE_BARRIER


cdef struct Call:  # one vkCmd* call and its arguments, as StreamedCalls writes them (see replay)
    Kind kind
    VkCommandBuffer cb
    void* first  # a pipeline or a buffer
    void* second  # a Bound, a copy's target buffer, a barrier
    uint64_t a, b, c  # a layout, offsets, sizes, words, stages, flags
    size_t data  # where its arguments or bytes start in the chunk's data


cdef cppclass Chunk:
    vector[Call] calls  # CHUNK_CALLS of them, `count` written
    size_t count
    vector[uint64_t] data  # dispatches' arguments and update data, each 8-byte aligned; `used` written
    size_t used


cdef class CallStream:
    cdef DeviceCommands fn
    cdef mutex lock
    cdef condition_variable wake  # the worker waits here for a chunk
    cdef condition_variable replayed  # drain() waits here for the worker
    cdef deque[Chunk*] pending  # pushed, not yet taken by the worker
    cdef vector[Chunk*] spare  # replayed, for reuse
    cdef Chunk* current  # being written by the recording thread (holding the GIL)
    cdef atomic[uint64_t] pushed  # chunks pushed so far
    cdef atomic[uint64_t] done  # chunks replayed so far
    cdef bint sleeping  # the worker waits on `wake` (under `lock`)
    cdef bint stopping
    cdef bint kicked  # start() woke the worker for a recording's first chunk
    cdef object thread
    cdef VkWriteDescriptorSet write  # the worker's, for push descriptors

    cdef Chunk* chunk(self) except NULL
    cdef int push(self) except -1
    cdef void run(self) noexcept nogil
    cdef void spin(self) noexcept nogil
    cdef void replay(self, Chunk* chunk) noexcept nogil


@cython.final  # its own methods called directly (and inlined by the compiler), not through the vtable
cdef class StreamedCalls(Calls):
    cdef CallStream stream

    cdef Call* add(self, Kind kind) except NULL
    cdef size_t copy(self, const void* source, size_t nbytes) except? 0
    cdef int added(self) except -1
