"""Triton kernels on the host: Triton's interpreter runs the same `@triton.jit` function, program by program, over
the dispatch's bindings.

The interpreter is Triton's own switch: a process started with TRITON_INTERPRET=1 gets interpreted functions from
@triton.jit (every one, Triton's library's too, which is why hal cannot interpret a kernel made without it: its calls
into tl.zeros and the like would still be compiled functions; and why such a process compiles nothing for a GPU). The
interpreter takes pointer arguments as torch tensors (it reads their storage and dtype), so each binding is handed
over as a CPU tensor over hal's own memory (no copy), of the element type of the kernel's signature, and the
constants as the values their 32-bit words hold for the signature's scalar types (bit for bit what a GPU kernel
receives); without torch, loading a Triton source on the host raises UnsupportedError. The interpreter swaps
triton.language's functions for its own while a kernel runs, so the host runs one Triton kernel at a time.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from hal.errors import UnsupportedError
from hal.triton_source import TritonKernel

_one_at_a_time = threading.Lock()
# Numpy's dtype for a Triton element type, and torch's name for it where numpy has none.
_NUMPY = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64, "i8": np.int8, "i16": np.int16,
          "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
          "i1": np.bool_}
_TORCH_ONLY = {"bf16": ("bfloat16", np.uint16)}


def function(kernel: TritonKernel) -> Callable[[Any], None]:
    """A host kernel (of a DispatchContext, backends.host.executable) that runs `kernel` in Triton's interpreter."""
    if not kernel.interpreted:
        raise UnsupportedError(f"the host runs Triton kernel {kernel.name!r} in Triton's interpreter, which needs "
                               f"@triton.jit to have run under TRITON_INTERPRET=1 (set it before Python starts; that "
                               f"process then compiles no Triton kernel for a GPU), or give the host a Python kernel "
                               f"through ExecutableSource.multi(host=...)")
    try:
        import torch
    except ImportError:
        raise UnsupportedError("the host runs Triton kernels in Triton's interpreter, which needs torch: install torch "
                               "(the CPU build is enough), or give the host a Python kernel through "
                               "ExecutableSource.multi(host=...)") from None
    runtime = [(name, kind) for name, kind in kernel.signature if kind != "constexpr"]
    names = [name for name, _ in runtime]
    pointers = [kind[1:].lstrip("k") for _, kind in runtime if kind.startswith("*")]
    scalars = [kind for _, kind in runtime if not kind.startswith("*")]
    for element in pointers:
        if element not in _NUMPY and element not in _TORCH_ONLY:
            raise UnsupportedError(f"Triton kernel {kernel.name!r}: the host's interpreter takes no *{element} "
                                   f"pointer (it takes {', '.join(sorted({*_NUMPY, *_TORCH_ONLY}))})")
    constexprs = dict(kernel.constexprs)

    def tensor(view: np.ndarray, element: str) -> Any:
        torch_name, numpy_type = _TORCH_ONLY.get(element, (None, _NUMPY.get(element)))
        whole = view[:view.nbytes - view.nbytes % np.dtype(numpy_type).itemsize].view(numpy_type)
        with warnings.catch_warnings():  # (a readonly binding's view is not writable; the kernel only reads it)
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(whole)
        return t.view(getattr(torch, torch_name)) if torch_name else t

    def run(ctx: Any) -> None:
        arguments = [tensor(ctx.binding(i), element) for i, element in enumerate(pointers)]
        for word, kind in zip(ctx.words, scalars):
            arguments.append(float(np.uint32(word).view(np.float32)) if kind == "fp32" else
                             int(np.uint32(word).view(np.int32)) if kind == "i32" else int(word))
        with _one_at_a_time:
            kernel.function[tuple(ctx.workgroups)](**dict(zip(names, arguments)), **constexprs)

    return run
