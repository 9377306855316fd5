"""Kernels shared by the tests: exact uint32 arithmetic, so every backend must agree to the bit.

Each kernel handles `n` = constants[0] elements; invocations past n do nothing, as on a GPU.
"""

from __future__ import annotations

import numpy as np

import hal

WORKGROUP = 64


def _add(ctx):
    n = ctx.constants[0]
    out = ctx.binding(2, np.uint32)
    out[:n] = ctx.binding(0, np.uint32)[:n] + ctx.binding(1, np.uint32)[:n]


def _scale(ctx):
    n, k = ctx.constants[0], ctx.constants[1]
    x = ctx.binding(0, np.uint32)
    x[:n] = x[:n] * np.uint32(k)


def _xor_copy(ctx):
    n, k = ctx.constants[0], ctx.constants[1]
    out = ctx.binding(1, np.uint32)
    out[:n] = ctx.binding(0, np.uint32)[:n] ^ np.uint32(k)


EXPORTS = (
    hal.Export("add", bindings=3, constants=1, workgroup_size=WORKGROUP, readonly=(0, 1)),
    hal.Export("scale", bindings=1, constants=2, workgroup_size=WORKGROUP),
    hal.Export("xor_copy", bindings=2, constants=2, workgroup_size=WORKGROUP, readonly=(0,)),
)

HOST = hal.ExecutableSource.python({"add": _add, "scale": _scale, "xor_copy": _xor_copy}, EXPORTS)

SOURCE = hal.ExecutableSource.multi(host=HOST)


def reference(name: str, constants: tuple[int, ...], arrays: list[np.ndarray]) -> None:
    """Apply kernel `name` to uint32 numpy arrays in place: the sequential meaning of a dispatch."""
    n = constants[0]
    if name == "add":
        arrays[2][:n] = arrays[0][:n] + arrays[1][:n]
    elif name == "scale":
        arrays[0][:n] = arrays[0][:n] * np.uint32(constants[1])
    elif name == "xor_copy":
        arrays[1][:n] = arrays[0][:n] ^ np.uint32(constants[1])
    else:
        raise KeyError(name)


def groups(n: int) -> tuple[int, int, int]:
    """Workgroups covering n elements."""
    return (max(1, -(-n // WORKGROUP)), 1, 1)
