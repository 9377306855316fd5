"""Triton kernels launched by Triton against the same kernels in a hal command buffer (issue 46, item 4a).

One Triton kernel (tests.triton_kernels.scale: out = x * factor over ELEMENTS float32, BLOCK a program), k launches
in a chain (each reads what the one before wrote), three ways on one GPU, in turns:
- Triton's launcher: `scale[grid](...)` k times from Python on torch tensors (how Triton kernels are called);
- the same k launches captured once in a torch CUDA graph and replayed (the expert's way to cut launch costs);
- hal: a reusable command buffer of k dispatches of the same kernel (ExecutableSource.triton), resubmitted;
- the driver alone: the graph hal builds for that command buffer, built and launched by compiled code through
  cydriver (bench/native/cuda_reference.pyx), cuGraphLaunch each time: the floor of hal's resubmission.
Host µs per kernel: the time of the calls that queue the k kernels, over k (no synchronization inside); GPU µs per
kernel: CUDA events around them, over k. A lone kernel is timed twice: queued once after the GPU went idle, and
queued BACK_TO_BACK times in a row (as a runtime resubmits in its loop), per kernel. The median of RUNS after a
warm-up; first-use costs (Triton's compilation and launcher build; hal's compilation and load, cached on disk
afterwards) apart. The floor beside: the GPU time per
dependent node of a chain of empty kernels in a graph (bench.decode.measure_floors).
Target (issue 46): hal's host µs per resubmitted kernel <= 0.1x Triton's launcher's.

    python -m bench.triton [--json PATH]
"""

from __future__ import annotations

import statistics
import time
from array import array
from collections.abc import Callable

import numpy as np

import hal
from bench import Events, plain_main
from bench.native import reference

BACK_TO_BACK = 100
CASES = ((1, 1), (1, BACK_TO_BACK), (10, 1), (100, 1))  # (kernels in the chain, times queued in a row)
LENGTHS = sorted({k for k, _ in CASES})
ELEMENTS = 1 << 16
RUNS = 15
TARGET = 0.1


def run() -> dict:
    import torch

    from bench.decode import measure_floors
    from tests import triton_kernels as tk

    dev = hal.create_device("cuda")
    try:
        first = time.perf_counter()
        exe = dev.load_executable(tk.scale_source())
        hal_first_s = time.perf_counter() - first
        bufs = [dev.upload(np.ones(ELEMENTS, np.float32)) for _ in range(2)]
        grid = (ELEMENTS // tk.BLOCK, 1, 1)
        chains = {}
        for k in LENGTHS:
            cb = chains[k] = dev.create_command_buffer(mode="reusable")
            with cb:
                for i in range(k):
                    if i:
                        cb.execution_barrier()
                    cb.dispatch(exe, "scale", grid, (ELEMENTS, 1.0001), (bufs[i % 2], bufs[(i + 1) % 2]))
        tensors = [torch.ones(ELEMENTS, dtype=torch.float32, device="cuda") for _ in range(2)]

        def launch(k: int) -> None:
            for i in range(k):
                tk.scale[grid](tensors[i % 2], tensors[(i + 1) % 2], ELEMENTS, 1.0001, BLOCK=tk.BLOCK)

        first = time.perf_counter()
        launch(1)
        torch.cuda.synchronize()
        triton_first_s = time.perf_counter() - first
        graphs = {}
        for k in LENGTHS:
            graphs[k] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graphs[k]):
                launch(k)
        hal_events = Events(dev)
        competitors: dict[str, Callable[[int], tuple[Callable[[], None], Callable[[], None], Callable[[], float]]]] = {
            "Triton's launcher": lambda k: (lambda: launch(k),) + torch_events(torch),
            "Triton in a torch CUDA graph": lambda k: (graphs[k].replay,) + torch_events(torch),
            "hal, one command buffer": lambda k: (lambda: dev.queue_execute(chains[k]),
                                                  hal_events.mark, lambda: hal_events.seconds()),
        }
        drivers = driver_graphs(dev, exe, bufs, grid)
        if drivers:
            competitors[DRIVER] = lambda k: (lambda: drivers[k].launch(dev.stream_handle), hal_events.mark,
                                             lambda: hal_events.seconds())
        host = {(name, case): [] for name in competitors for case in CASES}
        gpu = {(name, case): [] for name in competitors for case in CASES}
        for _ in range(RUNS + 1):  # the first round warms up
            for k, times in CASES:
                for name, make in competitors.items():
                    work, mark, seconds = make(k)
                    torch.cuda.synchronize()
                    dev.synchronize()
                    mark()
                    t0 = time.perf_counter()
                    for _ in range(times):
                        work()
                    t1 = time.perf_counter()
                    mark()
                    gpu[name, (k, times)].append(seconds() / (k * times) * 1e6)
                    host[name, (k, times)].append((t1 - t0) / (k * times) * 1e6)
        for buffer, tensor in zip(bufs, tensors):  # the same chain from the same data, both ways: the same result
            buffer.write(np.ones(ELEMENTS, np.float32))
            tensor.fill_(1.0)
        dev.queue_execute(chains[LENGTHS[-1]])
        launch(LENGTHS[-1])
        last = LENGTHS[-1] % 2
        equal = bool(np.array_equal(bufs[last].read(np.float32), tensors[last].cpu().numpy()))
        rows = [dict(kernels=k, submissions=times, competitor=name,
                     host_us=statistics.median(host[name, (k, times)][1:]),
                     gpu_us=statistics.median(gpu[name, (k, times)][1:])) for k, times in CASES for name in competitors]
        meta = dict(device=dev.name, triton=__import__("triton").__version__, torch=torch.__version__, block=tk.BLOCK,
                    hal_first_s=hal_first_s, triton_first_s=triton_first_s, results_equal=equal,
                    floors=measure_floors(dev))
    finally:
        dev.close()
    return dict(meta=meta, rows=rows)


