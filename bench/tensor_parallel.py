"""Tensor-parallel decode across the GPUs of one machine (issue 48, item 3), against PyTorch at its best.

The decode example (examples/decode) on a model large enough for the split to pay, LARGE (about 1.2B parameters,
float32), split Megatron style over 1, 2, 4 and 8 GPUs (as many as the machine has): a hal communicator (NCCL) joins
the ranks, all in one process, each rank's Decoder records the whole run once (the collectives inside the device-side
loops) and a run is one submission per rank. Rows: hal on one GPU without a communicator, and on w GPUs with one
(w = 1: NCCL with one rank); PyTorch at its best, bench.decode_torch's torch.compile with the step captured in a CUDA
graph per token, on one GPU, and split the same way over w GPUs (one process per GPU, torch.distributed with NCCL, the
all_reduces torch's functional ones, traced by torch.compile and captured in the graph; w = 1: a process group of one
rank; w > 1 also with PyTorch's one-shot all_reduce over symmetric memory, torch.ops.symm_mem, the small all_reduces'
fastest path in PyTorch between the GPUs of one machine, as hal's peer kernel is in hal); then hal a submission per
token (the step recorded without the loops, what the decoder falls back to where the loops' collectives are refused:
the ranks taken in turn at every token, since a rank's queue that runs ahead waits for ever on its peers' part of an
all_reduce), and hal on w > 1 GPUs with its all_reduces through NCCL instead of its peer kernel
(HAL_CUDA_PEER_ALL_REDUCE=0; backends.cuda_graph.peer_all_reduce serves those by default), under NCCL's
default and each of its protocols (NCCL_VARIANTS). Each row: tokens/s over STEPS positions (the wall from the first
queued call to the tokens read back), the median of RUNS after a warm-up, the first use apart, and whether its tokens
equal numpy's (model.reference_generate on the whole model) on every rank. Beside the one GPU's floors (bytes,
dependent dispatches), each split's kernels alone (KernelsAlone: its all_reduces left out, so its tokens are wrong),
what a token costs before its all_reduces.

Each row runs in processes of its own (hal: one for all its ranks; PyTorch split: one per GPU), which load the
weights the parent saved once: a row that hangs (a collective whose peers never come) is cut off after
ROW_TIMEOUT_S with where it stood, and the run goes on; NCCL reads its environment once a process. Both sides run
NCCL without graph mixing (NCCL_GRAPH_MIXING_SUPPORT=0, what hal's communicator sets: docs/concepts/collectives.md),
unless the environment says otherwise.

Targets (issue 48): 2 GPUs >= 1.7x one GPU's tokens/s, 4 GPUs >= 3x (hal's fastest row with device loops at w GPUs
against its fastest row on one); >= 1.5x the fastest PyTorch row at the same GPU count.

    python -m bench.tensor_parallel [--json PATH] [--layers N] [--worlds 1,2,4,8] [--parts hal,torch,nccl]
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import hal
from bench import emit, in_processes
from examples.decode import Config, Decoder, random_weights, reference_generate
from examples.decode.model import Weights, shard

LARGE = Config(layers=16, dim=2048, heads=16, ffn=8192, vocab=32000, max_sequence=512)
PROMPT = [1, 2, 3, 4]
STEPS, RUNS = 64, 3
WORLDS = (1, 2, 4, 8)
PARTS = ("hal", "torch", "nccl")  # hal's rows; PyTorch's; hal with its all_reduces through NCCL (NCCL_VARIANTS)
NCCL_VARIANTS = ({}, {"NCCL_PROTO": "LL"}, {"NCCL_PROTO": "LL128"}, {"NCCL_PROTO": "Simple"})  # with PEER_OFF
PEER_OFF = {"HAL_CUDA_PEER_ALL_REDUCE": "0"}  # (backends.cuda_graph.peer_all_reduce's switch)
SPEEDUP_TARGETS = {2: 1.7, 4: 3.0}
TORCH_TARGET = 1.5
ROW_TIMEOUT_S = 300  # what a hung row costs a run (a GPU call has 600 s)
WEIGHT_FIELDS = ("embed", "attn_norm", "qkv", "wo", "ffn_norm", "w1", "w3", "w2", "final_norm", "output", "rope")


def gpu_count() -> int:
    try:
        return len(hal.drivers.get_driver("cuda").devices())
    except hal.UnsupportedError:
        return 0


def save_weights(weights: Weights, directory: str) -> None:
    """The weights as one .npy file a field in `directory`, for the rows' processes (load_weights)."""
    for name in WEIGHT_FIELDS:
        np.save(os.path.join(directory, f"{name}.npy"), getattr(weights, name))


