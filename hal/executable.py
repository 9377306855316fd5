"""Executables: what a dispatch runs.

`Export` describes one entry point's ABI; `ExecutableSource` carries code in one format (or several,
with `multi`) plus its exports; `Executable` is the loaded form on one device. Loading is keyed by
content, so the same source loads once per device; compiled binaries are also kept on disk
(`DiskCache`), because a module load or a compile per call is the classic overhead this project avoids.
"""

from __future__ import annotations

import dataclasses
import hashlib
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from hal.commands import Entries, Entry
from hal.constant_types import TYPES, check_types
from hal.errors import UnsupportedError, ValidationError, integer

if TYPE_CHECKING:
    from hal.capabilities import Capabilities


@dataclasses.dataclass(frozen=True)
class Export:
    """One kernel entry point and its ABI: what hal checks every dispatch of it against.

    Args:
        name: The kernel's name in its source (CUDA: an `extern "C"` name).
        bindings: How many buffers it binds.
        constants: Its 32-bit constants: a count of untyped words, or the type of each, "int32", "uint32" or
            "float32" (kept in `constant_types`), so that hal converts each value as the kernel reads it and refuses a
            value of another kind (hal.constant_types).
        workgroup_size: One to three sizes, padded with ones (Vulkan: LocalSize; CUDA: blockDim).
        readonly: The bindings it only reads. Hazard analysis treats the others as read-write; Vulkan refuses at
            load_executable a readonly binding its SPIR-V may write, CUDA one its PTX stores or atomically writes
            through (where it has the PTX: a PTX source, or CUDA C compiled without LTO-IR imports), and the host
            hands the kernel read-only views of them.
        early_launch: The kernel waits for the commands it depends on itself (CUDA: cudaGridDependencySynchronize(),
            PTX griddepcontrol.wait) before it reads or writes anything they touch, and on every path before it
            ends (so that it ends after them: a later kernel's wait covers only the kernels right before it), so on
            a device whose capabilities say supports_early_launch the CUDA backend lets it launch while they finish
            (programmatic dependent launch); other backends ignore it.

    Raises:
        ValidationError: A name, count, type name, size or readonly index is not valid.

    Example:
        >>> hal.Export("add", bindings=3, constants=("uint32",), workgroup_size=64, readonly=(0, 1))
        Export(name='add', bindings=3, constants=1, workgroup_size=(64, 1, 1), readonly=(0, 1),
               early_launch=False, constant_types=('uint32',))
    """

    name: str
    bindings: int
    constants: int = 0
    workgroup_size: tuple[int, int, int] = (1, 1, 1)
    readonly: tuple[int, ...] = ()
    early_launch: bool = False
    constant_types: tuple[str, ...] = ()

    def __init__(self, name: str, *, bindings: int, constants: int | Iterable[str] = 0,
                 workgroup_size: Iterable[int] | int = (1, 1, 1), readonly: Iterable[int] = (),
                 early_launch: bool = False) -> None:
        if not isinstance(name, str) or not name:
            raise ValidationError(f"Export name must be a non-empty string, got {name!r}")
        bindings = integer(bindings, f"Export {name!r}: bindings", 0)
        types: tuple[str, ...] = ()
        if isinstance(constants, str):
            raise ValidationError(f"Export {name!r}: constants takes a count or a sequence of type names "
                                  f"({', '.join(TYPES)}), got the string {constants!r}")
        if isinstance(constants, int) or not isinstance(constants, Iterable):
            constants = integer(constants, f"Export {name!r}: constants", 0)
        else:
            try:
                types = check_types(_sequence(constants, f"Export {name!r}: constants"), f"Export {name!r}")
            except ValueError as e:
                raise ValidationError(str(e)) from None
            constants = len(types)
        size = _sequence(workgroup_size, f"Export {name!r}: workgroup_size")
        if not 1 <= len(size) <= 3:
            raise ValidationError(f"Export {name!r}: workgroup_size must be 1 to 3 positive integers, "
                                  f"got {workgroup_size!r}")
        size = tuple(integer(s, f"Export {name!r}: workgroup_size", 1) for s in size)
        ro = tuple(sorted({integer(i, f"Export {name!r}: readonly index", 0, bindings - 1)
                           for i in _sequence(readonly, f"Export {name!r}: readonly")}))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "bindings", bindings)
        object.__setattr__(self, "constants", constants)
        object.__setattr__(self, "constant_types", types)
        object.__setattr__(self, "workgroup_size", size + (1,) * (3 - len(size)))
        object.__setattr__(self, "readonly", ro)
        if not isinstance(early_launch, bool):
            raise ValidationError(f"Export {name!r}: early_launch takes True or False, got {early_launch!r}")
        object.__setattr__(self, "early_launch", early_launch)
        # Per binding: does the kernel write it? (Not a field: derived, and used on the hot path.)
        object.__setattr__(self, "writes", tuple(i not in ro for i in range(bindings)))


