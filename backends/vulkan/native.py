"""The native Vulkan encoder (encoder.c), built by backends.native: one call replays a recording.

Without a C compiler, or with HAL_VULKAN_DISABLE_NATIVE_ENCODER set, the encoder replays the same
stream from Python instead.
"""

from __future__ import annotations

import functools
import os
from array import array
from collections.abc import Callable
from pathlib import Path

from backends.native import NativeLibrary
from backends.native import load as load_library

SOURCE = Path(__file__).with_name("encoder.c")
# Every argument an integer (addresses too): no cffi type conversion on the way in.
DECLARATION = ("int64_t hal_vk_encode(uintptr_t cb, uintptr_t stream, uint64_t n, uintptr_t fns, uintptr_t barrier, "
               "uint32_t stages);")


@functools.lru_cache(maxsize=1)
def load() -> NativeLibrary | None:
    """The native encoder, or None when HAL_VULKAN_DISABLE_NATIVE_ENCODER is set or it cannot be built."""
    if os.environ.get("HAL_VULKAN_DISABLE_NATIVE_ENCODER"):
        return None
    return load_library(SOURCE, DECLARATION, "the native Vulkan encoder")


def bind(encoder: NativeLibrary, vkcb: int, fns: array, barrier: int, stages: int) -> Callable[[array], int]:
    """hal_vk_encode for one command buffer: a function of the stream alone (an array of uint64)."""
    encode, table = encoder.lib.hal_vk_encode, fns.buffer_info()[0]

    def run(stream: array) -> int:
        address, n = stream.buffer_info()
        return encode(vkcb, address, n, table, barrier, stages)

    return run