def load_weights(config: Config, directory: str) -> Weights:
    """What save_weights wrote, mapped rather than read (each rank keeps only its shard)."""
    return Weights(config, **{name: np.load(os.path.join(directory, f"{name}.npy"), mmap_mode="r")
                              for name in WEIGHT_FIELDS})


class KernelsAlone(Decoder):
    """The split decoder with its all_reduces left out (its tokens wrong): the ranks' kernels alone, what a token
    costs before the all_reduces, the floor under a split's rows (kernels_alone)."""

    def all_reduce(self, cb: hal.CommandBuffer, part: hal.BufferRef, dtype: type, op: str = "sum") -> None:
        pass


def hal_row(config: Config, directory: str, world: int, expected: list[int], communicate: bool = True,
            device_loops: bool = True, environment: dict[str, str] | None = None) -> dict:
    """hal on `world` GPUs (a communicator unless `communicate` is False, on one GPU), in a process of its own;
    `device_loops` False: a submission per position; `environment`: set in its process (NCCL's variables, hal's
    switches)."""
    name = f"hal, {world} GPU{'s' if world > 1 else ''}" + ("" if communicate else ", no communicator") + \
        ("" if device_loops else ", a submission per token") + \
        "".join(f", {key}={value}" for key, value in (environment or {}).items())
    row = in_processes(_hal_ranks, [(config, directory, world, expected, communicate, device_loops,
                                     environment or {}, Decoder)], ROW_TIMEOUT_S)[0]
    refused = row.pop("refused", None)
    if refused:
        name += f" (its loops refused, so a submission per token: {refused})"
    return dict(competitor=name, gpus=world, loops=device_loops, **row)


def kernels_alone(config: Config, directory: str, world: int) -> float | None:
    """µs a token of the split over `world` GPUs with its all_reduces left out (KernelsAlone), in a process of its
    own; None if it failed."""
    row = in_processes(_hal_ranks, [(config, directory, world, [], True, True, {}, KernelsAlone)], ROW_TIMEOUT_S)[0]
    return row.get("us_per_token")


def _hal_ranks(config: Config, directory: str, world: int, expected: list[int], communicate: bool,
               device_loops: bool, environment: dict[str, str], kind: type[Decoder], results) -> None:
    """The process of one hal row: its row, or why there is none, put on `results`."""
    faulthandler.dump_traceback_later(ROW_TIMEOUT_S - 20, exit=True)  # where a hung row stood, before it is cut off
    os.environ.update(environment)
    try:
        row = _hal_measure(load_weights(config, directory), world, expected, communicate, device_loops, kind)
    except Exception as e:  # the parent waits for a result: never leave it none
        row = dict(error=f"{type(e).__name__}: {e}")
    results.put(row)