def check_exports(source: ExecutableSource, caps: Capabilities) -> None:
    """Refuse exports beyond the device's limits (`caps`): workgroup size and invocations, bindings."""
    for e in source.exports:
        size = e.workgroup_size
        if any(s > m for s, m in zip(size, caps.max_workgroup_size)) or \
                size[0] * size[1] * size[2] > caps.max_workgroup_invocations:
            raise ValidationError(
                f"export {e.name!r}: workgroup_size {size} exceeds the device's max_workgroup_size "
                f"{caps.max_workgroup_size} or max_workgroup_invocations {caps.max_workgroup_invocations}")
        if e.bindings > caps.max_per_stage_descriptor_storage_buffer:
            raise ValidationError(
                f"export {e.name!r}: {e.bindings} bindings exceed the device's "
                f"max_per_stage_descriptor_storage_buffer {caps.max_per_stage_descriptor_storage_buffer}")


class Loader(Protocol):
    """What an executable needs of the device that loaded it (a hal.Device)."""

    driver: str

    def executable_released(self, executable: Executable) -> None: ...


class ExecutableSource:
    """Code in one format with its exports, built with the class methods (`cuda`, `ptx`, `cubin`, `triton`, `glsl`,
    `spirv`, `python`, `multi`); `Device.load_executable` loads it. Its content `key` names it in the device's cache of
    executables and on disk."""

    __slots__ = ("format", "payload", "exports", "options", "imports", "_key")

    def __init__(self, format: str, payload: Any, exports: Iterable[Export],
                 options: Iterable[str] = (), imports: Iterable[bytes | str] = ()) -> None:
        self.format = format
        self.payload = payload
        self.exports = _exports(exports)
        self.options = _sequence(options, f"{format} options", scalar=False)
        self.imports = _sequence(imports, f"{format} imports", scalar=False)
        for item in self.options:
            if not isinstance(item, str):
                raise ValidationError(f"{format} options must be strings, got {item!r}")
        for item in self.imports:
            if not isinstance(item, (bytes, bytearray, str)):
                raise ValidationError(f"{format} imports must be bytes or str (PTX, cubin, LTO-IR, SPIR-V), "
                                      f"got {type(item).__name__}")
        self._key: Any = None

    @classmethod
    def cuda(cls, code: str, exports: Iterable[Export], options: Iterable[str] = (),
             imports: Iterable[bytes | str] = ()) -> ExecutableSource:
        """CUDA C++, compiled with NVRTC for the device's own architecture when it is loaded (the cubin cached).

        Args:
            code: The source; name kernels `extern "C"`.
            exports: One `hal.Export` per kernel.
            options: NVRTC options (e.g. "-DN=4").
            imports: PTX, cubin, fatbin or LTO-IR linked in with nvJitLink (microkernels, inline assembly).

        Returns:
            The source, for a CUDA device.

        Raises:
            ValidationError: The code is not text, an export is not an `hal.Export`, or an option or import is of the
                wrong type. Compilation errors come at load_executable, as CompileError.
        """
        return cls("cuda", _text("cuda", code), exports, options, imports)

    @classmethod
    def ptx(cls, code: str | bytes, exports: Iterable[Export], imports: Iterable[bytes | str] = ()) -> ExecutableSource:
        """PTX text, for the driver to compile at load (linked with `imports` first, if any).

        Args:
            code: The PTX module.
            exports: One `hal.Export` per `.entry`.
            imports: PTX, cubin, fatbin or LTO-IR linked in with nvJitLink.

        Returns:
            The source, for a CUDA device.

        Raises:
            ValidationError: The code is not text, or an export or import is of the wrong type.
        """
        return cls("ptx", _text("ptx", code), exports, (), imports)

    @classmethod
    def cubin(cls, data: bytes, exports: Iterable[Export]) -> ExecutableSource:
        """A compiled CUDA module (its kernels' parameter sizes are checked at load; nothing else of it can be).

        Args:
            data: The cubin's bytes.
            exports: One `hal.Export` per kernel.

        Returns:
            The source, for a CUDA device.

        Raises:
            ValidationError: The data is not bytes, or an export is of the wrong type.
        """
        return cls("cubin", _binary("cubin", data), exports)

    @classmethod
    def spirv(cls, data: bytes, exports: Iterable[Export], imports: Iterable[bytes] = ()) -> ExecutableSource:
        """A SPIR-V module (read and validated at load: see the Vulkan backend).

        Args:
            data: The module's bytes, a whole number of 32-bit words.
            exports: One `hal.Export` per GLCompute entry point.
            imports: SPIR-V modules linked in with spirv-link.

        Returns:
            The source, for a Vulkan device.

        Raises:
            ValidationError: The data is not bytes or not a whole number of words, or an export is of the wrong type.
        """
        data = _binary("spirv", data)
        if len(data) % 4:
            raise ValidationError(f"spirv: a SPIR-V module is a whole number of 32-bit words, got {len(data)} bytes")
        return cls("spirv", data, exports, (), imports)

    @classmethod
    def glsl(cls, code: str | Mapping[str, str], exports: Iterable[Export]) -> ExecutableSource:
        """GLSL compute shaders, compiled by glslc when loaded (the SPIR-V cached).

        Args:
            code: A mapping of export name to source, or one source string for a single export.
            exports: One `hal.Export` per kernel.

        Returns:
            The source, for a Vulkan device.

        Raises:
            ValidationError: A source is missing for an export, or one string was given for several exports.
        """
        exports = _exports(exports)
        if isinstance(code, str):
            if len(exports) != 1:
                raise ValidationError(f"glsl: one source string serves one export; give {{export: code}} "
                                      f"for {len(exports)} exports")
            code = {exports[0].name: code}
        return cls("glsl", _per_export("glsl", code, exports, str), exports)

    @classmethod
    def python(cls, functions: Mapping[str, Callable[..., None]], exports: Iterable[Export]) -> ExecutableSource:
        """Python kernels for the host backend: `functions[name](ctx)`, one call per dispatch covering the whole grid.

        Args:
            functions: A mapping of export name to function of `ctx`.
            exports: One `hal.Export` per kernel.

        Returns:
            The source, for the host device.

        Raises:
            ValidationError: A function is missing for an export, or is not callable.

        The host ABI, what `ctx` (backends.host.executable.DispatchContext) offers the kernel:

        - `ctx.binding(i, dtype=np.uint8)`: binding i (the dispatch's bindings[i], its range only) as a 1-d numpy
          view of `dtype`; writes go to the buffer. Bindings the export declares readonly come back read-only.
        - `ctx.constants`: the constants as given (Python ints; Python floats rounded to numpy float32, as a GPU
          receives them); `ctx.words`: the same as the uint32 words a GPU kernel receives.
        - `ctx.workgroups` (x, y, z) and `ctx.workgroup_size`; `ctx.invocations`, their product.

        The kernel must compute exactly what the GPU grid would: every invocation of ctx.workgroups x
        ctx.workgroup_size, no more (a GPU kernel guards its own bounds; a host kernel covering more than the
        grid would hide a wrong grid on the GPU). The GPU ABIs: on Vulkan binding i is storage buffer i of set 0
        and the constants are the push-constant block's 32-bit members in order; on CUDA binding i is the
        kernel's i-th (pointer) parameter and the constants follow as 32-bit scalar parameters in order.
        """
        exports = _exports(exports)
        return cls("python", _per_export("python", functions, exports, None), exports)

    @classmethod
    def triton(cls, functions: Mapping[str, Any], exports: Iterable[Export], *,
               constexprs: Mapping[str, Mapping[str, Any]] | None = None,
               signature: Mapping[str, Mapping[str, str]] | None = None, num_warps: int | Mapping[str, int] = 4,
               num_stages: int | None | Mapping[str, int | None] = None) -> ExecutableSource:
        """Triton kernels, compiled with triton.compile for the CUDA device's architecture when loaded (the cubin
        cached on disk); the host runs them in Triton's interpreter where torch is installed (hal.triton_source).

        Args:
            functions: A mapping of export name to `@triton.jit` function.
            exports: One `hal.Export` per kernel; workgroup_size must be (32 * num_warps, 1, 1).
            constexprs: {export: {parameter: value}}: the values of its `tl.constexpr` parameters (those with
                defaults may be left out); any other parameter named here is compiled in as a constant too.
            signature: {export: {parameter: Triton type}} where an annotation does not give it (`"*fp16"`, `"u32"`).
                By position, the parameters other than constexprs are the bindings (pointers, `"*fp32"` unless typed
                otherwise) then the constants (32-bit scalars: the Export's typed constants, else `"i32"`).
            num_warps: Warps a program (a workgroup): 1, 2, 4, 8, 16 or 32; or {export: warps}.
            num_stages: Triton's software pipelining depth (None: Triton's default); or {export: stages}.

        Returns:
            The source, for a CUDA device (or the host, with torch).

        Raises:
            UnsupportedError: Triton is not installed.
            ValidationError: A function is not a Triton kernel, or its parameters disagree with its Export (counts,
                order, types, a constexpr without a value, the workgroup size).

        Example:
            >>> @triton.jit  # doctest: +SKIP
            ... def scale(x, out, n, factor, BLOCK: tl.constexpr):
            ...     i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            ...     tl.store(out + i, tl.load(x + i, mask=i < n) * factor, mask=i < n)
            >>> hal.ExecutableSource.triton(  # doctest: +SKIP
            ...     {"scale": scale}, [hal.Export("scale", bindings=2, constants=("uint32", "float32"),
            ...                                   workgroup_size=128)], constexprs={"scale": {"BLOCK": 1024}})
        """
        from hal import triton_source
        exports = _exports(exports)
        functions = _per_export("triton", functions, exports, None)
        return cls("triton", triton_source.kernels(functions, exports, constexprs, signature, num_warps, num_stages),
                   exports)

    @classmethod
    def multi(cls, *, cuda: ExecutableSource | None = None, vulkan: ExecutableSource | None = None,
              host: ExecutableSource | None = None) -> ExecutableSource:
        """One source per driver; each device loads its own part.

        Args:
            cuda: The part for CUDA devices.
            vulkan: The part for Vulkan devices.
            host: The part for the host device.

        Returns:
            The source; a device without a part raises UnsupportedError at load_executable.

        Raises:
            ValidationError: No part is given, a part is not a single-format source, or the parts' exports differ.
        """
        parts = {k: v for k, v in (("cuda", cuda), ("vulkan", vulkan), ("host", host)) if v is not None}
        if not parts:
            raise ValidationError("multi: give at least one of cuda=, vulkan=, host=")
        exports = None
        for driver, part in parts.items():
            if not isinstance(part, ExecutableSource) or part.format == "multi":
                raise ValidationError(f"multi: {driver}= must be a single-format ExecutableSource")
            if exports is not None and part.exports != exports:
                raise ValidationError(f"multi: the exports of {driver}= differ from the others")
            exports = part.exports
        return cls("multi", parts, exports)

    def for_driver(self, driver: str) -> ExecutableSource:
        """The part of a `multi` source for `driver` (or self); UnsupportedError if there is none."""
        if self.format != "multi":
            return self
        part = self.payload.get(driver)
        if part is None:
            raise UnsupportedError(f"this multi source has no part for the {driver} driver "
                                   f"(it has {', '.join(self.payload)}); add {driver}=... to ExecutableSource.multi")
        return part

    @property
    def key(self) -> Any:
        """Content key: equal for sources with the same code, exports, options and imports."""
        if self._key is None:
            if self.format == "python":
                self._key = ("python", self.exports, tuple(self.payload[e.name] for e in self.exports))
            elif self.format == "multi":
                self._key = ("multi",) + tuple((d, p.key) for d, p in sorted(self.payload.items()))
            elif self.format == "triton":
                self._key = ("triton", self.exports) + tuple(self.payload[e.name].key() for e in self.exports)
            else:
                h = hashlib.sha256()
                for part in (self.format, repr(self.exports), repr(self.options)):
                    h.update(part.encode())
                    h.update(b"\0")
                for blob in (self.payload,) + self.imports:
                    blob = blob.encode() if isinstance(blob, str) else _payload_bytes(blob)
                    h.update(len(blob).to_bytes(8, "little"))
                    h.update(blob)
                self._key = h.hexdigest()
        return self._key

    def __repr__(self) -> str:
        return f"<ExecutableSource {self.format}: {', '.join(e.name for e in self.exports)}>"


