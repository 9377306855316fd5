"""Transient memory (issue 19), side by side on one device: a buffer that lives for one step.

A step allocates a buffer, runs one dispatch writing it (a reusable command buffer through a slot), and gives the
buffer back: with allocate() and release(), against queue_alloca() and queue_dealloca(), and the same with a
semaphore signalled by the dealloca (what a runtime chains on). Host µs per step (CYCLES steps, then one
synchronize, best of REPEATS), for a small and a large buffer.

    python -m bench.transients [--device host] [--json PATH]
"""

from __future__ import annotations

import time

import numpy as np

import hal
from bench import device_main
from tests.kernels import SOURCE

SIZES = (4 << 10, 4 << 20)
PROGRAM_COMMANDS = 100
CYCLES, REPEATS = 500, 5
ELEMENTS = 64


def best_us(dev: hal.Device, step) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        for _ in range(CYCLES):
            step()
        dev.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best / CYCLES * 1e6


def run(device: str | None) -> dict:
    with hal.create_device(device) as dev:
        exe = dev.load_executable(SOURCE)
        source = dev.upload(np.arange(ELEMENTS, dtype=np.uint32))
        cb = dev.create_command_buffer(mode="reusable", binding_capacity=2)
        with cb:
            cb.dispatch(exe, "add", (1, 1, 1), (ELEMENTS,), (hal.slot(0), hal.slot(0), hal.slot(1)))
        sem = dev.create_semaphore(0)

        def allocate_release(size: int) -> None:
            buffer = dev.allocate(size)
            dev.queue_execute(cb, binding_table=(source, buffer))
            buffer.release()

        def alloca_dealloca(size: int) -> None:
            buffer = dev.queue_alloca(size)
            dev.queue_execute(cb, binding_table=(source, buffer))
            dev.queue_dealloca(buffer)

        def alloca_dealloca_signalled(size: int) -> None:
            buffer = dev.queue_alloca(size)
            dev.queue_execute(cb, binding_table=(source, buffer))
            dev.queue_dealloca(buffer, signal=[(sem, sem.promised + 1)])

        rows = [dict(bytes=size, **{step.__name__: best_us(dev, lambda step=step, size=size: step(size))
                                    for step in (allocate_release, alloca_dealloca, alloca_dealloca_signalled)})
                for size in SIZES]
        plan = plan_row(dev, exe)
        meta = dict(device=dev.name, driver=dev.driver, date=time.strftime("%Y-%m-%d"))
    return dict(meta=meta, rows=rows, plan=plan)


def plan_row(dev: hal.Device, exe: hal.Executable) -> dict:
    """A 100-command program of transients (a chain, each step also reading a skip connection from up to 8 steps
    back, sizes 1 to 16 KiB): cb.alloca's peak against the sum of the transients and against the most bytes live
    in one segment (a lower bound of any placement), and what planning adds to end()."""
    rng = np.random.default_rng(0)
    sizes = [int(256 * rng.integers(4, 65)) for _ in range(PROGRAM_COMMANDS)]
    skips = [int(max(0, i - rng.integers(1, 9))) for i in range(PROGRAM_COMMANDS)]
    source = dev.upload(np.arange(ELEMENTS, dtype=np.uint32))
    targets = [dev.allocate(size) for size in sizes]

    def record(cb: hal.CommandBuffer, transient: bool) -> None:
        refs = [cb.alloca(size) if transient else target for size, target in zip(sizes, targets)]
        for i in range(PROGRAM_COMMANDS):
            inputs = (source, source) if i == 0 else (refs[i - 1], refs[skips[i]])
            cb.dispatch(exe, "add", (1, 1, 1), (ELEMENTS,), (*inputs, refs[i]))
            cb.execution_barrier()

    ends = {}
    for transient in (False, True):
        best = float("inf")
        for _ in range(REPEATS):
            cb = dev.create_command_buffer(mode="reusable")
            cb.begin()
            record(cb, transient)
            t0 = time.perf_counter()
            cb.end()
            best = min(best, time.perf_counter() - t0)
        ends[transient] = best * 1e6
    last_use = [max([i] + [j for j in range(PROGRAM_COMMANDS) if j - 1 == i or skips[j] == i]) for i in range(
        PROGRAM_COMMANDS)]
    live = max(sum(size for i, size in enumerate(sizes) if i <= s <= last_use[i]) for s in range(PROGRAM_COMMANDS))
    return dict(commands=PROGRAM_COMMANDS, peak=cb.transient_bytes, total=sum(sizes), live_bound=live,
                end_plain_us=ends[False], end_alloca_us=ends[True])


def report(result: dict) -> str:
    meta = result["meta"]
    lines = [f"## Transient buffers on {meta['device']} ({meta['driver']}), {meta['date']}", "",
             f"A step: a buffer made, one dispatch writing it, the buffer given back. Host µs per step ({CYCLES} "
             f"steps and a synchronize, best of {REPEATS}).", "",
             "| bytes | allocate + release | queue_alloca + queue_dealloca | ratio | with a dealloca signal | ratio |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        base = r["allocate_release"]
        lines.append(f"| {r['bytes']} | {base:.1f} | {r['alloca_dealloca']:.1f} | {r['alloca_dealloca'] / base:.2f}x "
                     f"| {r['alloca_dealloca_signalled']:.1f} | {r['alloca_dealloca_signalled'] / base:.2f}x |")
    p = result["plan"]
    lines += ["", f"cb.alloca on a {p['commands']}-command program (a chain with skip connections, 1 to 16 KiB "
              f"transients): peak {p['peak']} bytes, {p['peak'] / p['total']:.3f}x the sum of the transients "
              f"({p['total']}) and {p['peak'] / p['live_bound']:.3f}x the most bytes live at once ({p['live_bound']}, "
              f"a lower bound); end() {p['end_alloca_us']:.0f} µs against {p['end_plain_us']:.0f} µs with plain "
              f"buffers."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return device_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
