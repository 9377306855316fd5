"""The decode example on every backend present: 32 greedy tokens after a prompt identical to the numpy reference,
the last logits within LOGIT_TOLERANCE of it (relative to the largest), in one submission (a while region) and one
submission per position; on CUDA the loop is one graph with conditional nodes and no host nodes, instantiated once
whatever the number of steps."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import numpy as np
import pytest

import hal
from examples.decode import Decoder, kernels, random_weights, reference_generate
from examples.decode.demo import LOGIT_TOLERANCE, PROMPT
from tests.conftest import open_device

DEVICES = ["host", pytest.param("vulkan", marks=pytest.mark.vulkan), pytest.param("cuda", marks=pytest.mark.cuda)]
TOKENS = 32


@pytest.fixture(scope="module")
def weights():
    return random_weights()


@pytest.fixture(scope="module")
def expected(weights):
    return reference_generate(weights, PROMPT, len(PROMPT) - 1 + TOKENS)


@pytest.fixture(scope="module", params=DEVICES)
def decoder(request, weights):
    dev = open_device(request.param)
    if not dev.capabilities.supports_int64_atomics:
        dev.close()
        pytest.skip(f"{dev} has no 64-bit atomics on buffers, which the decoder's argmax key needs")
    yield Decoder(dev, weights)
    dev.close()


def check(decoder, expected, steps):
    tokens, logits = expected
    assert decoder.tokens() == tokens[:max(len(PROMPT), steps + 1)]
    if steps == len(tokens) - 1:
        assert np.max(np.abs(decoder.logits() - logits)) <= LOGIT_TOLERANCE * np.max(np.abs(logits))


def test_generate_in_one_submission(decoder, expected):
    decoder.reset(PROMPT)
    steps = len(PROMPT) - 1 + TOKENS
    decoder.generate(steps)
    check(decoder, expected, steps)


def test_one_submission_per_position_then_the_rest_at_once(decoder, expected):
    decoder.reset(PROMPT)
    for _ in range(6):
        decoder.step()
    check(decoder, expected, 6)
    decoder.generate(len(PROMPT) - 1 + TOKENS - 6)
    check(decoder, expected, len(PROMPT) - 1 + TOKENS)


def test_bad_prompts_and_too_many_steps_are_refused(decoder):
    for prompt in ([], [decoder.config.vocab], [0] * (decoder.config.max_sequence + 1)):
        with pytest.raises(hal.ValidationError, match="a prompt is"):
            decoder.reset(prompt)
    decoder.reset(PROMPT)
    with pytest.raises(hal.ValidationError, match="go past the last position"):
        decoder.generate(decoder.config.max_sequence)
    with pytest.raises(hal.ValidationError, match="at least 1"):
        decoder.generate(0)


def test_the_cuda_loop_is_one_graph_of_conditional_nodes(decoder):
    if decoder.device.driver != "cuda":
        pytest.skip("CUDA only: the graph read back from the driver")
    decoder.reset(PROMPT)
    decoder.generate(3)
    decoder.tokens()
    emitted = decoder.command_buffer.emitter.emitted_graph()
    types = nx.get_node_attributes(emitted, "type")
    assert "CU_GRAPH_NODE_TYPE_CONDITIONAL" in types.values()
    assert "CU_GRAPH_NODE_TYPE_HOST" not in types.values()
    assert decoder.command_buffer.emitter.instantiations == 1  # generate(k) with a new k patches the start node
    decoder.step()  # one step: the step without loops, no conditional node to pass
    decoder.tokens()
    types = nx.get_node_attributes(decoder.step_buffer.emitter.emitted_graph(), "type")
    assert "CU_GRAPH_NODE_TYPE_CONDITIONAL" not in types.values()
    assert list(types.values()).count("CU_GRAPH_NODE_TYPE_KERNEL") == 1 + decoder.dispatches_per_step()


def test_ties_and_nan_logits_give_numpy_s_argmax(decoder, weights):
    """The argmax follows numpy's, the first NaN, else the first of the largest, so the token fed back is always
    one of the vocabulary's, whatever the logits."""
    c = decoder.config
    for nan_row, expected in ((None, 0), (5, 5)):
        output = np.zeros((c.vocab, c.dim), np.float32)  # every logit 0: a tie, the first index wins
        if nan_row is not None:
            output[nan_row] = np.nan
        decoder.weights["output"].write(output)
        decoder.reset(PROMPT)
        decoder.generate(len(PROMPT) + 2)
        assert decoder.tokens()[len(PROMPT):] == [expected] * 3
    decoder.weights["output"].write(np.ascontiguousarray(weights.output))