def _payload_bytes(payload: Any) -> bytes:
    if isinstance(payload, dict):
        return b"\0".join(k.encode() + b"=" + v.encode() for k, v in sorted(payload.items()))
    return bytes(payload)


class Executable(Entries):
    """A source loaded on one device. Backends subclass it; `export` looks an entry point up by name, and
    `entries` (hal.commands.Entries) maps each export's name to its hal.commands.Entry (its position and what the
    recorder checks)."""

    __slots__ = ("device", "source", "exports", "_released", "__weakref__")

    def __init__(self, device: Loader, source: ExecutableSource) -> None:
        self.device = device
        self.source = source
        self.exports = source.exports
        self.entries: dict[str, Entry] = {e.name: Entry(e, i, device) for i, e in enumerate(source.exports)}
        self._released = False

    @property
    def released(self) -> bool:
        return self._released

    def release(self) -> None:
        """Free what the device holds for it (pipelines, modules) once submitted work no longer needs it.

        Loading the same source again builds it anew; recording a dispatch of it, or submitting a command
        buffer that recorded one, raises ValidationError. Idempotent."""
        if self._released:
            return
        self._released = True
        self.entries = {}  # dispatch's one lookup now fails, and its slow path says why
        self.device.executable_released(self)
        self._free()

    def export(self, name: str) -> Export:
        try:
            return self.entries[name].export
        except KeyError:
            raise ValidationError(f"no export {name!r}; this executable has {', '.join(self.entries)}") from None

    def __repr__(self) -> str:
        names = ", ".join(e.name for e in self.exports)
        return f"<{type(self).__name__} {names} on {self.device.driver}{' released' if self._released else ''}>"

    # Backend hook.
    def _free(self) -> None:
        """Free the device objects (the host backend holds none)."""


