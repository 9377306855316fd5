"""A CUDA device's leave for one-launch resubmissions (compiled, so that the resubmission's check reads no Python
attribute)."""

cimport cython


@cython.final
cdef class Resubmission:
    """A device's leave for one-launch resubmissions (backends.cuda_graph.command_buffer.queue_execute): an emitter
    holding the current
    `token` may resubmit as one cuGraphLaunch; the device replaces the token (`revoke`) whenever that stops
    being safe for all of them (something to free or released, the device lost or closing). Compiled and
    referenced by every emitter, so the resubmission's check reads no Python attribute."""

    def __init__(self):
        self.token = object()

    def revoke(self) -> None:
        self.token = object()
