"""Nested command buffers against the same commands recorded flat (issue 19), side by side on one device.

A piece of k dispatches (a barrier between each) is recorded once into a reusable command buffer through slots;
an outer command buffer then either calls execute_commands(piece, table) or records the k dispatches itself.
Host µs per command to record and end the outer command buffer (execute_commands records the piece's commands
twice: once into a scratch command buffer, so that a refusal leaves the outer one as it was, then for real), and
wall µs per submission of the outer one (the same commands either way).

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


def outer_us(dev: hal.Device, exe: hal.Executable, piece, table: tuple, length: int) -> tuple[float, hal.CommandBuffer]:
    """Best host µs per command of recording and ending the outer command buffer; the last one recorded."""
    best = float("inf")
    for _ in range(REPEATS):
        cb = dev.create_command_buffer(mode="reusable")
        t0 = time.perf_counter()
        with cb:
            if piece is None:
                record(cb, exe, list(table), length)
            else:
                cb.execute_commands(piece, table)
        best = min(best, time.perf_counter() - t0)
    return best / length * 1e6, cb


def run(device: str | None) -> dict:
    with hal.create_device(device) as dev:
        exe = dev.load_executable(SOURCE)
        table = tuple(dev.upload(np.arange(ELEMENTS, dtype=np.uint32)) for _ in range(2))
        rows = []
        for length in LENGTHS:
            piece = dev.create_command_buffer(mode="reusable", binding_capacity=2)
            with piece:
                record(piece, exe, [hal.slot(0, 0, 4 * ELEMENTS), hal.slot(1, 0, 4 * ELEMENTS)], length)
            flat_record, flat = outer_us(dev, exe, None, table, length)
            nested_record, nested = outer_us(dev, exe, piece, table, length)
            for cb in (flat, nested):  # the first submission builds (CUDA) or encodes
                dev.queue_execute(cb)
            rows.append(dict(commands=length, flat_record=flat_record, nested_record=nested_record,
                             flat_wall=wall_us(dev, flat, SUBMITS), nested_wall=wall_us(dev, nested, SUBMITS)))
        meta = dict(device=dev.name, driver=dev.driver, date=time.strftime("%Y-%m-%d"))
    return dict(meta=meta, rows=rows)


def report(result: dict) -> str:
    meta = result["meta"]
    lines = [f"## Nested command buffers on {meta['device']} ({meta['driver']}), {meta['date']}", "",
             f"k dispatches: host µs per command to record and end the outer command buffer (best of {REPEATS}), "
             f"wall µs per submission of it ({SUBMITS} back to back).", "",
             "| k | flat record | nested record | nested/flat | flat wall | nested wall |",
             "|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['commands']} | {r['flat_record']:.2f} | {r['nested_record']:.2f} | "
                     f"{r['nested_record'] / r['flat_record']:.2f}x | {r['flat_wall']:.1f} | {r['nested_wall']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return device_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
