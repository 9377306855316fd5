"""Scaling: how the cost of each phase grows with the number of commands, on any device.

For a chain (each dispatch waits for the one before), a fan-out/fan-in (one producer, n parallel
consumers writing disjoint slices, one reducer) and a wide random DAG (dispatches over random slices,
barriers at random, dependencies rediscovered from the ranges: `dependencies="hazards"`), from 10 to
10000 commands, deferred and single_pass: host µs per command to record, to end() (the backend's build:
graph instantiation on CUDA, VkCommandBuffer recording on Vulkan), to resubmit the unchanged reusable
command buffer (the whole submit divided by n: falling as 1/n means O(1)), and device µs per command (submit to
completion). The least-squares slope of each phase against n says µs per command; a phase whose
per-command cost at the largest size exceeds 2x the next smaller one is flagged as superlinear.
Host memory per recorded command is traced with tracemalloc in a separate pass.

    python -m bench.scaling [--device host] [--sizes 10,100,1000,10000] [--json PATH]
"""

from __future__ import annotations

import argparse
import random
import time
import tracemalloc
from collections.abc import Callable

import hal
from bench import emit
from tests.kernels import SOURCE, WORKGROUP

ELEMENTS = WORKGROUP  # one workgroup of tiny work per dispatch: the overheads are what is measured
SLICE = 4 * ELEMENTS
GROUPS = (1, 1, 1)
SUPERLINEAR = 2.0  # per-command growth that flags a phase: a quadratic step over 10x sizes shows as ~10x,
#                   noise on a shared 2-core machine reaches 1.6x


class Fixture:
    """Buffers made once per size, so only the phases are timed."""

    def __init__(self, dev: hal.Device, n: int) -> None:
        self.exe = dev.load_executable(SOURCE)
        self.a = dev.allocate(SLICE)
        self.b = dev.allocate(SLICE)
        self.out = dev.allocate(SLICE * n)
        self.slices = [hal.ref(self.out, i * SLICE, SLICE) for i in range(n)]

    def release(self) -> None:
        for b in (self.a, self.b, self.out):
            b.release()


def chain(cb: hal.CommandBuffer, f: Fixture, n: int) -> None:
    """n dispatches, each reading what the one before wrote."""
    bufs = (f.a, f.b)
    for i in range(n):
        cb.dispatch(f.exe, "add", GROUPS, (ELEMENTS,), (bufs[i & 1], bufs[i & 1], bufs[(i + 1) & 1]))
        cb.execution_barrier()


def fan(cb: hal.CommandBuffer, f: Fixture, n: int) -> None:
    """One producer, n - 2 consumers in one segment writing disjoint slices, one reducer."""
    cb.dispatch(f.exe, "add", GROUPS, (ELEMENTS,), (f.a, f.a, f.b))
    cb.execution_barrier()
    for i in range(n - 2):
        cb.dispatch(f.exe, "add", GROUPS, (ELEMENTS,), (f.b, f.b, f.slices[i]))
    cb.execution_barrier()
    cb.dispatch(f.exe, "add", GROUPS, (ELEMENTS,), (f.slices[0], f.slices[n - 3], f.a))


def dag(cb: hal.CommandBuffer, f: Fixture, n: int) -> None:
    """Command i writes slice i from two random earlier slices; a barrier after about 1 in 32 commands,
    so segments are wide and the hazard analysis finds the edges."""
    rng = random.Random(n)
    cb.dispatch(f.exe, "add", GROUPS, (ELEMENTS,), (f.a, f.b, f.slices[0]))
    cb.execution_barrier()
    settled = 1  # slices written before the last barrier: reading only those never races
    for i in range(1, n):
        x, y = f.slices[rng.randrange(settled)], f.slices[rng.randrange(settled)]
        cb.dispatch(f.exe, "add", GROUPS, (ELEMENTS,), (x, y, f.slices[i]))
        if rng.random() < 1 / 32:
            cb.execution_barrier()
            settled = i + 1


PROGRAMS: dict[str, tuple[Callable[[hal.CommandBuffer, Fixture, int], None], str]] = {
    "chain": (chain, "barriers"),
    "fan": (fan, "barriers"),
    "dag": (dag, "hazards"),
}


