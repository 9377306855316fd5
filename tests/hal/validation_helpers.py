"""Helpers of the validation tests (test_*_validation.py, test_races.py, test_binding_tables.py, ...).

Every rejection is a hal.ValidationError whose message names the command index and the argument or
limit, and a rejected command leaves the command buffer as it was: the tests record a valid command
afterwards, end, submit and check the bytes (see `finish_and_check`).
"""

from __future__ import annotations

import numpy as np

import hal

MARK = 0xC0FFEE11


def recording(dev, **kwargs):
    cb = dev.create_command_buffer(**kwargs)
    cb.begin()
    return cb


def probe(dev, seen, constants=2, bindings=0):
    """An executable whose kernel appends the constants it sees to `seen`."""
    def kernel(ctx):
        seen.append(tuple(ctx.constants))
    source = hal.ExecutableSource.python({"probe": kernel},
                                         [hal.Export("probe", bindings=bindings, constants=constants)])
    return dev.load_executable(source)


def finish_and_check(dev, cb, table=(), untouched=()):
    """After a rejection: record a valid fill, end, submit and check its bytes. The rejected command must
    not have taken a command index, and the buffers in `untouched` must still be all zeros."""
    out = dev.allocate(16)
    cb.fill_buffer(out, np.uint32(MARK))
    cb.end()
    assert [c.index for c in cb.commands] == list(range(len(cb.commands)))
    dev.queue_execute(cb, binding_table=table)
    dev.synchronize()
    np.testing.assert_array_equal(out.read(np.uint32), np.full(4, MARK, np.uint32))
    for b in untouched:
        assert not b.read().any(), f"a rejected command wrote {b!r}"
