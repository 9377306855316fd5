"""Triton kernels as an ExecutableSource (`ExecutableSource.triton`): what each export's `@triton.jit` function is
compiled with, and the checks that need no device.

hal's ABI maps onto a Triton signature by position: once the constexprs are taken out, the first `bindings`
parameters are the bindings (pointers, in order) and the rest are the constants (32-bit scalars, in order), so a
kernel lists its pointers before its scalars. A pointer's element type comes from its annotation (`x: "*fp16"`) or
`signature=`, else it is `*fp32`; a scalar's from the Export's typed constants, its annotation or `signature=` (which
must agree), else `i32`. Pointers are compiled as 16-byte aligned (`tt.divisibility`), which hal's binding checks
guarantee on CUDA (storage_buffer_offset_alignment); scalars are never specialized on their values, so one compiled
kernel serves every constant value. The workgroup size is Triton's block: 32 x num_warps threads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from hal.errors import UnsupportedError, ValidationError

# A constant's type name (hal.constant_types) and its Triton scalar type.
SCALAR_TYPES = {"int32": "i32", "uint32": "u32", "float32": "fp32"}
POINTER_DEFAULT = "*fp32"
SCALAR_DEFAULT = "i32"
WARPS = (1, 2, 4, 8, 16, 32)


class Export(Protocol):
    """What the checks read of a hal.Export."""

    name: str
    bindings: int
    constants: int
    constant_types: tuple[str, ...]
    workgroup_size: tuple[int, int, int]


def triton_module() -> Any:
    """The triton package, or UnsupportedError saying what to install."""
    try:
        import triton
    except ImportError:
        raise UnsupportedError("Triton kernels need the triton package: pip install 'hal-command-buffers[triton]' "
                               "(Linux x86-64 or aarch64)") from None
    return triton


@dataclasses.dataclass(frozen=True)
class TritonKernel:
    """One export's Triton kernel: its function, the Triton signature it is compiled with (parameter -> type,
    "constexpr" for the constexprs), the constexprs' values, the indices of its pointer parameters, and the
    compiler's options."""

    function: Any
    signature: tuple[tuple[str, str], ...]
    constexprs: tuple[tuple[str, Any], ...]
    pointers: tuple[int, ...]
    num_warps: int
    num_stages: int | None

    @property
    def name(self) -> str:
        """The kernel's name in its compiled module (the function's)."""
        return self.function.__name__

    @property
    def interpreted(self) -> bool:
        """Made by @triton.jit under TRITON_INTERPRET=1: Triton's interpreter runs it (the host's form), no
        compiler does."""
        return not isinstance(self.function, triton_module().runtime.jit.JITFunction)

    def key(self) -> str:
        """A digest of what the compiled kernel depends on: the function's source and those it calls (Triton's
        cache_key; an interpreted function's own source), the signature, the constexprs, the options and Triton's
        version."""
        triton = triton_module()
        source = inspect.getsource(self.function.fn) if self.interpreted else self.function.cache_key
        text = repr((source, self.signature, self.constexprs, self.pointers, self.num_warps, self.num_stages,
                     triton.__version__))
        return hashlib.sha256(text.encode()).hexdigest()

    def compile(self, capability: tuple[int, int]) -> Any:
        """triton.compile for an NVIDIA GPU of compute `capability` (no device needed): Triton's CompiledKernel,
        whose asm["cubin"] and metadata the CUDA backend loads."""
        if self.interpreted:
            raise UnsupportedError(f"Triton kernel {self.name!r} was made under TRITON_INTERPRET=1, so Triton's "
                                   f"interpreter runs it and no compiler can: run GPU work in a process without it")
        triton = triton_module()
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        source = ASTSource(self.function, dict(self.signature), dict(self.constexprs),
                           {(i,): [["tt.divisibility", 16]] for i in self.pointers})
        options: dict[str, Any] = {"num_warps": self.num_warps}
        if self.num_stages is not None:
            options["num_stages"] = self.num_stages
        major, minor = capability
        return triton.compile(source, target=GPUTarget("cuda", 10 * major + minor, 32), options=options)


def kernels(functions: Mapping[str, Any], exports: tuple[Export, ...], constexprs: Mapping[str, Mapping] | None,
            signature: Mapping[str, Mapping[str, str]] | None, num_warps: int | Mapping[str, int],
            num_stages: int | None | Mapping[str, int | None]) -> dict[str, TritonKernel]:
    """Each export's TritonKernel, checked against its Export (ValidationError naming what disagrees)."""
    triton = triton_module()
    warps = _option(num_warps, "num_warps", exports, lambda w: w in WARPS, f"one of {WARPS}")
    stages = _option(num_stages, "num_stages", exports, lambda s: s is None or s >= 1, "None or a positive int")
    constexprs = _per_name(constexprs, "constexprs", exports)
    signature = _per_name(signature, "signature", exports)
    from triton.runtime.interpreter import InterpretedFunction
    found = {}
    for export in exports:
        function = functions[export.name]
        if not isinstance(function, (triton.runtime.jit.JITFunction, InterpretedFunction)):
            raise ValidationError(f"triton: {export.name!r} must be a @triton.jit function, got "
                                  f"{type(function).__name__}")
        found[export.name] = _kernel(function, export, constexprs.get(export.name, {}),
                                     signature.get(export.name, {}), warps[export.name], stages[export.name])
    return found