DRIVER = "the driver alone (cuGraphLaunch, compiled)"


def driver_graphs(dev: hal.Device, exe: hal.Executable, bufs: list[hal.Buffer], grid: tuple) -> dict | None:
    """Per chain length, the chain's graph built and instantiated by bench.cuda's compiled reference (the same
    kernel nodes and parameters as hal's, null pointers for Triton's trailing scratch); None without the
    reference, or for a kernel that needs dynamic shared memory (the reference sets none)."""
    from tests import triton_kernels as tk
    native = reference("cuda_reference")
    if native is None or exe.shared_memory[0]:
        return None
    trailing = exe.trailing_parameters[0]
    factor = int(np.float32(1.0001).view(np.uint32))
    graphs = {}
    dev.activate()
    for k in LENGTHS:
        params = array("Q", [w for i in range(k) for w in
                             [bufs[i % 2].address, bufs[(i + 1) % 2].address, ELEMENTS, factor] + [0] * trailing])
        graph = graphs[k] = native.Graph(exe.functions[0], grid, (tk.SCALE.workgroup_size[0], 1, 1), params,
                                         4 + trailing)
        graph.build(array("q", range(k)), array("q", [0] + list(range(k))), array("q", range(k - 1)))
        graph.instantiate()
    return graphs


def torch_events(torch) -> tuple[Callable[[], None], Callable[[], float]]:
    """mark() twice around the work on torch's current stream, then seconds()."""
    marks: list = []

    def mark() -> None:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        marks.append(event)

    def seconds() -> float:
        marks[-1].synchronize()
        return marks[-2].elapsed_time(marks[-1]) / 1e3

    return mark, seconds


def report(result: dict) -> str:
    meta, rows = result["meta"], result["rows"]
    names = list(dict.fromkeys(r["competitor"] for r in rows))
    lines = [f"## Triton kernels on {meta['device']}: Triton's launcher against hal (Triton {meta['triton']}, "
             f"torch {meta['torch']})", "",
             f"A chain of k `scale` kernels over {ELEMENTS} float32 ({ELEMENTS // meta['block']} programs of "
             f"{meta['block']}); µs per "
             f"kernel, median of {RUNS}. hal's result equal to Triton's launcher's: {meta['results_equal']}.", "",
             "| k | queued | " + " | ".join(f"{n} host | {n} GPU" for n in names) + " | hal host / launcher host |" +
             (" driver alone host / launcher host |" if DRIVER in names else ""),
             "|---:|---|" + "---:|---:|" * len(names) + "---:|" + ("---:|" if DRIVER in names else "")]
    for k, times in CASES:
        by = {r["competitor"]: r for r in rows if (r["kernels"], r["submissions"]) == (k, times)}
        launcher = by["Triton's launcher"]["host_us"]
        ratio = by["hal, one command buffer"]["host_us"] / launcher
        cells = " | ".join(f"{by[n]['host_us']:.2f} | {by[n]['gpu_us']:.2f}" for n in names)
        queued = "once, GPU idle" if times == 1 else f"{times} times in a row"
        floor = f" {by[DRIVER]['host_us'] / launcher:.3f} |" if DRIVER in by else ""
        lines.append(f"| {k} | {queued} | {cells} | {ratio:.3f} ({'met' if ratio <= TARGET else 'MISSED'} <= "
                     f"{TARGET}) |{floor}")
    floors = meta["floors"]
    lines += ["", f"Floor: a dependent node of a chain of empty kernels in a graph takes {floors['node_us']:.2f} µs of "
                  f"GPU time. First use: Triton's compilation and launcher {meta['triton_first_s']:.2f} s; hal's "
                  f"compilation and load {meta['hal_first_s']:.2f} s (from hal's disk cache after the first run)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return plain_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