def _hal_measure(weights: Weights, world: int, expected: list[int], communicate: bool, device_loops: bool,
                 kind: type[Decoder]) -> dict:
    """Every rank's decoder of class `kind` (Decoder, or KernelsAlone), the runs timed."""
    devices: list[hal.Device] = []
    try:
        devices = [hal.create_device(f"cuda:{i}") for i in range(world)]
        comm = hal.create_communicator(devices) if communicate else None
        try:
            first = time.perf_counter()
            decoders = [kind(d, weights, communicator=comm, device_loops=device_loops) for d in devices]

            def run() -> float:
                for decoder in decoders:
                    decoder.reset(PROMPT)
                t0 = time.perf_counter()
                if device_loops:
                    for decoder in decoders:
                        decoder.generate(STEPS)
                else:  # the ranks in turn at every position (the module's docstring)
                    for _ in range(STEPS):
                        for decoder in decoders:
                            decoder.step()
                for decoder in decoders:
                    decoder.tokens()
                return time.perf_counter() - t0

            run()
            first_s = time.perf_counter() - first
            wall = statistics.median(run() for _ in range(RUNS))
            return dict(tokens_per_s=STEPS / wall, us_per_token=wall / STEPS * 1e6, first_s=first_s,
                        tokens_match=all(decoder.tokens() == expected for decoder in decoders),
                        refused=decoders[0].loops_refused)
        finally:
            if comm is not None:
                comm.close()
    finally:
        for d in devices:
            d.close()


def torch_row(weights: Weights, expected: list[int]) -> dict:
    """PyTorch on one GPU, no process group (in this process: no NCCL to hang)."""
    from bench.decode_torch import COMPILED_GRAPH, torch_rows
    row = torch_rows(weights, PROMPT, STEPS, expected, RUNS, rows=(COMPILED_GRAPH,))[COMPILED_GRAPH]
    return slowest_rank_row(f"PyTorch: {COMPILED_GRAPH}", 1, [row])


def slowest_rank_row(name: str, world: int, rows: list[dict]) -> dict:
    """One row from every rank's: the slowest rank's speed; tokens that match on every rank."""
    failed = [r["error"] for r in rows if r["error"]]
    if failed:
        return dict(competitor=name, gpus=world, error=failed[0])
    slowest = min(rows, key=lambda r: r["tokens_per_s"])
    return dict(competitor=name, gpus=world, tokens_per_s=slowest["tokens_per_s"],
                us_per_token=1e6 / slowest["tokens_per_s"], first_s=max(r["compile_s"] for r in rows),
                tokens_match=all(r["match"] for r in rows))


def _torch_rank(rank: int, world: int, directory: str, config: Config, expected: list[int], symmetric: bool,
                results) -> None:
    """One process of the PyTorch rows split over `world` GPUs: its shard, torch.compile and a CUDA graph per
    token, its all_reduces in the graph (NCCL's, or with `symmetric` PyTorch's one-shot kernel over symmetric
    memory)."""
    faulthandler.dump_traceback_later(ROW_TIMEOUT_S - 20, exit=True)
    os.environ.setdefault("NCCL_GRAPH_MIXING_SUPPORT", "0")  # as hal's (the module's docstring)
    try:
        import torch
        import torch.distributed as dist

        from bench.decode_torch import COMPILED_GRAPH, torch_rows
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method="file://" + os.path.join(directory, "torch-id"), rank=rank,
                                world_size=world, device_id=torch.device(f"cuda:{rank}"))
        try:
            part = shard(load_weights(config, directory), rank, world)
            row = torch_rows(part, PROMPT, STEPS, expected, RUNS, device=f"cuda:{rank}", rows=(COMPILED_GRAPH,),
                             world=world, group=dist.group.WORLD, symmetric=symmetric)[COMPILED_GRAPH]
        finally:
            dist.destroy_process_group()
    except Exception as e:  # the parent waits for a result from each: never leave it none
        row = dict(error=f"{type(e).__name__}: {e}")
    results.put(row)