def _parameters(function: Any) -> list[Any]:
    """The function's parameters as Triton describes them (its KernelParams: name, annotation, constexpr or not,
    default), also for an interpreted function, which keeps none."""
    params = getattr(function, "params", None)
    if params is not None:
        return list(params)
    from triton.runtime.jit import KernelParam
    return [KernelParam(i, p, False, False) for i, p in enumerate(inspect.signature(function.fn).parameters.values())]


def _annotated_type(param: Any) -> str:
    """The Triton type a parameter's annotation names ("" for none), also where the annotation was kept as a string
    of its source (`from __future__ import annotations` quotes a string annotation once more)."""
    text = param.annotation.strip("'\"")
    if text == param.annotation:
        return param.annotation_type
    from triton.runtime.jit import KernelParam
    return KernelParam(0, inspect.Parameter(param.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=text),
                       False, False).annotation_type


def _option(given: Any, what: str, exports: tuple[Export, ...], valid: Callable[[Any], bool],
            expected: str) -> dict[str, Any]:
    """An option for every export: one value for all, or {export: value} (every export named)."""
    names = [e.name for e in exports]
    if isinstance(given, Mapping):
        if set(given) != set(names):
            raise ValidationError(f"triton: {what} given per export must name every export ({sorted(names)}), got "
                                  f"{sorted(given)}")
        values = dict(given)
    else:
        values = dict.fromkeys(names, given)
    for name, value in values.items():
        if isinstance(value, bool) or not (value is None or isinstance(value, int)) or not valid(value):
            raise ValidationError(f"triton: {what} must be {expected}, got {value!r} for {name!r}")
    return values


def _per_name(given: Mapping | None, what: str, exports: tuple[Export, ...]) -> dict[str, Mapping]:
    if given is None:
        return {}
    names = {e.name for e in exports}
    if not isinstance(given, Mapping) or not all(isinstance(v, Mapping) for v in given.values()):
        raise ValidationError(f"triton: {what} takes {{export: {{parameter: value}}}}, got {given!r}")
    unknown = sorted(set(given) - names)
    if unknown:
        raise ValidationError(f"triton: {what} names {unknown}, which are not exports ({sorted(names)})")
    return dict(given)


def _kernel(function: Any, export: Export, constexprs: Mapping[str, Any], types: Mapping[str, str], num_warps: int,
            num_stages: int | None) -> TritonKernel:
    where = f"triton: export {export.name!r}"
    threads = 32 * num_warps
    if export.workgroup_size != (threads, 1, 1):
        raise ValidationError(f"{where}: workgroup_size is {export.workgroup_size}, but num_warps={num_warps} runs "
                              f"{threads} threads a program; give workgroup_size={threads}")
    params = _parameters(function)
    names = [p.name for p in params]
    for what, given in (("constexprs", constexprs), ("signature", types)):
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise ValidationError(f"{where}: {what} names {unknown}, which are not parameters of "
                                  f"{function.__name__}({', '.join(names)})")
    values: dict[str, Any] = {}
    runtime = []
    for p in params:
        if p.name in constexprs:
            values[p.name] = constexprs[p.name]
        elif p.is_constexpr:
            if not p.has_default:
                raise ValidationError(f"{where}: the constexpr {p.name!r} has no value; give constexprs="
                                      f"{{{export.name!r}: {{{p.name!r}: ...}}}}")
            values[p.name] = p.default
        else:
            runtime.append(p)
    if len(runtime) != export.bindings + export.constants:
        raise ValidationError(f"{where}: {function.__name__} takes {len(runtime)} parameters besides its constexprs "
                              f"({', '.join(p.name for p in runtime)}); the Export needs {export.bindings} bindings "
                              f"then {export.constants} constants")
    signature: dict[str, str] = {}
    pointers = []
    for i, p in enumerate(runtime):
        binding = i < export.bindings
        given = types.get(p.name) or _annotated_type(p)
        if binding:
            kind = given or POINTER_DEFAULT
            if not kind.startswith("*"):
                raise ValidationError(f"{where}: parameter {p.name!r} is binding {i}, so a pointer, but it is typed "
                                      f"{kind!r}; list the pointers before the scalars")
            pointers.append(names.index(p.name))
        else:
            index = i - export.bindings
            declared = SCALAR_TYPES.get(export.constant_types[index]) if export.constant_types else None
            kind = given or declared or SCALAR_DEFAULT
            if kind.startswith("*"):
                raise ValidationError(f"{where}: parameter {p.name!r} is a pointer, but the Export's {export.bindings} "
                                      f"bindings come first; list the pointers before the scalars")
            if kind not in SCALAR_TYPES.values():
                raise ValidationError(f"{where}: parameter {p.name!r} is constants[{index}], a 32-bit word, but it "
                                      f"is typed {kind!r}; give it one of {sorted(SCALAR_TYPES.values())}")
            if declared and kind != declared:
                raise ValidationError(f"{where}: constants[{index}] is declared {export.constant_types[index]}, but "
                                      f"parameter {p.name!r} is typed {kind!r}; make them agree")
        signature[p.name] = kind
    for name in values:
        signature[name] = "constexpr"
    ordered = tuple((name, signature[name]) for name in names)
    return TritonKernel(function, ordered, tuple((name, values[name]) for name in names if name in values),
                        tuple(pointers), num_warps, num_stages)