def _sequence(items: Any, what: str, scalar: bool = True) -> tuple[Any, ...]:
    """`items` as a tuple; a lone number counts as one item when `scalar`, a lone string never does."""
    if scalar and isinstance(items, numbers.Integral):
        return (items,)
    if isinstance(items, (str, bytes)):
        raise ValidationError(f"{what} must be a sequence, not a single {type(items).__name__} (wrap it in a tuple)")
    try:
        return tuple(items)
    except TypeError:
        raise ValidationError(f"{what} must be a sequence, got {type(items).__name__}") from None


def _exports(exports: Iterable[Export]) -> tuple[Export, ...]:
    if isinstance(exports, Export):
        exports = (exports,)
    result = tuple(exports)
    if not result:
        raise ValidationError("an executable needs at least one Export")
    for e in result:
        if not isinstance(e, Export):
            raise ValidationError(f"exports must be hal.Export objects, got {type(e).__name__}")
    names = [e.name for e in result]
    if len(set(names)) != len(names):
        raise ValidationError(f"export names must be unique, got {names}")
    return result


def _text(format: str, code: Any) -> str:
    if isinstance(code, (bytes, bytearray)):
        code = bytes(code).decode()
    if not isinstance(code, str) or not code.strip():
        raise ValidationError(f"{format}: expected non-empty source text, got {type(code).__name__}")
    return code


def _binary(format: str, data: Any) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)) or not len(data):
        raise ValidationError(f"{format}: expected non-empty bytes, got {type(data).__name__}")
    return bytes(data)


def _per_export(format: str, items: Any, exports: tuple[Export, ...], kind: type | None) -> dict[str, Any]:
    if not isinstance(items, Mapping):
        raise ValidationError(f"{format}: expected a mapping of export name to code, got {type(items).__name__}")
    names = {e.name for e in exports}
    if set(items) != names:
        raise ValidationError(f"{format}: code given for {sorted(items)} but the exports are {sorted(names)}")
    for name, item in items.items():
        if (kind is None and not callable(item)) or (kind is not None and not isinstance(item, kind)):
            raise ValidationError(f"{format}: the code for export {name!r} has the wrong type {type(item).__name__}")
    return dict(items)