def torch_parallel_row(config: Config, directory: str, world: int, expected: list[int],
                       symmetric: bool = False) -> dict:
    """PyTorch split over `world` GPUs, one process per GPU; `symmetric`: its all_reduces over symmetric memory."""
    from bench.decode_torch import COMPILED_GRAPH
    name = f"PyTorch, torch.distributed over {world} GPU{'s' if world > 1 else ''}" + \
        (", symmetric memory one-shot all_reduces" if symmetric else "") + f": {COMPILED_GRAPH}"
    rows = in_processes(_torch_rank, [(r, world, directory, config, expected, symmetric) for r in range(world)],
                        ROW_TIMEOUT_S)
    return slowest_rank_row(name, world, rows)


def progress(row: dict) -> dict:
    """`row`, told on stderr as it is measured, so a run cut short by a time limit still shows what it had."""
    speed = row["error"] if "error" in row else f"{row['tokens_per_s']:.0f} tokens/s"
    print(f"{row['competitor']}: {speed}", file=sys.stderr, flush=True)
    return row


def run(config: Config, worlds: tuple[int, ...] = WORLDS, parts: tuple[str, ...] = PARTS) -> dict:
    """The rows of `parts` at each GPU count in `worlds` that this machine has, and one GPU's in any case (the
    targets' ratios are to it)."""
    import torch
    weights = random_weights(config, seed=0)
    expected, _ = reference_generate(weights, PROMPT, STEPS)
    count = gpu_count()
    run_on = sorted({1, *(w for w in worlds if w <= count)})
    rows: list[dict] = []
    alone: dict[int, float | None] = {}  # the split's kernels alone, µs a token (kernels_alone)
    with tempfile.TemporaryDirectory() as directory:
        save_weights(weights, directory)
        if "hal" in parts:
            rows.append(progress(hal_row(config, directory, 1, expected, communicate=False)))
            rows += [progress(hal_row(config, directory, w, expected)) for w in run_on]
        if "torch" in parts:
            rows.append(progress(torch_row(weights, expected)))
            rows += [progress(torch_parallel_row(config, directory, w, expected)) for w in run_on]
            rows += [progress(torch_parallel_row(config, directory, w, expected, symmetric=True))
                     for w in run_on if w > 1]
        if "hal" in parts:
            rows += [progress(hal_row(config, directory, w, expected, device_loops=False)) for w in run_on]
            alone = {w: kernels_alone(config, directory, w) for w in run_on if w > 1}
        if "nccl" in parts:
            rows += [progress(hal_row(config, directory, w, expected, environment={**PEER_OFF, **variant}))
                     for w in run_on if w > 1 for variant in NCCL_VARIANTS]
    from bench.decode import bytes_per_token, measure_floors
    with hal.create_device("cuda") as dev:
        floors = measure_floors(dev)
    meta = dict(device=torch.cuda.get_device_name(), gpus=count, date=time.strftime("%Y-%m-%d"), config=repr(config),
                parameters=sum(getattr(weights, n).size for n in ("embed", "qkv", "wo", "w1", "w3", "w2", "output")),
                floors=floors, bytes_per_token=bytes_per_token(config, STEPS), kernels_alone_us=alone,
                dispatches_per_token=5 * config.layers + 1)
    return dict(meta=meta, rows=rows)


