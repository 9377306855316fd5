"""CUDA executables: CUDA C (NVRTC), PTX or cubin, with imports linked by nvJitLink, in one module; or Triton
kernels, a module each (backends.cuda_graph.triton).

NVRTC compiles for the device's own architecture, so the driver gets a cubin (no JIT at load); the cubin is kept in
the disk cache (hal.disk_cache) by content, architecture and compiler version. Imports (PTX, cubin, fatbin or LTO-IR:
hand-written microkernels, inline assembly) are linked with nvJitLink; the main program is then compiled relocatable
(and to LTO-IR when an import is LTO-IR). Each kernel's parameter list is read back from the module and must match
its Export: the bindings as 8-byte pointers, then the constants as 4-byte values. Where hal has the kernel's PTX (a
PTX source, or NVRTC's beside the cubin it compiles without LTO) it also refuses constants declared with another type
than the parameter's and a binding declared readonly that the kernel writes through (backends.cuda_graph.ptx); a
cubin or LTO-IR source is trusted. (A cubin from the disk cache passed these checks when it was compiled: its key
holds the Exports.) A Triton kernel's parameters may end with pointers hal passes null (Triton's scratch).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Protocol

from cuda.bindings import driver, nvrtc

from backends.cuda_graph import ptx, triton
from backends.cuda_graph.api import call, fail
from hal.disk_cache import DiskCache
from hal.errors import CompileError, UnsupportedError, ValidationError
from hal.executable import Executable, ExecutableSource, Export
from hal.lifetime import Release

_cubin_cache = DiskCache("cuda")
PARAMETER_BYTES = 4096  # the kernel parameter limit: bindings (8 bytes each) and constants (4) share it


class ModuleDevice(Protocol):
    """What executables need of their CUDA device."""

    driver: str
    compute_capability: tuple[int, int]

    def track(self, owner: object, kind: str, handle: Any) -> Release: ...

    def collect(self) -> None: ...

    def executable_released(self, executable: Executable) -> None: ...


class CudaExecutable(Executable):
    """A loaded CUDA source: one module (a Triton source: one per export), each export's function, and per export
    what its launches add to hal's: bytes of dynamic shared memory, and null pointer parameters after the bindings
    and constants (a Triton kernel's scratch; backends.cuda_graph.triton)."""

    __slots__ = ("functions", "shared_memory", "trailing_parameters", "_finalizers")

    def __init__(self, device: ModuleDevice, source: ExecutableSource) -> None:
        super().__init__(device, source)
        self._finalizers: list[Release] = []
        try:
            if source.format == "triton":
                loaded = [self._triton(source.payload[e.name], e) for e in source.exports]
                self.functions = tuple(k.function for k in loaded)
                self.shared_memory = tuple(k.shared for k in loaded)
                self.trailing_parameters = tuple(k.trailing for k in loaded)
            else:
                module = _module(device, source)
                self._finalizers.append(device.track(self, "module", int(module)))
                self.functions = tuple(int(_function(module, e)) for e in source.exports)
                self.shared_memory = self.trailing_parameters = (0,) * len(source.exports)
        except BaseException:
            self._free()
            raise

    def _triton(self, kernel: Any, export: Export) -> triton.Loaded:
        def use(compiled: triton.Compiled) -> triton.Loaded:
            loaded = triton.load(compiled, lambda f: _parameters(f, export, trailing_pointers=True))
            self._finalizers.append(self.device.track(self, "module", int(loaded.module)))
            return loaded
        return triton.compiled_kernel(kernel, export, self.device.compute_capability, use)

    def _free(self) -> None:
        for release in self._finalizers:
            release()
        self.device.collect()


def _function(module: Any, export: Export) -> Any:
    err, func = driver.cuModuleGetFunction(module, export.name.encode())
    if err == driver.CUresult.CUDA_ERROR_NOT_FOUND:
        raise ValidationError(f"export {export.name!r}: the module has no kernel of that name; declare it "
                              f'extern "C" __global__ so its name is not mangled')
    if err != driver.CUresult.CUDA_SUCCESS:
        raise fail(err, f"cuModuleGetFunction({export.name!r})")
    _parameters(func, export)
    return func


def _parameters(func: Any, export: Export, trailing_pointers: bool = False) -> int:
    """Check the kernel's parameter sizes against `export` (each binding a pointer, then each constant a 32-bit
    value; `trailing_pointers`: pointers may follow, which hal passes null); returns how many follow."""
    need = 8 * export.bindings + 4 * export.constants
    if need > PARAMETER_BYTES:
        raise ValidationError(f"export {export.name!r}: {export.bindings} bindings and {export.constants} constants "
                              f"take {need} bytes of kernel parameters; the limit is {PARAMETER_BYTES}")
    sizes = []
    while True:
        err, _, size = driver.cuFuncGetParamInfo(func, len(sizes))
        if err != driver.CUresult.CUDA_SUCCESS:
            break
        sizes.append(int(size))
    want = [8] * export.bindings + [4] * export.constants
    extra = len(sizes) - len(want)
    trailing = extra if trailing_pointers and extra > 0 and sizes[len(want):] == [8] * extra else 0
    if sizes[:len(sizes) - trailing] != want:
        raise ValidationError(f"export {export.name!r}: the kernel takes parameters of {sizes} bytes; the Export "
                              f"({export.bindings} bindings, {export.constants} constants) needs {want}: each "
                              f"binding a pointer, then each constant a 32-bit value")
    return trailing


def _module(device: ModuleDevice, source: ExecutableSource) -> Any:
    """The loaded module (cuModuleLoadData): of a cubin (compiled or linked here, through the disk cache), or of PTX
    for the driver to compile."""
    arch = "sm_{}{}".format(*device.compute_capability)
    if source.format == "cubin":
        return _load(source.payload)
    if source.format == "ptx":
        ptx.check_exports(source.payload, source.exports)
        if not source.imports:
            return _load(source.payload.encode() + b"\0")
        return _cached(source, arch, lambda: link([("main.ptx", source.payload.encode())] + _imports(source), arch))
    if source.format != "cuda":
        raise UnsupportedError(f"the CUDA device runs CUDA C, PTX, cubin or Triton, not {source.format!r}; give "
                               f"ExecutableSource.cuda/.ptx/.cubin/.triton(...) or .multi(cuda=...)")
    return _cached(source, arch, lambda: compile_cuda(source, arch))


def _load(image: bytes) -> Any:
    return call(driver.cuModuleLoadData, image)


def _cached(source: ExecutableSource, arch: str, build: Callable[[], bytes]) -> Any:
    """The module of the cubin `build()` makes, kept in the disk cache (one the driver refuses is built again)."""
    version = "{}.{}".format(*call(nvrtc.nvrtcVersion)) + "-driver-" + str(call(driver.cuDriverGetVersion))
    key = hashlib.sha256(f"{source.key}\0{arch}\0{version}".encode()).hexdigest() + ".cubin"
    return _cubin_cache.load(key, build, _load)


def _imports(source: ExecutableSource) -> list[tuple[str, bytes]]:
    return [(f"import{i}", item.encode() if isinstance(item, str) else bytes(item))
            for i, item in enumerate(source.imports)]


def _nvrtc(result: tuple, what: str, program: Any = None) -> Any:
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        log = program_log(program) if program is not None else ""
        raise CompileError(f"NVRTC: {what} failed: {err.name}", log)
    return result[1] if len(result) > 1 else None


def program_log(program: Any) -> str:
    size = _nvrtc(nvrtc.nvrtcGetProgramLogSize(program), "nvrtcGetProgramLogSize")
    log = b" " * size
    nvrtc.nvrtcGetProgramLog(program, log)
    return log.rstrip(b"\0 ").decode(errors="replace")


def compile_cuda(source: ExecutableSource, arch: str) -> bytes:
    """A cubin of the CUDA C source for `arch`, linked with its imports."""
    imports = _imports(source)
    lto = any(_input_type(data) == "LTOIR" for _, data in imports)
    options = [f"--gpu-architecture={arch}", "--std=c++17"]
    if imports:
        options.append("--relocatable-device-code=true")
    if lto:
        options.append("-dlto")
    options += list(source.options)
    program = _nvrtc(nvrtc.nvrtcCreateProgram(source.payload.encode(), b"hal.cu", 0, [], []), "nvrtcCreateProgram")
    try:
        err, = nvrtc.nvrtcCompileProgram(program, len(options), [o.encode() for o in options])
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC rejected the CUDA source ({err.name}; options {' '.join(options)})",
                               program_log(program))
        if lto:
            size = _nvrtc(nvrtc.nvrtcGetLTOIRSize(program), "nvrtcGetLTOIRSize")
            main, get = b" " * size, nvrtc.nvrtcGetLTOIR
        else:
            size = _nvrtc(nvrtc.nvrtcGetCUBINSize(program), "nvrtcGetCUBINSize")
            main, get = b" " * size, nvrtc.nvrtcGetCUBIN
        _nvrtc(get(program, main), get.__name__, program)
        if not lto:
            ptx.check_exports(_ptx_of(program), source.exports)
    finally:
        nvrtc.nvrtcDestroyProgram(program)
    if not imports:
        return main
    return link([("hal.ltoir" if lto else "hal.cubin", main)] + imports, arch, lto)


