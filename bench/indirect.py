"""dispatch_indirect against dispatch, side by side on one device (issue 18: static indirect resubmit <= 1.1x).

A reusable chain of k `add` dispatches (one workgroup each, a barrier between) is recorded three ways: with
literal workgroups (direct), reading them from a buffer that holds (1, 1, 1) (static indirect), and the same
with dynamic=True (its guard waits for the commands before). Per chain: host µs of an unchanged resubmission
(each on an idle device, best of many), and wall µs per submission of many back to back (the device's time,
which carries the guards: a setter node on CUDA, a guard dispatch and a barrier on Vulkan).

    python -m bench.indirect [--device cuda] [--json PATH]
"""

from __future__ import annotations

import time

import numpy as np

import hal
from bench import device_main, wall_us
from tests.kernels import SOURCE

LENGTHS = (10, 100)
RESUBMITS, BACK_TO_BACK = 200, 200
STATIC_TARGET = 1.1
ELEMENTS = 64


def chain(dev: hal.Device, exe: hal.Executable, bufs: list[hal.Buffer], params: hal.Buffer, length: int,
          how: str) -> hal.CommandBuffer:
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        for i in range(length):
            if i:
                cb.execution_barrier()
            a, out = bufs[i % 2], bufs[(i + 1) % 2]
            if how == "direct":
                cb.dispatch(exe, "add", (1, 1, 1), (ELEMENTS,), (a, a, out))
            else:
                cb.dispatch_indirect(exe, "add", params, (ELEMENTS,), (a, a, out), dynamic=how == "dynamic")
    return cb


def resubmit_us(dev: hal.Device, cb: hal.CommandBuffer) -> float:
    """Host µs of one unchanged queue_execute on an idle device: the best of RESUBMITS."""
    best = float("inf")
    for _ in range(RESUBMITS):
        dev.synchronize()
        t0 = time.perf_counter()
        dev.queue_execute(cb)
        best = min(best, time.perf_counter() - t0)
    dev.synchronize()
    return best * 1e6


def run(device: str) -> dict:
    with hal.create_device(device) as dev:
        exe = dev.load_executable(SOURCE)
        bufs = [dev.upload(np.arange(ELEMENTS, dtype=np.uint32)) for _ in range(2)]
        params = dev.upload(np.ones(3, np.uint32))
        rows = []
        for length in LENGTHS:
            row = dict(dispatches=length)
            for how in ("direct", "static", "dynamic"):
                cb = chain(dev, exe, bufs, params, length, how)
                dev.queue_execute(cb)  # the first submission builds and uploads
                row[f"{how}_resubmit"] = resubmit_us(dev, cb)
                row[f"{how}_wall"] = wall_us(dev, cb, BACK_TO_BACK)
            rows.append(row)
        meta = dict(device=dev.name, driver=dev.driver, date=time.strftime("%Y-%m-%d"))
    return dict(meta=meta, rows=rows)


def report(result: dict) -> str:
    meta = result["meta"]
    lines = [f"## dispatch_indirect on {meta['device']} ({meta['driver']}), {meta['date']}", "",
             "A chain of k one-workgroup dispatches: host µs of an unchanged resubmission (best of "
             f"{RESUBMITS}), wall µs per submission of {BACK_TO_BACK} back to back.", "",
             "| k | direct resubmit | static | dynamic | static/direct | direct wall | static wall | dynamic wall |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['dispatches']} | {r['direct_resubmit']:.1f} | {r['static_resubmit']:.1f} | "
                     f"{r['dynamic_resubmit']:.1f} | {r['static_resubmit'] / r['direct_resubmit']:.2f}x | "
                     f"{r['direct_wall']:.1f} | {r['static_wall']:.1f} | {r['dynamic_wall']:.1f} |")
    worst = max(r["static_resubmit"] / r["direct_resubmit"] for r in result["rows"])
    lines += ["", f"Target: static indirect resubmit <= {STATIC_TARGET}x direct: {worst:.2f}x at worst "
                  f"({'met' if worst <= STATIC_TARGET else 'MISSED'})."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return device_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
