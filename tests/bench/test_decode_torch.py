"""bench/decode_torch.py on the host: the eager row's tokens and the device-position step's (which the CUDA graph
rows capture) equal numpy's; rows that need CUDA say so instead of raising. The compiled rows are left to the GPU
run (Inductor takes half a minute per bucket on a small CPU)."""

import sys

import pytest

import bench.decode_torch as rivals
from bench import in_processes
from bench.decode_torch import BUCKET, EAGER, GRAPH, K_PER_GRAPH, REDUCE_OVERHEAD, TorchDecoder, torch_rows
from examples.decode.model import random_weights, reference_generate

TORCH_MISSING = "the PyTorch rows need torch (pip install torch)"
PROMPT = [1, 2, 3, 4]


@pytest.fixture(scope="module")
def weights():
    return random_weights()


def test_eager_row_matches_numpy_and_cuda_rows_say_why_not(weights):
    pytest.importorskip("torch", reason=TORCH_MISSING)
    steps = 12
    expected, _ = reference_generate(weights, PROMPT, steps)
    rows = torch_rows(weights, PROMPT, steps, expected, runs=1, device="cpu",
                      rows=(EAGER, GRAPH, REDUCE_OVERHEAD, K_PER_GRAPH))
    eager = rows[EAGER]
    assert eager["error"] is None and eager["match"], eager
    assert eager["tokens_per_s"] > 0 and len(eager["runs"]) == 1 and eager["compile_s"] is None
    assert eager["gpu_us"] is None and eager["kernels"] is None
    for name in (GRAPH, REDUCE_OVERHEAD, K_PER_GRAPH):
        assert rows[name]["error"] == "needs a CUDA device" and not rows[name]["match"]
    counts = rivals.torch_kernel_counts(weights, PROMPT, steps, device="cpu", rows=(EAGER, GRAPH))
    assert counts == {EAGER: "no kernel count on CPU", GRAPH: "needs a CUDA device"}


@pytest.mark.parametrize("complex_rope", [True, False], ids=["complex-rope", "real-rope"])
@pytest.mark.parametrize("prompt, steps", [(PROMPT, BUCKET + 6), (list(range(10, 20)), 5)],
                         ids=["across-buckets", "prompt-only"])
def test_device_position_step_matches_numpy(weights, complex_rope, prompt, steps):
    """The step rows 2 to 5 capture or compile, run uncaptured: masked buckets, the prompt forced on the device."""
    pytest.importorskip("torch", reason=TORCH_MISSING)
    expected, _ = reference_generate(weights, prompt, steps)
    decoder = TorchDecoder(weights, prompt, "cpu", complex_rope=complex_rope)
    decoder.reset()
    for position in range(steps):
        decoder.step(min(position // BUCKET * BUCKET + BUCKET, weights.config.max_sequence))
    assert decoder.tokens[:len(expected)].tolist() == expected
    assert int(decoder.position) == steps


def test_without_torch_every_row_says_so(weights, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    rows = torch_rows(weights, PROMPT, 3, reference_generate(weights, PROMPT, 3)[0], device="cpu")
    assert len(rows) == 5 and all(r["error"] == "torch is not installed" for r in rows.values())
    assert set(rivals.torch_kernel_counts(weights, PROMPT, 3, device="cpu").values()) == {"torch is not installed"}


def test_symmetric_all_reduces_need_a_process_group(weights):
    pytest.importorskip("torch", reason=TORCH_MISSING)
    with pytest.raises(ValueError, match="symmetric all_reduces need a process group"):
        TorchDecoder(weights, PROMPT, "cpu", symmetric=True)


def test_the_split_rows_match_numpy_on_every_rank(tmp_path):
    """Split over two CPU processes (gloo): each rank's shard, its products summed and its logits gathered by torch's
    functional collectives, the eager row's tokens numpy's on both."""
    pytest.importorskip("torch", reason=TORCH_MISSING)
    found = in_processes(_split_rank, [(r, 2, str(tmp_path / "store")) for r in range(2)], 120)
    assert sorted(found) == [(0, None, True), (1, None, True)]


def _split_rank(rank, world, store, results):
    import torch.distributed as dist

    from examples.decode.model import Config, shard
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=world)
    try:
        config = Config(layers=2, dim=256, heads=2, ffn=512, vocab=64, max_sequence=16)
        weights = random_weights(config, seed=1)
        expected, _ = reference_generate(weights, PROMPT, 8)
        row = torch_rows(shard(weights, rank, world), PROMPT, 8, expected, runs=1, device="cpu", rows=(EAGER,),
                         world=world, group=dist.group.WORLD)[EAGER]
        results.put((rank, row["error"], row["match"]))
    finally:
        dist.destroy_process_group()
