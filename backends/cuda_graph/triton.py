"""Triton kernels on CUDA: each export compiled by triton.compile for the device's architecture (hal.triton_source),
its cubin loaded as a module of its own, with what launching it needs that the cubin does not say.

Triton's metadata is kept with the cubin in hal's disk cache (namespace "triton", keyed by the kernel's digest,
which holds its source, constexprs, options and Triton's version, and the architecture): the kernel's name, the
dynamic shared memory its launches need (set on the function, above 48 KiB too) and its scratch. Recent Triton
versions append pointer parameters for global and profile scratch; hal passes null for them, so a kernel that needs
global scratch (device-side tensor descriptors) or profiling scratch is refused at load.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

from cuda.bindings import driver

from backends.cuda_graph import ptx
from backends.cuda_graph.api import call
from hal.disk_cache import DiskCache
from hal.errors import UnsupportedError
from hal.executable import Export
from hal.triton_source import TritonKernel

T = TypeVar("T")

_cache = DiskCache("triton")
STATIC_SHARED_LIMIT = 48 * 1024  # dynamic shared memory above this needs the function's attribute raised


@dataclasses.dataclass(frozen=True)
class Compiled:
    """A compiled Triton kernel: its cubin and the metadata hal launches it with."""

    cubin: bytes
    name: str
    shared: int  # bytes of dynamic shared memory a launch needs
    global_scratch: int  # bytes a program needs of each (0: compile_kernel refuses others)
    profile_scratch: int

    def to_bytes(self) -> bytes:
        header = {"name": self.name, "shared": self.shared, "global_scratch": self.global_scratch,
                  "profile_scratch": self.profile_scratch}
        return json.dumps(header).encode() + b"\n" + self.cubin

    @classmethod
    def from_bytes(cls, content: bytes) -> Compiled:
        header, _, cubin = content.partition(b"\n")
        fields = json.loads(header)
        return cls(cubin, str(fields["name"]), int(fields["shared"]), int(fields["global_scratch"]),
                   int(fields["profile_scratch"]))


@dataclasses.dataclass(frozen=True)
class Loaded:
    """A Triton kernel loaded on a device: its module, function, the dynamic shared memory of its launches and how
    many null pointer parameters follow hal's (Triton's scratch)."""

    module: Any
    function: int
    shared: int
    trailing: int


def compile_kernel(kernel: TritonKernel, export: Export, capability: tuple[int, int]) -> Compiled:
    """`kernel` compiled for compute `capability` (no device needed), its PTX checked against `export`'s typed
    constants and readonly bindings (backends.cuda_graph.ptx)."""
    compiled = kernel.compile(capability)
    m = compiled.metadata
    scratch, profile = int(getattr(m, "global_scratch_size", 0)), int(getattr(m, "profile_scratch_size", 0))
    if scratch or profile:
        raise UnsupportedError(f"Triton kernel {export.name!r} needs {scratch} bytes of global scratch and {profile} "
                               f"of profile scratch a program (device-side tensor descriptors, or Triton's "
                               f"instrumentation); hal passes no scratch: create tensor descriptors on the host, or "
                               f"turn the instrumentation off")
    entry = ptx.entries(compiled.asm["ptx"]).get(str(m.name))
    if entry is not None:
        ptx.check_entry(entry, export)
    return Compiled(bytes(compiled.asm["cubin"]), str(m.name), int(m.shared), scratch, profile)


def compiled_kernel(kernel: TritonKernel, export: Export, capability: tuple[int, int], use: Callable[[Compiled], T]) \
        -> T:
    """`use(Compiled)` of `kernel` for `export` and `capability`, compiled once and kept in the disk cache (the key
    holds the Export: an entry passed the checks against it)."""
    text = f"{kernel.key()}\0{export!r}\0sm_{capability[0]}{capability[1]}"
    key = hashlib.sha256(text.encode()).hexdigest() + ".triton"
    return _cache.load(key, lambda: compile_kernel(kernel, export, capability).to_bytes(),
                       lambda content: use(Compiled.from_bytes(content)))


def load(compiled: Compiled, parameter_sizes: Callable[[Any], int]) -> Loaded:
    """Load `compiled` (cuModuleLoadData), its function's shared memory set and its parameters checked by
    `parameter_sizes(function)` (which returns how many null pointers follow hal's); the module is unloaded again
    if anything fails."""
    module = call(driver.cuModuleLoadData, compiled.cubin)
    try:
        function = call(driver.cuModuleGetFunction, module, compiled.name.encode())
        if compiled.shared > STATIC_SHARED_LIMIT:
            call(driver.cuFuncSetAttribute, function,
                 driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, compiled.shared)
        trailing = parameter_sizes(function)
        return Loaded(module, int(function), compiled.shared, trailing)
    except BaseException:
        driver.cuModuleUnload(module)
        raise
