"""The decode example split over ranks (issue 48, items 1 and 2): Megatron-style tensor parallelism, each rank with
its shard of the weights and its heads' cache, x all-reduced after attn_out and after ffn_out inside the device-side
loops; every rank's tokens equal to the numpy reference of the whole model, its last logits within LOGIT_TOLERANCE.
The host's ranks are the oracle (2, 4 and 8 host devices); on CUDA one GPU runs NCCL with one rank (the collectives
in the loops' conditional bodies), every GPU of the machine where there are several (multi_gpu)."""

from __future__ import annotations

import numpy as np
import pytest

import hal
from examples.decode import Config, Decoder, kernels, random_weights, reference_generate
from examples.decode.demo import LOGIT_TOLERANCE, PROMPT
from examples.decode.model import shard
from tests.conftest import open_device, open_ranks

TOKENS = 16
# A shape the CUDA kernels take split over 1 to 8 ranks (a rank's part: a head of 128 columns, 256 of the ffn, 64 of
# the vocab at least), so that a machine of 8 GPUs runs the multi_gpu case too.
SMALL = Config(layers=2, dim=1024, heads=8, ffn=2048, vocab=512, max_sequence=64)


@pytest.fixture(scope="module")
def weights():
    return random_weights(SMALL, seed=3)


@pytest.fixture(scope="module")
def expected(weights):
    return reference_generate(weights, PROMPT, len(PROMPT) - 1 + TOKENS)


@pytest.mark.parametrize("driver, world", [("host", 2), ("host", 4), ("host", 8),
                                           pytest.param("cuda", 1, marks=pytest.mark.cuda),
                                           pytest.param("cuda", 0, marks=[pytest.mark.cuda, pytest.mark.multi_gpu])])
def test_every_rank_generates_the_reference_s_tokens(weights, expected, driver, world):
    devices = open_ranks(driver, world)
    try:
        try:
            comm = hal.create_communicator(devices)
        except hal.UnsupportedError as e:
            pytest.skip(str(e))
        with comm:
            decoders = [Decoder(d, weights, communicator=comm) for d in devices]
            steps = len(PROMPT) - 1 + TOKENS
            for decoder in decoders:
                decoder.reset(PROMPT)
            for first in (5, steps - 5):  # two submissions per rank: the loops run on the device in each
                for decoder in decoders:
                    decoder.generate(first)
            tokens, logits = expected
            for decoder in decoders:
                assert decoder.tokens() == tokens
                assert np.max(np.abs(decoder.logits() - logits)) <= LOGIT_TOLERANCE * np.max(np.abs(logits))
            loop = [c for c in decoders[0].command_buffer.commands if c.kind == hal.CommandKind.WHILE_NONZERO][-1]
            assert sum(c.kind == "all_reduce" for c in loop.body.commands) == 2 * SMALL.layers + 1
    finally:
        for d in devices:
            d.close()


@pytest.mark.parametrize("refused", [False, True])
def test_one_submission_per_position_asked_for_or_where_loops_are_refused(weights, expected, refused, monkeypatch):
    """device_loops=False records the step without the loops; a backend that refuses the collectives inside the
    loops (here a stand-in refusing any submission holding a loop) gets the same once its first submission fails."""
    devices = [open_device("host") for _ in range(2)]
    submit = type(devices[0]).queue_execute

    def refuse_loops(self, cb, *args, **kwargs):
        if any(c.kind == hal.CommandKind.WHILE_NONZERO for c in cb.commands):
            raise hal.DeviceError("collectives inside a conditional node are not supported (a stand-in)")
        return submit(self, cb, *args, **kwargs)

    if refused:
        monkeypatch.setattr(type(devices[0]), "queue_execute", refuse_loops)
    try:
        with hal.create_communicator(devices) as comm:
            decoders = [Decoder(d, weights, communicator=comm, device_loops=refused) for d in devices]
            for decoder in decoders:
                decoder.reset(PROMPT)
                decoder.generate(len(PROMPT) - 1 + TOKENS)
            for decoder in decoders:
                assert decoder.tokens() == expected[0]
                assert not decoder.device_loops and decoder.dispatches_per_step() == 5 * SMALL.layers + 1
                assert (decoder.loops_refused is not None) == refused
    finally:
        monkeypatch.undo()
        for d in devices:
            d.close()


def test_the_shards_put_back_together_are_the_weights(weights):
    parts = [shard(weights, r, 4) for r in range(4)]
    for name in ("embed", "attn_norm", "ffn_norm", "final_norm", "rope"):
        assert all(getattr(p, name) is getattr(weights, name) for p in parts)
    np.testing.assert_array_equal(np.concatenate([p.output for p in parts]), weights.output)
    q, k, v = (np.concatenate([np.split(p.qkv, 3, axis=1)[i] for p in parts], axis=1) for i in range(3))
    np.testing.assert_array_equal(np.concatenate([q, k, v], axis=1), weights.qkv)
    np.testing.assert_array_equal(np.concatenate([p.wo for p in parts], axis=2), weights.wo)
    np.testing.assert_array_equal(np.concatenate([p.w1 for p in parts], axis=1), weights.w1)
    np.testing.assert_array_equal(np.concatenate([p.w2 for p in parts], axis=2), weights.w2)


def test_a_split_the_kernels_cannot_take_is_refused():
    with pytest.raises(hal.ValidationError, match="split over 4 ranks"):
        kernels.source(Config(), "native", 4, 0)  # 64 columns a rank: the CUDA kernels take multiples of 128
    with pytest.raises(hal.ValidationError, match="the triton kernel set runs on one device"):
        kernels.source(SMALL, "triton", 2, 0)
    with pytest.raises(ValueError, match="must divide by the world"):
        shard(random_weights(SMALL), 0, 3)
