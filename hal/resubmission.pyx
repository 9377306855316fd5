"""The resubmission of an unchanged command buffer: a backend device's queue_execute (compiled, the hot path).

A submission with the defaults (no semaphores, no constants) of a command buffer whose backend emitter can run it
again as it is (`Emitter.resubmitted`: CUDA, one cuGraphLaunch; Vulkan, one vkQueueSubmit) is that one call after
the emitter's identity checks, which stand for the general path's. Anything else takes hal.Device.queue_execute,
which validates and calls the backend's `_queue_execute`.
"""

from hal.command_buffer cimport CommandBuffer
from hal.program cimport Emitter

from hal.device import NO_CONSTANTS, NO_SEMAPHORES, Device

# queue_execute's defaults, held in C for the identity checks. Read as module globals instead (bench in turns on an
# H200, 2026-11-29, bench/results/nvidia-h200-2026-11-29-issue43-turns.md), CUDA's resubmission of a chain of 100
# took 1.07x and 1.11x cuGraphLaunch against 1.02x and 1.06x (target <= 1.05), and Vulkan's of 1000 dispatches 1.22x
# and 0.98x (chain), 0.97x and 1.20x (fan) the reference's vkQueueSubmit against 1.08x and 0.73x, 0.82x and 0.92x
# (target <= 1.1).
cdef object no_semaphores = NO_SEMAPHORES, no_constants = NO_CONSTANTS


def queue_execute(device, command_buffer, binding_table=(), wait=NO_SEMAPHORES, signal=NO_SEMAPHORES,
                  constants=NO_CONSTANTS):
    """hal.Device.queue_execute, with the backend emitter's resubmission first (see the module's docstring). The
    emitter's checks and its driver call run without releasing the GIL, so no other thread's close() or release
    comes between them."""
    cdef Emitter emitter
    if wait is no_semaphores and signal is no_semaphores and constants is no_constants and \
            type(command_buffer) is CommandBuffer:
        emitter = (<CommandBuffer>command_buffer).emitter
        if emitter is not None and emitter.resubmitted(device, command_buffer, binding_table):
            return
    Device.queue_execute(device, command_buffer, binding_table, wait, signal, constants)
