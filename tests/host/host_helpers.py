"""Helpers of the host backend tests."""

from __future__ import annotations

import hal


def logger(dev, log, bindings=0):
    """An executable whose kernel appends constants[0] to `log`: shows the order the host runs dispatches."""
    def kernel(ctx):
        log.append(ctx.constants[0])

    source = hal.ExecutableSource.python({"log": kernel}, [hal.Export("log", bindings=bindings, constants=1)])
    return dev.load_executable(source)