def test_configurations_the_kernels_cannot_run_are_refused(decoder):
    from examples.decode import Config
    for config in (Config(dim=320, heads=5), Config(dim=256, heads=16), Config(ffn=768), Config(vocab=4088)):
        with pytest.raises(hal.ValidationError, match="the kernels need"):
            Decoder(decoder.device, random_weights(config))


def test_one_submission_across_several_attention_chunks(decoder, weights):
    """70 positions in one submission: the attention's partials come from one chunk of 32 positions, then two,
    then three, each combined by attn_out."""
    steps = 70
    expected_tokens, expected_logits = reference_generate(weights, PROMPT, steps)
    decoder.reset(PROMPT)
    decoder.generate(steps)
    assert decoder.tokens() == expected_tokens
    assert np.max(np.abs(decoder.logits() - expected_logits)) <= LOGIT_TOLERANCE * np.max(np.abs(expected_logits))


def test_a_wide_attention_s_partials_combined_by_its_last_workgroup(decoder):
    """An attention wider than 256, which CUDA's kernels combine in each head's last workgroup to finish (its count
    cleared for the next layer and zeroed at each submission's start), over 70 positions (up to five chunks), in two
    submissions."""
    from examples.decode import Config
    config = Config(layers=2, dim=512, heads=4, ffn=1024, vocab=512, max_sequence=128)
    assert kernels.combined(config)
    weights = random_weights(config, seed=5)
    expected_tokens, expected_logits = reference_generate(weights, PROMPT, 70)
    wide = Decoder(decoder.device, weights)
    wide.reset(PROMPT)
    wide.generate(30)
    wide.generate(40)
    assert wide.tokens() == expected_tokens
    assert np.max(np.abs(wide.logits() - expected_logits)) <= LOGIT_TOLERANCE * np.max(np.abs(expected_logits))


def test_a_step_is_five_dispatches_a_layer_and_one_more(decoder):
    assert decoder.dispatches_per_step() == 5 * decoder.config.layers + 1


INTERPRETED = """
import hal
from examples.decode import Decoder, random_weights, reference_generate
from examples.decode.demo import PROMPT
weights = random_weights()
steps = len(PROMPT) + 1  # two tokens chosen after the prompt
expected, _ = reference_generate(weights, PROMPT, steps)
with hal.create_device("host") as dev:
    decoder = Decoder(dev, weights, "triton")
    decoder.reset(PROMPT)
    decoder.generate(steps)
    assert decoder.tokens() == expected, (decoder.tokens(), expected)
print("tokens match")
"""


def test_the_host_runs_the_triton_kernels_in_triton_s_interpreter():
    """The Triton set on the host under TRITON_INTERPRET=1 (slow: a few positions) chooses numpy's tokens."""
    pytest.importorskip("triton", reason="Triton is not installed: pip install 'hal-command-buffers[triton]'")
    pytest.importorskip("torch", reason="Triton's interpreter takes torch tensors: pip install torch")
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, TRITON_INTERPRET="1",
               PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "tokens match" in done.stdout, done.stdout + done.stderr


def test_an_unknown_kernel_set_is_refused(weights):
    with pytest.raises(hal.ValidationError, match="kernel sets are native, triton"):
        kernels.source(weights.config, "cutlass")
