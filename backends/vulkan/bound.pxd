"""The compute state one VkCommandBuffer holds as its encoding set it (a command pool's, backends.vulkan.recording),
and the counts of the calls that set it: what backends.vulkan.calls encodes a dispatch against, declared apart so
that the command pools and the calls need not know each other."""

from libc.stdint cimport uint32_t
from libc.string cimport memset
from libcpp.vector cimport vector

from hal.commands cimport Range

from backends.vulkan.khronos cimport VkBuffer, VkDescriptorBufferInfo, VkPipeline


cdef struct Counts:  # an encoding's state-setting calls, by kind
    Py_ssize_t barriers
    Py_ssize_t pipelines
    Py_ssize_t descriptor_sets
    Py_ssize_t constant_pushes
    Py_ssize_t dispatches


cdef cppclass Bound:  # the compute state one VkCommandBuffer holds as its encoding set it, and the calls that set it
    VkPipeline pipeline
    vector[VkDescriptorBufferInfo] descriptors  # the first descriptor_count set (sized: see Calls.make_room)
    vector[uint32_t] words  # the push constants: the first word_count set
    uint32_t descriptor_count
    uint32_t word_count
    bint descriptors_set
    bint words_set
    Counts counts


cdef inline void begin_state(Bound* bound) noexcept nogil:
    """A VkCommandBuffer begun: nothing bound, nothing counted."""
    bound.pipeline = NULL
    bound.descriptors_set = bound.words_set = False
    memset(&bound.counts, 0, sizeof(Counts))


cdef inline bint descriptors_differ(Bound* bound, const Range* ranges, uint32_t count) noexcept nogil:
    """Do the descriptors of `ranges` differ from those set? They are the ones set from now on: the caller sets them
    if so."""
    cdef bint differ = not bound.descriptors_set or bound.descriptor_count != count
    cdef VkDescriptorBufferInfo* info
    cdef uint32_t i
    for i in range(count):
        info = &bound.descriptors[i]
        if differ or info.buffer != <VkBuffer>ranges[i].handle or info.offset != ranges[i].offset or \
                info.range != ranges[i].size:
            differ = True
            info.buffer, info.offset, info.range = <VkBuffer>ranges[i].handle, ranges[i].offset, ranges[i].size
    bound.descriptor_count = count
    bound.descriptors_set = True
    return differ
