"""A library's calls in hal command buffers (issue 50): cuBLAS through torch recorded with cb.call, against the same
calls captured by torch itself and against hal's own kernels, on one GPU, in one process.

1. GPU µs per call: K matmuls (N x N float32, each into its own output) in one command buffer resubmitted R times,
   CUDA events on hal's stream; torch: the same K torch.matmul(out=) captured in a torch CUDA graph and replayed R
   times, events on torch's stream. Target: hal / torch <= 1.05.
2. Host µs of an unchanged resubmission (SMALL x SMALL matmuls, so that the GPU keeps up): the command buffer of K
   calls against the same command buffer with hal's own matmul kernel in their place (one kernel node each), both
   a chain (calls run in their recording order; a graph's launch costs more host time the wider it is).
   Target: <= 1.05x.
3. A new binding table: the K calls' buffers through slots, two tables in turn: host µs per submit once both are
   captured (the K child graph nodes set to kept captures) against the submits that captured them.
4. The data-parallel step of bench.collectives (LAYERS matmuls, each gradient all-reduced), one process per GPU
   (every GPU of the machine, or one: world size 1 all-reduces through NCCL with one rank), with cuBLAS through
   cb.call in hal's command buffer against PyTorch's step captured in a CUDA graph. Target: >= 1.0x its speed.
Each row is the median of RUNS after a warm-up; beside them the floors measured on the same GPU
(bench.decode.measure_floors): a dependent node of a chain of empty kernels in a graph, and the copy bandwidth, at
which an N x N matmul's three matrices take what they take.

    python -m bench.calls [--json PATH]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import numpy as np

import hal
from bench import Events, plain_main
from bench.cublas import torch_matmul

N, SMALL, K, R, RUNS = 512, 64, 8, 50, 7
GPU_TARGET, HOST_TARGET, STEP_TARGET = 1.05, 1.05, 1.0


def _median(measure: Callable[[], float]) -> float:
    measure()  # the warm-up
    return statistics.median(measure() for _ in range(RUNS))


def gpu_per_call(dev: hal.Device) -> dict:
    import torch
    rng = np.random.default_rng(0)
    hosts = [rng.standard_normal((N, N)).astype(np.float32) for _ in range(K + 1)]
    a, bs, cs = dev.upload(hosts[0]), [dev.upload(h) for h in hosts[1:]], [dev.allocate(4 * N * N) for _ in range(K)]
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        for k in range(K):
            cb.call(torch_matmul(N), (a, bs[k], cs[k]), reads=(0, 1))
    events = Events(dev)

    def hal_us() -> float:
        dev.queue_execute(cb)
        events.mark()
        for _ in range(R):
            dev.queue_execute(cb)
        events.mark()
        return events.seconds() / (R * K) * 1e6

    ta, tbs = torch.from_numpy(hosts[0]).cuda(), [torch.from_numpy(h).cuda() for h in hosts[1:]]
    tcs = [torch.empty(N, N, device="cuda") for _ in range(K)]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # cuBLAS's first use outside the capture
        for k in range(K):
            torch.matmul(ta, tbs[k], out=tcs[k])
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for k in range(K):
            torch.matmul(ta, tbs[k], out=tcs[k])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def torch_us() -> float:
        graph.replay()
        start.record()
        for _ in range(R):
            graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3 / (R * K)

    hal_gpu, torch_gpu = _median(hal_us), _median(torch_us)
    dev.queue_execute(cb)
    torch.cuda.synchronize()
    error = max(float(np.max(np.abs(cs[k].read(np.float32).reshape(N, N) - tcs[k].cpu().numpy()))) for k in range(K))
    return dict(n=N, calls=K, hal_gpu_us=hal_gpu, torch_gpu_us=torch_gpu, ratio=hal_gpu / torch_gpu,
                max_difference=error)


def _host_us(dev: hal.Device, cb: hal.CommandBuffer, tables: list[tuple]) -> float:
    """Median host µs of one queue_execute over R submits cycling through `tables` (the device synchronized
    between runs)."""
    def once() -> float:
        dev.synchronize()
        times = []
        for i in range(R):
            t0 = time.perf_counter()
            dev.queue_execute(cb, binding_table=tables[i % len(tables)])
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1e6
    return _median(once)


def host_resubmission(dev: hal.Device) -> dict:
    from bench.collectives import MATMUL_SOURCE
    exe = dev.load_executable(MATMUL_SOURCE)
    sets = [[dev.upload(np.ones((SMALL, SMALL), np.float32)) for _ in range(3)] for _ in range(2 * K)]

    def record(use_calls: bool, slots: bool) -> hal.CommandBuffer:
        cb = dev.create_command_buffer(mode="reusable", binding_capacity=3 * K if slots else 0)
        with cb:
            for k in range(K):
                if k:  # a chain either way, as the calls are (see hal.calls: they run in recording order)
                    cb.execution_barrier()
                bindings = tuple(hal.slot(3 * k + i) for i in range(3)) if slots else tuple(sets[k])
                if use_calls:
                    cb.call(torch_matmul(SMALL), bindings, reads=(0, 1))
                else:
                    cb.dispatch(exe, "matmul", (SMALL // 16, SMALL // 16, 1), (SMALL,), bindings)
        return cb

    with_calls, without = _host_us(dev, record(True, False), [()]), _host_us(dev, record(False, False), [()])
    tables = [tuple(b for k in range(K) for b in sets[K * t + k]) for t in range(2)]
    rebound = record(True, True)
    first = []
    for table in tables:  # each table's first submit captures its K calls
        dev.synchronize()
        t0 = time.perf_counter()
        dev.queue_execute(rebound, binding_table=table)
        first.append((time.perf_counter() - t0) * 1e6)
    return dict(n=SMALL, calls=K, with_calls_us=with_calls, with_kernels_us=without, ratio=with_calls / without,
                rebind_us=_host_us(dev, rebound, tables), first_capture_us=max(first),
                captures=rebound.emitter.calls_captured, instantiations=rebound.emitter.instantiations)


def data_parallel_step() -> list[dict] | str:
    """bench.collectives' data-parallel step on every GPU; why not, where it cannot run."""
    from backends.cuda_graph.communicator import nccl_bindings
    from bench import collectives
    try:
        nccl_bindings()
    except hal.UnsupportedError as e:
        return f"not run: {e}"
    count = len(hal.drivers.get_driver("cuda").devices())
    return collectives.data_parallel(count)