def _ptx_of(program: Any) -> str:
    """The PTX NVRTC made on its way to the cubin ("" where this NVRTC keeps none: nothing to check against)."""
    err, size = nvrtc.nvrtcGetPTXSize(program)
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        return ""
    text = b" " * size
    _nvrtc(nvrtc.nvrtcGetPTX(program, text), "nvrtcGetPTX", program)
    return text.rstrip(b"\0").decode(errors="replace")


def _input_type(data: bytes) -> str:
    if data[:4] == b"\x7fELF":
        return "CUBIN"
    if data[:4] == b"\x50\xed\x55\xba":
        return "FATBIN"
    head = data[:256].lstrip()
    if head.startswith((b"//", b".version", b".target")):
        return "PTX"
    return "LTOIR"


def link(inputs: list[tuple[str, bytes]], arch: str, lto: bool = False) -> bytes:
    """One cubin from PTX, cubin, fatbin and LTO-IR inputs, with nvJitLink."""
    try:
        from cuda.bindings import nvjitlink
    except ImportError as e:  # pragma: no cover - part of cuda-python since 12.4
        raise UnsupportedError("linking imports needs nvJitLink (cuda-python 12.4 or newer)") from e
    options = [f"-arch={arch}"] + (["-lto"] if lto else [])
    handle = nvjitlink.create(len(options), options)
    try:
        try:
            for name, data in inputs:
                kind = _input_type(data)
                if kind == "PTX" and not data.endswith(b"\0"):
                    data += b"\0"
                nvjitlink.add_data(handle, getattr(nvjitlink.InputType, kind), data, len(data), name)
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as e:
            log = bytearray(nvjitlink.get_error_log_size(handle))
            nvjitlink.get_error_log(handle, log)
            raise CompileError(f"nvJitLink could not link the executable with its imports ({e})",
                               log.rstrip(b"\0 ").decode(errors="replace")) from None
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin)
    finally:
        nvjitlink.destroy(handle)
