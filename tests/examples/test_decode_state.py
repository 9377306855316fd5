"""The argmax key every kernel set picks the next token with: its integer order must be numpy's argmax order."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from examples.decode.state import KEY_WORD, argmax_key, chosen_token

# Few distinct values, so ties, NaNs, infinities and both zeros meet often.
LOGITS = st.lists(st.sampled_from([0.0, -0.0, 1.5, -1.5, 3.0, float("inf"), float("-inf"), float("nan"), 1e-40,
                                   -3.4e38]), min_size=1, max_size=40)


@given(LOGITS)
def test_the_largest_key_names_numpy_s_argmax(values):
    logits = np.array(values, np.float32)
    best = max(argmax_key(v, i) for i, v in enumerate(logits))
    assert 0 < best < 1 << 63  # (a signed 64-bit atomic max orders it too; 0 is below every key)
    state = np.zeros(8, np.uint32)
    state.view(np.uint64)[KEY_WORD // 2] = best
    assert chosen_token(state) == int(np.argmax(logits))


def test_the_key_orders_nan_first_then_the_larger_then_the_earlier():
    assert argmax_key(np.float32("nan"), 9) > argmax_key(np.float32("inf"), 0)
    assert argmax_key(np.float32(-1.0), 0) > argmax_key(np.float32(-2.0), 0)
    assert argmax_key(np.float32(-0.0), 3) == argmax_key(np.float32(0.0), 3)
    assert argmax_key(np.float32(2.0), 3) > argmax_key(np.float32(2.0), 4)