def measure(dev: hal.Device, name: str, f: Fixture, n: int, strategy: str, repeats: int) -> dict[str, float]:
    """Best-of-`repeats` µs per command for each phase."""
    program, deps = PROGRAMS[name]
    best = dict(record=float("inf"), end=float("inf"), submit=float("inf"), run=float("inf"))
    for _ in range(repeats):
        cb = dev.create_command_buffer(mode="reusable", strategy=strategy, dependencies=deps)
        t0 = time.perf_counter()
        cb.begin()
        program(cb, f, n)
        t1 = time.perf_counter()
        cb.end()
        t2 = time.perf_counter()
        dev.queue_execute(cb)  # the first submission may upload; the steady state is measured below
        dev.synchronize()
        t3 = time.perf_counter()
        dev.queue_execute(cb)
        t4 = time.perf_counter()
        dev.synchronize()
        t5 = time.perf_counter()
        for phase, seconds in (("record", t1 - t0), ("end", t2 - t1), ("submit", t4 - t3), ("run", t5 - t3)):
            best[phase] = min(best[phase], seconds / n * 1e6)
    return best


def host_bytes_per_command(dev: hal.Device, name: str, f: Fixture, n: int, strategy: str) -> float:
    """Host memory a recorded and ended command buffer holds, per command (tracemalloc)."""
    program, deps = PROGRAMS[name]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        cb = dev.create_command_buffer(mode="reusable", strategy=strategy, dependencies=deps)
        cb.begin()
        program(cb, f, n)
        cb.end()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    del cb
    return held / n


def slope(ns: list[int], us_per_command: list[float]) -> float:
    """Least-squares µs per added command of the total time against n."""
    totals = [u * n for u, n in zip(us_per_command, ns)]
    mean_n, mean_t = sum(ns) / len(ns), sum(totals) / len(totals)
    var = sum((n - mean_n) ** 2 for n in ns)
    return sum((n - mean_n) * (t - mean_t) for n, t in zip(ns, totals)) / var if var else 0.0


def run(dev: hal.Device, sizes: list[int], progress: Callable[[str], None] = lambda _: None) -> dict:
    """Every program x strategy x size on `dev`: the rows, and per phase its slope and verdict."""
    rows = []
    for n in sizes:
        f = Fixture(dev, n)
        try:
            for name in PROGRAMS:
                for strategy in ("deferred", "single_pass"):
                    progress(f"scaling {dev.driver} {name} {strategy} n={n}")
                    times = measure(dev, name, f, n, strategy, repeats=5 if n <= 1000 else 2)
                    rows.append(dict(program=name, strategy=strategy, commands=n, **times,
                                     host_bytes=host_bytes_per_command(dev, name, f, n, strategy)))
        finally:
            f.release()
    fits = []
    for name in PROGRAMS:
        for strategy in ("deferred", "single_pass"):
            mine = sorted((r for r in rows if r["program"] == name and r["strategy"] == strategy),
                          key=lambda r: r["commands"])
            ns = [r["commands"] for r in mine]
            for phase in ("record", "end", "submit", "run"):
                us = [r[phase] for r in mine]
                growth = us[-1] / us[-2] if len(us) > 1 and us[-2] > 0 else 1.0
                fits.append(dict(program=name, strategy=strategy, phase=phase, slope_us=slope(ns, us),
                                 growth=growth, superlinear=growth > SUPERLINEAR))
    return dict(device=dev.name, driver=dev.driver, sizes=sizes, rows=rows, fits=fits)


def report(result: dict) -> str:
    lines = [f"## Scaling on {result['driver']} ({result['device']})", "",
             "µs per command (best of several runs); submit = one resubmission of the unchanged reusable "
             "command buffer divided by n; run = submit to completion divided by n", "",
             "| program | strategy | commands | record | end | submit | run | host bytes/cmd |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['program']} | {r['strategy']} | {r['commands']} | {r['record']:.2f} | {r['end']:.2f} | "
                     f"{r['submit']:.3f} | {r['run']:.2f} | {r['host_bytes']:.0f} |")
    lines += ["", "| program | strategy | phase | slope µs/cmd | per-cmd growth, largest vs next size | |",
              "|---|---|---|---:|---:|---|"]
    for fit in result["fits"]:
        flag = "SUPERLINEAR" if fit["superlinear"] else "linear"
        lines.append(f"| {fit['program']} | {fit['strategy']} | {fit['phase']} | {fit['slope_us']:.3f} | "
                     f"{fit['growth']:.2f} | {flag} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="host")
    parser.add_argument("--sizes", default="10,100,1000,10000")
    parser.add_argument("--json", default=None, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    with hal.create_device(args.device) as dev:
        result = run(dev, [int(s) for s in args.sizes.split(",")])
    return emit(result, report(result), args.json)


if __name__ == "__main__":
    raise SystemExit(main())
