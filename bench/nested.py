"""Nested command buffers against the same commands recorded flat (issue 19), side by side on one device.

A piece of k dispatches (a barrier between each) is recorded once into a reusable command buffer through slots;
an outer command buffer, itself bound through two slots, then either calls execute_commands(piece, (slot 0,
slot 1)) or records the k dispatches itself. Per command: host µs to record and end the outer command buffer
(execute_commands records the piece's commands twice: once into a scratch command buffer, so that a refusal leaves
the outer one as it was, then for real), and host µs of its first submission (CUDA builds and instantiates the
graph there: a nested piece is one child graph node). Per submission: wall µs of an unchanged one, and host µs of
one that swaps the two buffers (CUDA patches every node: flat, one exec node each; nested, hal's copy of the child
graph, then the exec's child node once).

    python -m bench.nested [--device host] [--json PATH]
"""

from __future__ import annotations

import time

import numpy as np

import hal
from bench import device_main, wall_us
from tests.kernels import SOURCE

LENGTHS = (10, 100)
REPEATS, SUBMITS = 20, 50
ELEMENTS = 64


def record(cb: hal.CommandBuffer, exe: hal.Executable, bufs: list, length: int) -> None:
    for i in range(length):
        if i:
            cb.execution_barrier()
        cb.dispatch(exe, "add", (1, 1, 1), (ELEMENTS,), (bufs[i % 2], bufs[i % 2], bufs[(i + 1) % 2]))


def through_slots(cb: hal.CommandBuffer, exe: hal.Executable, piece, length: int) -> None:
    """The outer recording: the piece nested, or its commands recorded flat (None), on the outer slots 0 and 1."""
    slots = (hal.slot(0, 0, 4 * ELEMENTS), hal.slot(1, 0, 4 * ELEMENTS))
    if piece is None:
        record(cb, exe, list(slots), length)
    else:
        cb.execute_commands(piece, slots)


def measure(dev: hal.Device, exe: hal.Executable, piece, tables: tuple, length: int) -> dict:
    """Best host µs per command to record and end, and to submit first; wall µs per unchanged submission; host µs
    per submission that swaps the table."""
    record_best = first_best = float("inf")
    for _ in range(REPEATS):
        cb = dev.create_command_buffer(mode="reusable", binding_capacity=2)
        t0 = time.perf_counter()
        with cb:
            through_slots(cb, exe, piece, length)
        t1 = time.perf_counter()
        dev.queue_execute(cb, binding_table=tables[0])
        t2 = time.perf_counter()
        dev.synchronize()
        record_best, first_best = min(record_best, t1 - t0), min(first_best, t2 - t1)
    dev.synchronize()
    t0 = time.perf_counter()
    for i in range(SUBMITS):
        dev.queue_execute(cb, binding_table=tables[i % 2])
    swap = (time.perf_counter() - t0) / SUBMITS * 1e6
    dev.queue_execute(cb, binding_table=tables[0])
    return dict(record=record_best / length * 1e6, first=first_best / length * 1e6,
                wall=wall_us(dev, cb, SUBMITS, tables[0]), swap=swap)


def run(device: str | None) -> dict:
    with hal.create_device(device) as dev:
        exe = dev.load_executable(SOURCE)
        a, b = (dev.upload(np.arange(ELEMENTS, dtype=np.uint32)) for _ in range(2))
        tables = ((a, b), (b, a))
        rows = []
        for length in LENGTHS:
            piece = dev.create_command_buffer(mode="reusable", binding_capacity=2)
            with piece:
                record(piece, exe, [hal.slot(0, 0, 4 * ELEMENTS), hal.slot(1, 0, 4 * ELEMENTS)], length)
            rows.append(dict(commands=length, flat=measure(dev, exe, None, tables, length),
                             nested=measure(dev, exe, piece, tables, length)))
        meta = dict(device=dev.name, driver=dev.driver, date=time.strftime("%Y-%m-%d"))
    return dict(meta=meta, rows=rows)


def report(result: dict) -> str:
    meta = result["meta"]
    lines = [f"## Nested command buffers on {meta['device']} ({meta['driver']}), {meta['date']}", "",
             f"k dispatches, flat / nested (ratio nested/flat): host µs per command to record and end the outer "
             f"command buffer and to submit it first (best of {REPEATS}); wall µs per unchanged submission and host "
             f"µs per submission swapping the table ({SUBMITS} back to back).", "",
             "| k | record+end | first submit | unchanged wall | swapped table |",
             "|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        cells = [f"{r['flat'][key]:.2f} / {r['nested'][key]:.2f} ({r['nested'][key] / r['flat'][key]:.2f}x)"
                 for key in ("record", "first", "wall", "swap")]
        lines.append(f"| {r['commands']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return device_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
