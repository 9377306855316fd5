"""Host executables: Python kernels called once per dispatch with a DispatchContext (the host ABI); Triton kernels
run in Triton's interpreter through such a kernel (backends.host.triton)."""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.host import triton
from hal.commands import pack_constants
from hal.errors import UnsupportedError, ValidationError
from hal.executable import Executable, ExecutableSource, Loader


class HostExecutable(Executable):
    __slots__ = ("functions",)

    def __init__(self, device: Loader, source: ExecutableSource) -> None:
        if source.format not in ("python", "triton"):
            raise UnsupportedError(f"the host device runs Python kernels only, not {source.format!r} code (and "
                                   f"Triton kernels, in Triton's interpreter); give ExecutableSource.python(...) or "
                                   f".multi(host=ExecutableSource.python(...))")
        super().__init__(device, source)
        if source.format == "triton":  # in Triton's interpreter (backends.host.triton)
            self.functions = tuple(triton.function(source.payload[e.name]) for e in source.exports)
        else:
            self.functions = tuple(source.payload[e.name] for e in source.exports)


class DispatchContext:
    """What a host kernel sees: `binding(i, dtype)`, `constants` (as given, but Python floats rounded to
    numpy float32 as a GPU kernel would receive them), `words` (the raw 32-bit words), `workgroups`,
    `workgroup_size`.

    One call covers the whole grid. Bindings the export marks readonly come back read-only, so a
    kernel that writes one fails loudly instead of hiding a hazard-analysis bug.
    """

    __slots__ = ("_views", "_readonly", "constants", "workgroups", "workgroup_size")

    def __init__(self, views: list[np.ndarray], readonly: tuple[int, ...], constants: tuple[Any, ...],
                 workgroups: tuple[int, int, int], workgroup_size: tuple[int, int, int]) -> None:
        self._views = views
        self._readonly = readonly
        self.constants = constants
        self.workgroups = workgroups
        self.workgroup_size = workgroup_size

    @property
    def words(self) -> np.ndarray:
        """The constants as the 32-bit words a GPU kernel receives (for bit-exact kernels)."""
        return np.frombuffer(pack_constants(self.constants), np.uint32)

    @property
    def invocations(self) -> int:
        """Total invocations of the grid (workgroups x workgroup_size)."""
        w, s = self.workgroups, self.workgroup_size
        return w[0] * w[1] * w[2] * s[0] * s[1] * s[2]

    def binding(self, index: int, dtype: Any = np.uint8) -> np.ndarray:
        if not 0 <= index < len(self._views):
            raise ValidationError(f"binding({index}): the export has {len(self._views)} bindings")
        view = self._views[index]
        dt = np.dtype(dtype)
        if view.nbytes % dt.itemsize:
            raise ValidationError(f"binding({index}): {view.nbytes} bytes are not a whole number of {dt}")
        out = view.view(dt)
        if index in self._readonly:
            out.flags.writeable = False
        return out
