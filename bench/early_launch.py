"""Early launch against plain edges on CUDA (issue 47, item 3a): a chain of small dependent kernels, GPU µs per node.

A reusable chain of k `shift` dispatches (tests.kernels: y = x * 3 + k over ELEMENTS uint32, a barrier between
each, every one reading what the one before wrote) runs as its export is marked, early_launch, on the device as it
is and on the same GPU opened with supports_early_launch off (plain edges; the kernel's wait then returns at once);
and `shift_plain`, unmarked, beside them. GPU µs per node: CUDA events around one launch, the median of RUNS, the
competitors in turns. Target (issue 47): early launch <= 0.7x plain edges.

    python -m bench.early_launch [--json PATH]
"""

from __future__ import annotations

import statistics

import numpy as np

import hal
from bench import Events, plain_main
from tests.kernels import EARLY_SOURCE

LENGTHS = (10, 100, 1000)
ELEMENTS = 1 << 16  # 1024 workgroups of 64: a kernel that fills the GPU, briefly
RUNS = 15
TARGET = 0.7


def chain(dev: hal.Device, exe: hal.Executable, bufs: list[hal.Buffer], length: int, name: str) -> hal.CommandBuffer:
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        for i in range(length):
            if i:
                cb.execution_barrier()
            cb.dispatch(exe, name, (ELEMENTS // 64, 1, 1), (ELEMENTS, i), (bufs[i % 2], bufs[(i + 1) % 2]))
    return cb


def run() -> dict:
    competitors = {"early launch": ({}, "shift"), "plain edges": ({"supports_early_launch": False}, "shift"),
                   "unmarked kernel": ({}, "shift_plain")}
    devices, chains = {}, {}
    try:
        for name, (capabilities, export) in competitors.items():
            dev = devices[name] = hal.create_device("cuda", capabilities=capabilities)
            exe = dev.load_executable(EARLY_SOURCE)
            bufs = [dev.upload(np.arange(ELEMENTS, dtype=np.uint32)) for _ in range(2)]
            chains[name] = {k: chain(dev, exe, bufs, k, export) for k in LENGTHS}
        supported = devices["early launch"].capabilities.supports_early_launch
        times: dict = {(name, k): [] for name in competitors for k in LENGTHS}
        events = {name: Events(dev) for name, dev in devices.items()}
        for _ in range(RUNS + 1):  # the first round warms up
            for k in LENGTHS:
                for name, dev in devices.items():
                    dev.synchronize()
                    events[name].mark()
                    dev.queue_execute(chains[name][k])
                    events[name].mark()
                    times[name, k].append(events[name].seconds() / k * 1e6)
        rows = [dict(kernels=k, competitor=name, gpu_us=statistics.median(times[name, k][1:]))
                for k in LENGTHS for name in competitors]
        meta = dict(device=devices["early launch"].name, supported=supported)
    finally:
        for dev in devices.values():
            dev.close()
    return dict(meta=meta, rows=rows)


def report(result: dict) -> str:
    meta, rows = result["meta"], result["rows"]
    lines = [f"## Early launch on {meta['device']} (supports_early_launch: {meta['supported']})", "",
             f"A chain of `shift` kernels over {ELEMENTS} uint32 ({ELEMENTS // 64} workgroups of 64), GPU µs per "
             f"node, median of {RUNS} launches.", "",
             "| kernels | early launch | plain edges | unmarked kernel | early / plain |", "|---:|---:|---:|---:|---:|"]
    for k in LENGTHS:
        us = {r["competitor"]: r["gpu_us"] for r in rows if r["kernels"] == k}
        ratio = us["early launch"] / us["plain edges"]
        lines.append(f"| {k} | {us['early launch']:.2f} | {us['plain edges']:.2f} | {us['unmarked kernel']:.2f} | "
                     f"{ratio:.2f} ({'met' if ratio <= TARGET else 'MISSED'} <= {TARGET}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return plain_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
