"""Capabilities: the feature and limit table of a device, queried from it and overridable by the user.

Defaults are the minimums the Vulkan specification guarantees, so code written against a default
table runs anywhere. Backends fill in what the device reports; `with_overrides` lets a user pretend a
device is smaller (or larger) than it is, e.g. to test a fallback path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from hal.errors import UnsupportedError, ValidationError, integer


@dataclasses.dataclass(frozen=True)
class Capabilities:
    supported_subgroup_operations: int = 0
    max_push_constants_size: int = 128
    max_uniform_buffer_range: int = 16384
    max_storage_buffer_range: int = 1 << 27
    max_per_stage_descriptor_storage_buffer: int = 4
    supports_storage_buffer_storage_class: bool = False
    supports_storage_buffer_8bit_access: bool = False
    supports_storage_buffer_16bit_access: bool = False
    supports_float16: bool = False
    supports_float64: bool = False
    supports_int8: bool = False
    supports_int16: bool = False
    supports_int64: bool = False
    supports_int64_atomics: bool = False  # atomics on 64-bit integers in storage buffers
    supports_push_descriptor: bool = False
    max_workgroup_count: tuple[int, int, int] = (65535, 65535, 65535)
    max_workgroup_size: tuple[int, int, int] = (128, 128, 64)
    max_workgroup_invocations: int = 128
    # Byte alignment a dispatch binding's offset needs (minStorageBufferOffsetAlignment on Vulkan).
    storage_buffer_offset_alignment: int = 256
    # Byte alignment of offsets and lengths for the transfer commands, where the backend needs one.
    fill_buffer_alignment: int = 4
    update_buffer_alignment: int = 4
    copy_buffer_alignment: int = 1
    # A kernel node may launch while the kernels it waits for finish, for exports marked early_launch
    # (CUDA's programmatic dependent launch: compute capability 9.0 and driver 12.3 or newer).
    supports_early_launch: bool = False
    # CommandBuffer.call records foreign work (a library's) with the backend's own recording context (hal.calls).
    supports_foreign_calls: bool = False

    def with_overrides(self, overrides: Mapping[str, Any] | None) -> Capabilities:
        """A copy with `overrides` applied; unknown names or wrongly typed values raise ValidationError."""
        if not overrides:
            return self
        if not isinstance(overrides, Mapping):
            raise ValidationError(f"capabilities must be a mapping of field name to value, "
                                  f"got {type(overrides).__name__}")
        fields = {f.name: f for f in dataclasses.fields(self)}
        clean: dict[str, Any] = {}
        for name, value in overrides.items():
            if name not in fields:
                raise ValidationError(f"unknown capability {name!r}; known: {', '.join(sorted(fields))}")
            clean[name] = _checked(name, getattr(self, name), value)
        return dataclasses.replace(self, **clean)

    def check_within(self, device: Capabilities, name: str) -> None:
        """Refuse a table that claims more than `device` (the real one) has: a feature it lacks, a larger
        limit, a looser alignment, subgroup operations it lacks. A GPU backend would otherwise hand its
        driver work it cannot do; overrides may only make such a device smaller."""
        for f in dataclasses.fields(self):
            mine, real = getattr(self, f.name), getattr(device, f.name)
            if isinstance(real, bool):
                looser = mine and not real
            elif isinstance(real, tuple):
                looser = any(m > r for m, r in zip(mine, real))
            elif f.name.endswith("_alignment"):
                looser = mine % real != 0
            elif f.name == "supported_subgroup_operations":
                looser = bool(mine & ~real)
            else:
                looser = mine > real
            if looser:
                raise UnsupportedError(f"capability {f.name}={mine!r} claims more than {name} has ({real!r}); "
                                       f"overrides can only make this device smaller")

    def as_dict(self) -> dict[str, Any]:
        """Every capability by name (what `python -m hal info` prints)."""
        return dataclasses.asdict(self)


def _checked(name: str, current: Any, value: Any) -> Any:
    if isinstance(current, bool):
        if not isinstance(value, bool):
            raise ValidationError(f"capability {name} takes True or False, got {value!r}")
        return value
    if isinstance(current, tuple):
        if not (isinstance(value, (tuple, list)) and len(value) == 3):
            raise ValidationError(f"capability {name} takes three positive integers, got {value!r}")
        return tuple(integer(v, f"capability {name}", 1) for v in value)
    value = integer(value, f"capability {name}", 0)
    if name.endswith("_alignment") and (value < 1 or value & (value - 1)):
        raise ValidationError(f"capability {name} takes a power of two, got {value!r}")
    return value
