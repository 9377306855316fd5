"""The native encoder (encoder.c): compiled with the system C compiler on first use, cached on disk.

A cffi call from Python costs about 0.7 µs on a small CPU, more than lavapipe spends on most vkCmd*
calls; crossing into C once per recording removes that cost. It is a plain shared library (no
Python headers, no Vulkan headers), loaded with cffi's ABI mode. Without a C compiler, or with
HAL_VULKAN_DISABLE_NATIVE_ENCODER set, the encoder replays the same stream from Python instead.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from array import array
from collections.abc import Callable
from pathlib import Path

import cffi

from hal.executable import DiskCache

SOURCE = Path(__file__).with_name("encoder.c")
# Every argument an integer (addresses too): no cffi type conversion on the way in.
DECLARATION = ("int64_t hal_vk_encode(uintptr_t cb, uintptr_t stream, uint64_t n, uintptr_t fns, uintptr_t barrier, "
               "uint32_t stages);")
log = logging.getLogger("hal.vulkan")


class NativeEncoder:
    """The loaded library and the cffi instance that calls it."""

    __slots__ = ("ffi", "lib", "path")

    def __init__(self, path: str) -> None:
        self.ffi = cffi.FFI()
        self.ffi.cdef(DECLARATION)
        self.lib = self.ffi.dlopen(path)
        self.path = path


@functools.lru_cache(maxsize=1)
def load() -> NativeEncoder | None:
    """The native encoder, or None (and why, logged) when it cannot be built here."""
    if os.environ.get("HAL_VULKAN_DISABLE_NATIVE_ENCODER"):
        return None
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        log.warning("no C compiler found: the Vulkan encoder falls back to Python (slower recording)")
        return None
    key = hashlib.sha256(SOURCE.read_bytes() + compiler.encode()).hexdigest()[:32] + ".so"
    cache = DiskCache("vulkan-encoder")
    cached = None if cache.directory is None else cache.directory / key
    if cached is not None and cached.exists():
        return NativeEncoder(str(cached))
    with tempfile.TemporaryDirectory(prefix="hal-encoder-") as tmp:
        out = Path(tmp) / key
        done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", str(out), str(SOURCE)],
                              capture_output=True, text=True)
        if done.returncode:
            log.warning("the native Vulkan encoder did not compile; falling back to Python:\n%s", done.stderr)
            return None
        if cached is not None:
            cache.put(key, out.read_bytes())
            if cached.exists():
                return NativeEncoder(str(cached))
        return NativeEncoder(str(out))  # loaded before the directory goes: Linux keeps it mapped


def bind(encoder: NativeEncoder, vkcb: int, fns: array, barrier: int, stages: int) -> Callable[[array], int]:
    """hal_vk_encode for one command buffer: a function of the stream alone (an array of uint64)."""
    encode, table = encoder.lib.hal_vk_encode, fns.buffer_info()[0]

    def run(stream: array) -> int:
        address, n = stream.buffer_info()
        return encode(vkcb, address, n, table, barrier, stages)

    return run
