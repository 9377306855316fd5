"""Where a decode token's GPU time goes, kernel by kernel, with early launch (issue 42).

A profiler times each kernel with plain edges (with early launch a kernel's time would include its wait for the one
before), and a profiler session slows every launch after it. So the decode's CUDA kernels are compiled with stamps
(`examples.decode.kernels.source(..., stamps=address)`): thread 0 of block (0, 0) of every kernel writes the GPU's
%globaltimer at its entry, when its griddepcontrol.wait returns and at its exit, in launch order. A kernel's cost on
the chain is the time from its wait returning to the next kernel's wait returning: its work after the wait, the
slowest block's, and the grid's completion and release. Each row: the mean over every instance in 259 positions
(the clock steps by about 1 µs on an H200, so single samples are coarse, means over hundreds are not), on the GPU as
it is (early launch) and opened with supports_early_launch off (plain edges: a kernel's wait returns at its entry),
beside the same decode without stamps (GPU µs a token from CUDA events: what the stamps cost).

    python -m bench.decode_timeline [--json PATH]
"""

from __future__ import annotations

import numpy as np

import hal
from bench import Events, plain_main
from examples.decode import kernels, random_weights, reference_generate
from examples.decode.demo import PROMPT
from examples.decode.runner import Decoder

RUNS = 3  # after a warm-up; the last run's stamps are read


def instances(words: np.ndarray) -> dict[str, np.ndarray]:
    """The records of a stamp buffer (uint64 words) as arrays: each kernel instance's export name, entry, wait's
    return and exit (ns), in launch order."""
    count = min(int(words[0]), kernels.STAMP_CAPACITY)
    first = kernels.STAMP_HEADER_WORDS
    records = words[first:first + 4 * count].reshape(-1, 4).astype(np.int64)
    names = np.array([export.name for export in kernels.EXPORTS])
    return dict(kernel=names[records[:, 0]], entry=records[:, 1], waited=records[:, 2], exit=records[:, 3])


def chain_rows(found: dict[str, np.ndarray]) -> list[dict]:
    """Per kernel: instances, mean µs on the chain (its wait's
    return to the next one's), after the wait of the kernel before it until its entry, waiting, and block (0, 0)'s
    work after its wait; the last instance (nothing after it) and `start` left out."""
    kernel, entry, waited, exit_ = found["kernel"], found["entry"], found["waited"], found["exit"]
    groups: dict[str, list[tuple[float, float, float, float]]] = {}
    for i in range(1, len(kernel) - 1):
        if kernel[i] == "start":
            continue
        groups.setdefault(str(kernel[i]), []).append(((waited[i + 1] - waited[i]) / 1e3,
                                                      (entry[i] - waited[i - 1]) / 1e3, (waited[i] - entry[i]) / 1e3,
                                                      (exit_[i] - waited[i]) / 1e3))
    rows = []
    for name, samples in groups.items():
        mean = np.mean(np.array(samples), axis=0)
        rows.append(dict(kernel=name, instances=len(samples), chain_us=float(mean[0]), entry_us=float(mean[1]),
                         waiting_us=float(mean[2]), work_us=float(mean[3])))
    return rows


def pair_rows(found: dict[str, np.ndarray]) -> list[dict]:
    """Per kernel and the kernel after it, in launch order of first appearance: instances, mean µs on the chain,
    block (0, 0)'s work after its wait, and the next kernel's waiting (its entry to its wait's return): where a
    kernel's cost on the chain depends on what follows it (the next kernel's loads before its wait, a loop's
    iteration)."""
    kernel, entry, waited, exit_ = found["kernel"], found["entry"], found["waited"], found["exit"]
    groups: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for i in range(1, len(kernel) - 1):
        if kernel[i] != "start":
            groups.setdefault((str(kernel[i]), str(kernel[i + 1])), []).append(
                ((waited[i + 1] - waited[i]) / 1e3, (exit_[i] - waited[i]) / 1e3, (waited[i + 1] - entry[i + 1]) / 1e3))
    rows = []
    for (name, after), samples in groups.items():
        chain, work, waiting = np.mean(np.array(samples), axis=0)
        rows.append(dict(kernel=name, next=after, instances=len(samples), chain_us=float(chain),
                         work_us=float(work), next_waiting_us=float(waiting)))
    return rows


