"""Host calls and queue reads against synchronizing (issue 19), side by side on one device.

A step is one small dispatch followed by a host function (the kind a runtime uses to hand a token to a sampler).
Three ways to run k steps:
- synchronize + call: queue_execute, synchronize(), call the function (the caller blocks each step);
- host call: queue_execute, queue_host_call(fn, signal), wait for the signal (the same round trip through hal);
- host calls queued: all k steps queued at once, then one wait (the caller never blocks between steps).
Also a read-back of 4 KiB after the dispatch: buf.read() against queue_read and a wait.
Wall µs per step, best of REPEATS runs of STEPS steps.

    python -m bench.host_calls [--device host] [--json PATH]
"""

from __future__ import annotations

import time

import numpy as np

import hal
from bench import device_main
from tests.kernels import SOURCE

STEPS, REPEATS = 100, 5
ELEMENTS = 1024


def best_us(step_loop) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        step_loop()
        best = min(best, time.perf_counter() - t0)
    return best / STEPS * 1e6


def run(device: str | None) -> dict:
    with hal.create_device(device) as dev:
        exe = dev.load_executable(SOURCE)
        a, b = dev.upload(np.arange(ELEMENTS, dtype=np.uint32)), dev.allocate(4 * ELEMENTS)
        cb = dev.create_command_buffer(mode="reusable")
        with cb:
            cb.dispatch(exe, "add", (ELEMENTS // 64, 1, 1), (ELEMENTS,), (a, a, b))
        dev.queue_execute(cb)
        dev.synchronize()
        tokens: list[int] = []
        sem = dev.create_semaphore(0)
        out = np.empty(ELEMENTS, np.uint32)

        def token() -> None:
            tokens.append(1)

        def synchronize_and_call() -> None:
            for _ in range(STEPS):
                dev.queue_execute(cb)
                dev.synchronize()
                token()

        def host_call() -> None:
            for _ in range(STEPS):
                dev.queue_execute(cb)
                value = sem.promised + 1
                dev.queue_host_call(token, signal=[(sem, value)])
                sem.wait(value)

        def host_calls_queued() -> None:
            for _ in range(STEPS):
                dev.queue_execute(cb)
                dev.queue_host_call(token, signal=[(sem, sem.promised + 1)])
            sem.wait(sem.promised)

        def buffer_read() -> None:
            for _ in range(STEPS):
                dev.queue_execute(cb)
                b.read(np.uint32)

        def queue_read() -> None:
            for _ in range(STEPS):
                dev.queue_execute(cb)
                value = sem.promised + 1
                dev.queue_read(b, out, signal=[(sem, value)])
                sem.wait(value)

        row = {name: best_us(loop) for name, loop in (
            ("synchronize_call", synchronize_and_call), ("host_call", host_call),
            ("host_calls_queued", host_calls_queued), ("buffer_read", buffer_read), ("queue_read", queue_read))}
        assert len(tokens) == 3 * STEPS * REPEATS, "a host call was lost"
        np.testing.assert_array_equal(out, 2 * np.arange(ELEMENTS, dtype=np.uint32))
        meta = dict(device=dev.name, driver=dev.driver, date=time.strftime("%Y-%m-%d"))
    return dict(meta=meta, rows=[row])


def report(result: dict) -> str:
    meta, r = result["meta"], result["rows"][0]
    sync = r["synchronize_call"]
    return "\n".join([
        f"## Host calls on {meta['device']} ({meta['driver']}), {meta['date']}", "",
        f"A step: one dispatch, then a host function (or a 4 KiB read-back). Wall µs per step, best of {REPEATS} runs "
        f"of {STEPS}.", "",
        "| way | µs per step | / synchronize + call |", "|---|---:|---:|",
        f"| synchronize + call | {sync:.1f} | 1.00x |",
        f"| queue_host_call + wait | {r['host_call']:.1f} | {r['host_call'] / sync:.2f}x |",
        f"| queue_host_call, {STEPS} queued, one wait | {r['host_calls_queued']:.1f} | "
        f"{r['host_calls_queued'] / sync:.2f}x |",
        f"| buffer.read() | {r['buffer_read']:.1f} | {r['buffer_read'] / sync:.2f}x |",
        f"| queue_read + wait | {r['queue_read']:.1f} | {r['queue_read'] / sync:.2f}x |",
    ])


def main(argv: list[str] | None = None) -> int:
    return device_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
