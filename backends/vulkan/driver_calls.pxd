from backends.vulkan.khronos cimport PFN_vkVoidFunction, VkDevice, VkResult


cdef PFN_vkVoidFunction entry(VkDevice device, const char* name) except NULL
cdef void check(VkResult result, str call) except *
