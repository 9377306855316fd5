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
        meta = dict(device=dev.name, driver=dev.driver, date=time.strftime("%Y-%m-%d"))
    return dict(meta=meta, rows=rows)


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
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return device_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
