"""The decoder with its Triton kernels (examples/decode/kernels_triton.py): compiled for a named architecture without
a device; on CUDA, the greedy tokens of numpy's reference in one submission and one submission per position. (The
host runs the same kernels in Triton's interpreter: tests/examples/test_decode.py.)"""

from __future__ import annotations

import pytest

from examples.decode import Decoder, kernels, random_weights, reference_generate
from examples.decode.demo import PROMPT
from tests.conftest import backend_or_skip, open_device

backend_or_skip("cuda")
pytest.importorskip("triton", reason="Triton is not installed: pip install 'hal-command-buffers[triton]'")

from backends.cuda_graph import triton as cuda_triton  # noqa: E402
from tests.examples.test_decode import TOKENS, check  # noqa: E402


def test_every_kernel_compiles_for_hopper_without_a_device():
    source = kernels.source(random_weights().config, "triton")
    for export in source.exports:
        compiled = cuda_triton.compile_kernel(source.payload[export.name], export, (9, 0))
        assert compiled.name == export.name and not compiled.global_scratch


@pytest.mark.cuda
def test_the_tokens_are_numpy_s_in_one_submission_and_per_position():
    weights = random_weights()
    expected = reference_generate(weights, PROMPT, len(PROMPT) - 1 + TOKENS)
    dev = open_device("cuda")
    try:
        decoder = Decoder(dev, weights, "triton")
        for per_position in (False, True):
            decoder.reset(PROMPT)
            for _ in range(TOKENS + len(PROMPT) - 1 if per_position else 1):
                decoder.generate(1 if per_position else TOKENS + len(PROMPT) - 1)
            check(decoder, expected, TOKENS + len(PROMPT) - 1)
    finally:
        dev.close()