def run() -> dict:
    import torch

    from bench.decode import measure_floors
    dev = hal.create_device("cuda")
    try:
        gpu, host, floors = gpu_per_call(dev), host_resubmission(dev), measure_floors(dev)
    finally:
        dev.close()
    meta = dict(device=torch.cuda.get_device_name(), date=time.strftime("%Y-%m-%d"), torch=torch.__version__,
                floors=floors)
    return dict(meta=meta, gpu=gpu, host=host, data_parallel=data_parallel_step())


def floors_line(floors: dict, n: int) -> str:
    """The floors beside the rows: a dependent node, and an n x n matmul's matrices at the copy bandwidth."""
    matrices = 3 * 4 * n * n
    return (f"Floors: a dependent node of a chain of empty kernels in a graph takes {floors['node_us']:.2f} µs of GPU "
            f"time; a {n}x{n} matmul reads and writes at least {matrices / 1e6:.1f} MB, "
            f"{matrices / floors['copy_gb_per_s'] / 1e3:.2f} µs at the copy bandwidth measured here "
            f"({floors['copy_gb_per_s']:.0f} GB/s, read + write).")


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(result: dict) -> str:
    meta, g, h, rows = result["meta"], result["gpu"], result["host"], result["data_parallel"]
    lines = [f"## cuBLAS through cb.call on {meta['device']}, {meta['date']} (torch {meta['torch']})", "",
             "| | hal (cb.call) | other | hal / other | target |", "|---|---:|---:|---:|---|",
             f"| GPU µs per {g['n']}x{g['n']} matmul, {g['calls']} in one command buffer; other: torch's CUDA graph "
             f"of the same calls | {g['hal_gpu_us']:.2f} | {g['torch_gpu_us']:.2f} | {g['ratio']:.3f} | <= "
             f"{GPU_TARGET}: {_verdict(g['ratio'] <= GPU_TARGET)} |",
             f"| host µs of an unchanged resubmission, {h['calls']} calls of {h['n']}x{h['n']}; other: hal's matmul "
             f"kernel in their place | {h['with_calls_us']:.2f} | {h['with_kernels_us']:.2f} | {h['ratio']:.3f} | "
             f"<= {HOST_TARGET}: {_verdict(h['ratio'] <= HOST_TARGET)} |",
             f"| host µs a submit, two binding tables in turn (captures kept); other: the submit that captured | "
             f"{h['rebind_us']:.2f} | {h['first_capture_us']:.1f} | {h['rebind_us'] / h['first_capture_us']:.3f} | |",
             "", f"Largest difference between hal's and torch's products: {g['max_difference']:.1e}; the rebound "
                 f"command buffer captured {h['captures']} times ({h['calls']} calls x 2 tables) and was "
                 f"instantiated {h['instantiations']} time(s).", "", floors_line(meta["floors"], g["n"])]
    if isinstance(rows, str):
        lines += ["", f"Data-parallel step: {rows}"]
        return "\n".join(lines)
    r = max(rows, key=lambda row: row["hal_cublas_step_us"])  # the slowest rank sets the step
    speed = r["torch_graph_us"] / r["hal_cublas_step_us"]
    lines += ["", f"Data-parallel step (bench.collectives) on {len(rows)} GPU(s), slowest rank: hal with cuBLAS "
                  f"through cb.call {r['hal_cublas_step_us']:.1f} µs, hal with its own matmul {r['hal_step_us']:.1f} "
                  f"µs, PyTorch's CUDA graph {r['torch_graph_us']:.1f} µs, eager {r['torch_eager_us']:.1f} µs: "
                  f"{speed:.2f}x PyTorch's CUDA graph's speed (target >= {STEP_TARGET}: "
                  f"{_verdict(speed >= STEP_TARGET)}); gradients agree within "
                  f"{max(row['relative_error'] for row in rows):.1e} (relative)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return plain_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
