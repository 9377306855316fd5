"""Typed constants: `Export(constants=("float32", "uint32"))` says how the kernel reads each 32-bit word.

A value is converted the way the GPU reads it: an int or a numpy number for a float32 becomes that float32; an int
or numpy integer in range for an int32 or uint32 stays that integer. A float for an integer type, a string, a bool or
an out-of-range integer is refused. The converted value is a numpy scalar of the declared type, what a host kernel
receives and what every backend packs into the same word.
"""

from __future__ import annotations

from typing import Any

import numpy as np

TYPES = {"int32": np.int32, "uint32": np.uint32, "float32": np.float32}
_RANGES = {"int32": (-(1 << 31), (1 << 31) - 1), "uint32": (0, (1 << 32) - 1)}


def check_types(types: Any, what: str) -> tuple[str, ...]:
    """An Export's constant types, checked; ValueError saying what is allowed otherwise."""
    if isinstance(types, str):
        raise ValueError(f"{what}: constants takes a count or a sequence of type names, got the string {types!r}")
    names = tuple(types)
    for name in names:
        if name not in TYPES:
            raise ValueError(f"{what}: constant type {name!r} is not one of {', '.join(TYPES)}")
    return names


def convert(value: Any, type_name: str) -> np.generic:
    """`value` as the GPU reads a constant of `type_name`; TypeError or OverflowError saying why not."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{value!r} ({type(value).__name__}) is not a number")
    if type_name == "float32":
        return np.float32(value)
    if isinstance(value, (float, np.floating)):
        raise TypeError(f"{value!r} is a float; a {type_name} constant takes an integer")
    low, high = _RANGES[type_name]
    if not low <= int(value) <= high:
        raise OverflowError(f"{int(value)} is outside {type_name}'s range [{low}, {high}]")
    return TYPES[type_name](int(value))
