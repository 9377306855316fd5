from hal.buffer cimport BufferRef
from hal.commands cimport Collective, Command


cdef extern from *:
    """
    #define HAL_OPEN_END (((Py_ssize_t)1) << 62)
    """
    # The open end of a slot range whose length only the bound buffer will tell (a C constant).
    const Py_ssize_t OPEN_END "HAL_OPEN_END"


cpdef tuple access_range(BufferRef ref, tuple table=*)
cpdef tuple refs_and_writes(Command command)
cdef tuple collective_accesses(Collective c)
cdef tuple slot_users(list slot_commands, list constant_commands)


cdef inline Py_ssize_t needed(dict users):
    """How many slots a table (or constants) must hold for `users` (slot_users' answer): 1 + the highest slot used."""
    return max(users) + 1 if users else 0