def report(result: dict) -> str:
    meta, rows = result["meta"], result["rows"]
    lines = [f"## Tensor-parallel decode on {meta['gpus']} x {meta['device']}, {meta['date']}", "",
             f"{meta['config']}, {meta['parameters'] / 1e9:.2f}B parameters in float32; {STEPS} positions after a "
             f"{len(PROMPT)}-token prompt, one submission per rank (a submission per token: the ranks in turn at "
             f"each); median of {RUNS} runs after a warm-up; NCCL without graph mixing on both sides.", "",
             "| competitor | GPUs | tokens/s | µs/token | first use s | tokens match numpy |",
             "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['competitor']} | {r['gpus']} | - | - | - | {r['error']} |")
            continue
        first = "-" if r["first_s"] is None else f"{r['first_s']:.2f}"
        lines.append(f"| {r['competitor']} | {r['gpus']} | {r['tokens_per_s']:.0f} | {r['us_per_token']:.1f} | "
                     f"{first} | {'yes' if r['tokens_match'] else 'NO'} |")
    floors, moved = meta["floors"], meta["bytes_per_token"]
    lines += ["", f"Floors on one GPU: a token moves at least {moved / 1e9:.2f} GB, "
                  f"{moved / floors['copy_gb_per_s'] / 1e3:.0f} µs at the copy bandwidth measured here "
                  f"({floors['copy_gb_per_s']:.0f} GB/s, read + write; split over w GPUs, each moves about 1/w of it); "
                  f"its {meta['dispatches_per_token']} dependent dispatches take at least "
                  f"{meta['dispatches_per_token'] * floors['node_us']:.1f} µs ({floors['node_us']:.2f} µs a node of a "
                  f"chain of empty kernels in a graph)."]
    alone = [f"{w} GPUs {us:.1f} µs" if us else f"{w} GPUs failed" for w, us in meta["kernels_alone_us"].items()]
    if alone:
        lines += ["", f"Split, the ranks' kernels alone (their all_reduces left out, wrong tokens): "
                      f"{', '.join(alone)} a token: the floor under the split's rows."]
    best: dict[int, dict] = {}  # hal's fastest row at each GPU count: any on one GPU, with device loops on several
    for r in rows:
        if r["competitor"].startswith("hal") and "error" not in r and (r["gpus"] == 1 or r["loops"]) and \
                r["tokens_per_s"] > best.get(r["gpus"], {}).get("tokens_per_s", 0.0):
            best[r["gpus"]] = r
    torch_speed: dict[int, float] = {}
    for r in rows:  # the fastest PyTorch row at each GPU count
        if r["competitor"].startswith("PyTorch") and "error" not in r:
            torch_speed[r["gpus"]] = max(torch_speed.get(r["gpus"], 0.0), r["tokens_per_s"])
    lines += ["", "Targets (issue 48):"]
    for world, target in SPEEDUP_TARGETS.items():
        if world in best and 1 in best:
            ratio = best[world]["tokens_per_s"] / best[1]["tokens_per_s"]
            lines.append(f"- {world} GPUs {ratio:.2f}x one GPU's tokens/s ({best[world]['competitor']} against "
                         f"{best[1]['competitor']}): >= {target} {'met' if ratio >= target else 'MISSED'}")
        elif world <= meta["gpus"]:
            lines.append(f"- {world} GPUs: hal's rows on {world} and on 1 GPU not both in this run (--parts)")
        else:
            lines.append(f"- {world} GPUs: not run ({meta['gpus']} GPU(s) here)")
    for world, theirs in torch_speed.items():
        if world in best:
            ratio = best[world]["tokens_per_s"] / theirs
            lines.append(f"- hal on {world} GPU(s) {ratio:.2f}x the fastest PyTorch row there: >= {TORCH_TARGET} "
                         f"{'met' if ratio >= TORCH_TARGET else 'MISSED'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layers", type=int, default=LARGE.layers, help="fewer layers, for a quick look")
    parser.add_argument("--worlds", default=",".join(map(str, WORLDS)),
                        help="the GPU counts to split over, of those the machine has (a long run in parts; one "
                             "GPU's rows, the targets' reference, run in any case)")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help="which rows: hal (hal's), torch (PyTorch's), nccl (hal's all_reduces through NCCL, "
                             "under each NCCL_PROTO); a long run in parts")
    parser.add_argument("--json", default=None, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    parts = tuple(args.parts.split(","))
    if not set(parts) <= set(PARTS):
        parser.error(f"--parts: choose among {', '.join(PARTS)}; got {args.parts}")
    config = Config(**{**LARGE.__dict__, "layers": args.layers})
    result = run(config, tuple(int(w) for w in args.worlds.split(",")), parts)
    return emit(result, report(result), args.json)


if __name__ == "__main__":
    raise SystemExit(main())
