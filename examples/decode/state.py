"""The decode state's layout (examples/decode/kernels.py says what each word holds) and its argmax key, which every
kernel set and the host read the same way."""

from __future__ import annotations

import numpy as np

STATE_WORDS = 8  # uint32 words
NONE = 0xFFFFFFFF  # state[3] where the prompt gives no token
KEY_WORD = 6  # the argmax key's first word: words 6 and 7, one little-endian uint64


def argmax_key(value: np.float32, index: int) -> int:
    """The argmax key of logit `value` at `index`: a 63-bit integer whose order is numpy's argmax order (the first
    NaN, else the first largest; -0 as +0), so a kernel picks across workgroups with one atomic max. The logit's
    bits mapped to an order (NaN highest), above 31 bits of 2**31 - 1 - index (a lower index, a larger key)."""
    value = np.float32(value)
    if np.isnan(value):
        order = 0xFFFFFFFF
    else:
        bits = int((value + np.float32(0.0)).view(np.uint32))  # (-0 + 0 is +0)
        order = bits ^ 0xFFFFFFFF if bits & 0x80000000 else bits | 0x80000000
    return order << 31 | (0x7FFFFFFF - index)


def chosen_token(state: np.ndarray) -> int:
    """The token the key in `state` (its uint32 words) names."""
    return 0x7FFFFFFF - (int(state[KEY_WORD]) & 0x7FFFFFFF)
