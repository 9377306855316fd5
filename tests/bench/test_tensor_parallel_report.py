"""bench.tensor_parallel's report is drawn only on a GPU machine: its code is exercised here on results of the same
shape."""

import numpy as np

import hal
from bench import in_processes, tensor_parallel
from examples.decode import Config, random_weights


def _row(name, gpus, speed, match=True, loops=True):
    return dict(competitor=name, gpus=gpus, tokens_per_s=speed, us_per_token=1e6 / speed, first_s=1.0,
                tokens_match=match, loops=loops)


def test_the_report_gives_each_target_its_ratio():
    rows = [_row("hal, 1 GPU, no communicator", 1, 700.0), _row("hal, 1 GPU", 1, 690.0), _row("hal, 2 GPUs", 2, 1300.0),
            _row("hal, 2 GPUs, a submission per token", 2, 1400.0, loops=False),
            _row("hal, 2 GPUs, NCCL_PROTO=LL", 2, 1350.0),
            _row("PyTorch: one", 1, 600.0), _row("PyTorch, torch.distributed over 2 GPUs: x", 2, 800.0),
            dict(competitor="PyTorch, torch.distributed over 4 GPUs: x", gpus=4, error="a rank gave no result")]
    meta = dict(device="a GPU", gpus=2, date="2026-11-29", config="Config()", parameters=1.2e9,
                floors=dict(node_us=0.5, copy_gb_per_s=4000.0, loop_iteration_us=15.0), bytes_per_token=4.6e9,
                dispatches_per_token=81, kernels_alone_us={2: 700.0, 4: None})
    text = tensor_parallel.report(dict(meta=meta, rows=rows))
    assert "the ranks' kernels alone (their all_reduces left out, wrong tokens): 2 GPUs 700.0 µs, 4 GPUs failed a " \
           "token" in text
    assert "| hal, 2 GPUs | 2 | 1300 | 769.2 | 1.00 | yes |" in text
    assert "- 2 GPUs 1.93x one GPU's tokens/s (hal, 2 GPUs, NCCL_PROTO=LL against hal, 1 GPU, no communicator): " \
           ">= 1.7 met" in text  # the fastest with device loops against the fastest on one GPU
    assert "- 4 GPUs: not run (2 GPU(s) here)" in text
    parted = tensor_parallel.report(dict(meta=meta, rows=[r for r in rows if "1 GPU" not in r["competitor"]]))
    assert "- 2 GPUs: hal's rows on 2 and on 1 GPU not both in this run (--parts)" in parted
    assert "- hal on 1 GPU(s) 1.17x the fastest PyTorch row there: >= 1.5 MISSED" in text
    assert "- hal on 2 GPU(s) 1.69x the fastest PyTorch row there: >= 1.5 met" in text
    assert "| PyTorch, torch.distributed over 4 GPUs: x | 4 | - | - | - | a rank gave no result |" in text
    assert "a token moves at least 4.60 GB, 1150 µs at the copy bandwidth" in text
    assert "its 81 dependent dispatches take at least 40.5 µs" in text


def test_a_row_from_ranks_is_the_slowest_rank_s():
    rows = [dict(error=None, tokens_per_s=100.0, compile_s=3.0, match=True),
            dict(error=None, tokens_per_s=90.0, compile_s=4.0, match=False)]
    row = tensor_parallel.slowest_rank_row("PyTorch", 2, rows)
    assert row["tokens_per_s"] == 90.0 and row["first_s"] == 4.0 and not row["tokens_match"]


def test_each_row_is_told_as_it_is_measured(capsys):
    row = _row("hal, 2 GPUs", 2, 1300.0)
    assert tensor_parallel.progress(row) is row
    failed = dict(competitor="PyTorch, torch.distributed over 4 GPUs: x", gpus=4, error="a rank gave no result")
    tensor_parallel.progress(failed)
    assert capsys.readouterr().err.splitlines() == ["hal, 2 GPUs: 1300 tokens/s",
                                                    "PyTorch, torch.distributed over 4 GPUs: x: a rank gave no result"]


def test_a_row_s_processes_give_their_result_or_say_they_gave_none():
    assert in_processes(_put_sum, [(1, 2), (3, 4)], 60) in ([3, 7], [7, 3])
    (row,) = in_processes(_put_nothing, [()], 2)
    assert row["error"].startswith("no result within 2 s")


def test_the_weights_go_to_the_rows_processes_whole(tmp_path):
    config = Config(layers=1, dim=64, heads=2, ffn=128, vocab=32, max_sequence=8)
    weights = random_weights(config, seed=1)
    tensor_parallel.save_weights(weights, str(tmp_path))
    loaded = tensor_parallel.load_weights(config, str(tmp_path))
    for name in tensor_parallel.WEIGHT_FIELDS:
        assert np.array_equal(getattr(loaded, name), getattr(weights, name))


def _put_sum(a, b, results):
    results.put(a + b)


def _put_nothing(results):
    pass


def test_the_kernels_alone_leave_out_every_all_reduce():
    config = Config(layers=2, dim=256, heads=2, ffn=512, vocab=64, max_sequence=16)  # (a rank: 128 columns)
    weights = random_weights(config, seed=2)
    devices = [hal.create_device("host") for _ in range(2)]
    try:
        with hal.create_communicator(devices) as comm:
            decoder = tensor_parallel.KernelsAlone(devices[0], weights, communicator=comm)
            loop = [c for c in decoder.command_buffer.commands if c.kind == hal.CommandKind.WHILE_NONZERO][-1]
            assert [c.kind for c in loop.body.commands].count("all_reduce") == 0
            assert sum(c.kind == hal.CommandKind.DISPATCH for c in loop.body.commands) == 5 * config.layers + 1
    finally:
        for d in devices:
            d.close()