def tokens_us(found: dict[str, np.ndarray]) -> float:
    """Mean µs from one step's first kernel's wait to the next step's."""
    kernel, waited = found["kernel"], found["waited"]
    firsts = np.flatnonzero(kernel == "embed_qkv_rope")
    return float(np.mean(np.diff(waited[firsts]))) / 1e3


def timeline(weights, steps: int, expected: list[int], early_launch: bool) -> dict:
    """One device's timeline of `steps` positions in one submission, and the same decode without stamps."""
    capabilities = None if early_launch else {"supports_early_launch": False}
    with hal.create_device("cuda", capabilities=capabilities) as dev:
        words = 8 * (kernels.STAMP_HEADER_WORDS + 4 * kernels.STAMP_CAPACITY)
        stamps = dev.allocate(words)
        address = stamps.__cuda_array_interface__["data"][0]
        stamped, plain = Decoder(dev, weights, stamps=address), Decoder(dev, weights)
        events = Events(dev)
        gpu_us: dict[str, list[float]] = {"stamped": [], "plain": []}
        match, found = True, {}
        for run in range(RUNS + 1):
            for name, decoder in (("stamped", stamped), ("plain", plain)):
                decoder.reset(PROMPT)
                if name == "stamped":
                    stamps.write(np.zeros(words // 8, np.uint64))
                dev.synchronize()
                events.mark()
                decoder.generate(steps)
                events.mark()
                match &= decoder.tokens() == expected
                seconds = events.seconds()
                if run:  # (the first is a warm-up)
                    gpu_us[name].append(seconds / steps * 1e6)
                if name == "stamped" and run == RUNS:
                    found = instances(stamps.read(np.uint64))
        return dict(device=dev.name, early_launch=dev.capabilities.supports_early_launch, match=match,
                    stamped_us=float(np.median(gpu_us["stamped"])), plain_us=float(np.median(gpu_us["plain"])),
                    token_us=tokens_us(found), records=len(found["kernel"]), rows=chain_rows(found),
                    pairs=pair_rows(found))


def run() -> dict:
    weights = random_weights()
    steps = len(PROMPT) - 1 + 256
    expected, _ = reference_generate(weights, PROMPT, steps)
    return dict(steps=steps, config=repr(weights.config),
                runs={"early launch": timeline(weights, steps, expected, True),
                      "plain edges": timeline(weights, steps, expected, False)})


def report(result: dict) -> str:
    first = next(iter(result["runs"].values()))
    lines = [f"## The decode's timeline on {first['device']}, from stamps the kernels write", "",
             f"{result['steps']} positions in one submission, {result['config']}; the last of {RUNS} runs after a "
             f"warm-up. Per kernel, the mean over its instances: on the chain (from its wait returning to the next "
             f"kernel's), its entry after the wait of the kernel before it, its wait (with its entry stamp's atomic "
             f"count: with plain edges, that is all it is), and block (0, 0)'s work after its wait, µs."]
    for name, found in result["runs"].items():
        lines += ["", f"### {name} (supports_early_launch: {found['early_launch']}): {found['token_us']:.2f} µs a "
                      f"token from the stamps; GPU µs a token (CUDA events) {found['stamped_us']:.2f} with stamps, "
                      f"{found['plain_us']:.2f} without; {found['records']} records; tokens match numpy: "
                      f"{'yes' if found['match'] else 'NO'}", "",
                  "| kernel | instances | on the chain | entry after the previous wait | waiting | work after the "
                  "wait |", "|---|---:|---:|---:|---:|---:|"]
        lines += [f"| {r['kernel']} | {r['instances']} | {r['chain_us']:.2f} | {r['entry_us']:.2f} | "
                  f"{r['waiting_us']:.2f} | {r['work_us']:.2f} |" for r in found["rows"]]
        lines += ["", "By the kernel after it (a kernel's cost on the chain ends at the next one's wait returning, "
                      "which the next one's own loads before its wait or a loop's iteration can delay):", "",
                  "| kernel | next | instances | on the chain | work after the wait | next's waiting |",
                  "|---|---|---:|---:|---:|---:|"]
        lines += [f"| {r['kernel']} | {r['next']} | {r['instances']} | {r['chain_us']:.2f} | {r['work_us']:.2f} | "
                  f"{r['next_waiting_us']:.2f} |" for r in found["pairs"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return plain_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
