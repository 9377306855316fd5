"""Collectives in hal command buffers against NCCL called directly and PyTorch distributed (issue 21), on every GPU
of the machine; side by side in one process (or, for the data-parallel step, in each of one process per GPU).

1. all_reduce bus bandwidth from 8 B to 1 GiB (float32 sum). hal: each rank's reusable command buffer holds one
   all_reduce (a child graph node in its CUDA graph, the peer kernel's node up to 1 MiB on 2 GPUs), submitted to every
   rank. NCCL: nccl4py's ncclAllReduce for every rank in one group, on streams, with communicators and buffers of
   its own. Wall time per operation of many back to back; bus bandwidth = bytes / time x 2 (n - 1) / n, NCCL's
   convention.
   Target: >= 0.95x NCCL at large sizes.
2. Small-message latency: 100 all_reduces of 8 B in one command buffer (one graph launch per rank) against 100
   eager NCCL calls; and the same hal command buffers through NCCL alone (HAL_CUDA_PEER_ALL_REDUCE=0: all_reduces
   up to backends.cuda_graph.peer_all_reduce.one_shot_bytes otherwise run in hal's peer kernel).
3. A data-parallel step, one process per GPU (hal's rank/world form, a rendezvous file): per layer a matmul kernel
   makes a gradient and an all_reduce sums it across ranks, the next layer's matmul overlapping this all_reduce
   (hazards mode); against PyTorch distributed (NCCL) running the same step eagerly and as a captured CUDA graph.
   hal's matmul is a plain tiled kernel and torch's is cuBLAS: the kernels alone are timed too, and hal's step runs
   a second time with cuBLAS's matmul through torch in its command buffer (cb.call, bench.calls).

    python -m bench.collectives [--max-bytes N] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
import time

import numpy as np

import hal
from bench import emit, in_processes

BANDWIDTH_TARGET = 0.95
REPEATS = 5
LATENCY_OPS = 100
LAYERS, WIDTH, STEPS = 8, 512, 50
WORKER_TIMEOUT_S = 180
REBIND_BYTES, REBIND_STEPS = 2 << 20, 20  # (past the peer kernel's limit: NCCL's work)
MATMUL = r"""
extern "C" __global__ void matmul(const float* a, const float* b, float* c, unsigned n) {
    __shared__ float ta[16][16], tb[16][16];
    unsigned tx = threadIdx.x, ty = threadIdx.y, row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
    float acc = 0.0f;
    for (unsigned t = 0; t < n; t += 16) {
        ta[ty][tx] = a[row * n + t + tx];
        tb[ty][tx] = b[(t + ty) * n + col];
        __syncthreads();
        for (unsigned k = 0; k < 16; ++k) acc += ta[ty][k] * tb[k][tx];
        __syncthreads();
    }
    c[row * n + col] = acc;
}
"""
MATMUL_SOURCE = hal.ExecutableSource.cuda(MATMUL, [hal.Export("matmul", bindings=3, constants=1,
                                                              workgroup_size=(16, 16, 1), readonly=(0, 1))])


def _iterations(nbytes: int) -> int:
    """Operations per timing: 200 for small messages, at least 20 (about 60 ms at 1 GiB)."""
    return int(min(200, max(20, 5e9 / nbytes)))


class DirectNccl:
    """The reference: NCCL through nccl4py on streams of its own, one communicator per GPU (ncclCommInitAll)."""

    def __init__(self, ordinals: list[int]) -> None:
        from cuda.bindings import driver
        from nccl.bindings import nccl
        self.driver, self.nccl = driver, nccl
        self.contexts = [driver.cuDevicePrimaryCtxRetain(driver.cuDeviceGet(i)[1])[1] for i in ordinals]
        self.streams = []
        for ctx in self.contexts:
            driver.cuCtxSetCurrent(ctx)
            self.streams.append(int(driver.cuStreamCreate(driver.CUstream_flags.CU_STREAM_NON_BLOCKING)[1]))
        self.comms = nccl.comm_init_all(len(ordinals), ordinals)
        self.float32, self.sum = int(nccl.DataType.Float32), int(nccl.RedOp.Sum)

    def allocate(self, rank: int, nbytes: int) -> int:
        self.driver.cuCtxSetCurrent(self.contexts[rank])
        return int(self.driver.cuMemAlloc(nbytes)[1])

    def free(self, address: int) -> None:
        self.driver.cuMemFree(address)

    def all_reduce(self, sends: list[int], recvs: list[int], count: int) -> None:
        self.nccl.group_start()
        for r, comm in enumerate(self.comms):
            self.nccl.all_reduce(sends[r], recvs[r], count, self.float32, self.sum, comm, self.streams[r])
        self.nccl.group_end()

    def synchronize(self) -> None:
        for ctx, s in zip(self.contexts, self.streams):
            self.driver.cuCtxSetCurrent(ctx)
            self.driver.cuStreamSynchronize(s)


def _wall_us(submit, synchronize, iterations: int, repeats: int = 3) -> float:
    """Wall µs per operation of `iterations` submitted back to back: the best of `repeats`."""
    best = float("inf")
    for _ in range(repeats):
        synchronize()
        t0 = time.perf_counter()
        for _ in range(iterations):
            submit()
        synchronize()
        best = min(best, time.perf_counter() - t0)
    return best / iterations * 1e6


def _submit_all(devices: list[hal.Device], cbs: list[hal.CommandBuffer]) -> None:
    for d, cb in zip(devices, cbs):
        d.queue_execute(cb)


def _synchronize_all(devices: list[hal.Device]) -> None:
    for d in devices:
        d.synchronize()


def _one_size(devices: list[hal.Device], comm: hal.Communicator, direct: DirectNccl, nbytes: int) -> dict:
    n, count = len(devices), nbytes // 4
    sources = [d.upload(np.full(count, r + 1, np.float32)) for r, d in enumerate(devices)]
    targets = [d.allocate(nbytes) for d in devices]
    cbs = []
    for r, d in enumerate(devices):
        cb = d.create_command_buffer(mode="reusable")
        with cb:
            cb.all_reduce(comm, sources[r], targets[r], np.float32)
        cbs.append(cb)
    sends = [direct.allocate(r, nbytes) for r in range(n)]
    recvs = [direct.allocate(r, nbytes) for r in range(n)]
    iterations = _iterations(nbytes)
    _submit_all(devices, cbs)  # builds and uploads
    hal_us = nccl_us = float("inf")
    for _ in range(REPEATS):  # in turns, so that a drift of the machine lands on both
        hal_us = min(hal_us, _wall_us(functools.partial(_submit_all, devices, cbs),
                                      functools.partial(_synchronize_all, devices), iterations, 1))
        nccl_us = min(nccl_us, _wall_us(functools.partial(direct.all_reduce, sends, recvs, count), direct.synchronize,
                                        iterations, 1))
    correct = all(np.all(t.read(np.float32) == n * (n + 1) / 2) for t in targets)
    factor = 2 * (n - 1) / n if n > 1 else 1.0
    for b in sources + targets:
        b.release()
    for a in sends + recvs:
        direct.free(a)
    return dict(bytes=nbytes, hal_us=hal_us, nccl_us=nccl_us, hal_busbw=nbytes / hal_us / 1e3 * factor,
                nccl_busbw=nbytes / nccl_us / 1e3 * factor, correct=bool(correct))


def bandwidth(devices: list[hal.Device], comm: hal.Communicator, direct: DirectNccl, max_bytes: int) -> list[dict]:
    """all_reduce from 8 B to `max_bytes`, x8 each step."""
    rows, nbytes = [], 8
    while nbytes <= max_bytes:
        rows.append(_one_size(devices, comm, direct, nbytes))
        nbytes *= 8
    return rows


def nccl_only(devices: list[hal.Device]) -> hal.Communicator:
    """A communicator of `devices` whose all_reduces all go through NCCL (without hal's peer kernel)."""
    from backends.cuda_graph.peer_all_reduce import SWITCH
    previous = os.environ.get(SWITCH)
    os.environ[SWITCH] = "0"
    try:
        return hal.create_communicator(devices)
    finally:
        if previous is None:
            del os.environ[SWITCH]
        else:
            os.environ[SWITCH] = previous


def latency(devices: list[hal.Device], comm: hal.Communicator, direct: DirectNccl) -> dict:
    n = len(devices)
    buffers = [d.upload(np.ones(2, np.float32)) for d in devices]
    cbs = []
    for r, d in enumerate(devices):
        cb = d.create_command_buffer(mode="reusable")
        with cb:
            for i in range(LATENCY_OPS):
                if i:
                    cb.execution_barrier()
                cb.all_reduce(comm, buffers[r], buffers[r], np.float32, "max")
        cbs.append(cb)
    sends = [direct.allocate(r, 8) for r in range(n)]

    def eager():
        for _ in range(LATENCY_OPS):
            direct.all_reduce(sends, sends, 2)

    _submit_all(devices, cbs)
    graph_us = _wall_us(functools.partial(_submit_all, devices, cbs), functools.partial(_synchronize_all, devices),
                        10) / LATENCY_OPS
    eager_us = _wall_us(eager, direct.synchronize, 10) / LATENCY_OPS
    for a in sends:
        direct.free(a)
    return dict(ops=LATENCY_OPS, hal_graph_us=graph_us, nccl_eager_us=eager_us)


def _record_slot_all_reduce(dev: hal.Device, comm: hal.Communicator) -> hal.CommandBuffer:
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        cb.all_reduce(comm, hal.slot(0, 0, REBIND_BYTES), hal.slot(1, 0, REBIND_BYTES), np.float32)
    return cb


def rebinding(devices: list[hal.Device], comm: hal.Communicator) -> dict:
    """Host µs per step (every rank) of an all_reduce through slots given another table each step: hal patches its
    node (the peer kernel's, or the child graph node of NCCL's work captured again), against recording and
    submitting a new command buffer."""
    tables = [[(d.allocate(REBIND_BYTES), d.allocate(REBIND_BYTES)) for d in devices] for _ in range(2)]
    cbs = [_record_slot_all_reduce(d, comm) for d in devices]
    times = {"patch": float("inf"), "record": float("inf")}
    for step in range(2 * REBIND_STEPS):
        table = tables[step % 2]
        t0 = time.perf_counter()
        if step % 4 < 2:
            for d, cb, t in zip(devices, cbs, table):
                d.queue_execute(cb, binding_table=t)
            how = "patch"
        else:
            for d, t in zip(devices, table):
                d.queue_execute(_record_slot_all_reduce(d, comm), binding_table=t)
            how = "record"
        elapsed = time.perf_counter() - t0
        _synchronize_all(devices)
        if step >= 4:  # the first steps build
            times[how] = min(times[how], elapsed)
    return dict(bytes=REBIND_BYTES, patch_us=times["patch"] * 1e6, record_us=times["record"] * 1e6)


def _dp_worker(rank: int, world: int, directory: str, results) -> None:
    """One process of the data-parallel step: hal, then PyTorch distributed, on GPU `rank`."""
    import faulthandler

    import torch
    import torch.distributed as dist
    faulthandler.dump_traceback_later(WORKER_TIMEOUT_S - 20, exit=True)  # where a stuck worker is, before it is dropped
    from bench.cublas import torch_matmul
    os.environ.setdefault("NCCL_RUNTIME_CONNECT", "0")
    torch.cuda.set_device(rank)
    dev = hal.create_device(f"cuda:{rank}")
    comm = hal.create_communicator([dev], rank=rank, world=world, rendezvous=os.path.join(directory, "hal-id"))
    rng = np.random.default_rng(rank)
    a_host = [rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) for _ in range(LAYERS)]
    b_host = [rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) for _ in range(LAYERS)]
    exe = dev.load_executable(MATMUL_SOURCE)
    a = [dev.upload(x) for x in a_host]
    b = [dev.upload(x) for x in b_host]
    grads = [dev.allocate(WIDTH * WIDTH * 4) for _ in range(LAYERS)]
    groups = (WIDTH // 16, WIDTH // 16, 1)

    def record(with_collectives: bool, cublas: bool = False) -> hal.CommandBuffer:
        cb = dev.create_command_buffer(mode="reusable", dependencies="hazards")
        with cb:
            for layer in range(LAYERS):
                if layer:
                    cb.execution_barrier()
                if cublas:
                    cb.call(torch_matmul(WIDTH), (a[layer], b[layer], grads[layer]), reads=(0, 1))
                else:
                    cb.dispatch(exe, "matmul", groups, (WIDTH,), (a[layer], b[layer], grads[layer]))
                if layer and with_collectives:
                    cb.all_reduce(comm, grads[layer - 1], grads[layer - 1], np.float32)
            if with_collectives:
                cb.execution_barrier()
                cb.all_reduce(comm, grads[-1], grads[-1], np.float32)
        return cb

    step, kernels_only, cublas_step = record(True), record(False), record(True, cublas=True)

    def hal_time(cb) -> tuple[float, float]:
        dev.queue_execute(cb)
        dev.synchronize()
        best, host = float("inf"), float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(STEPS):
                t1 = time.perf_counter()
                dev.queue_execute(cb)
                host = min(host, time.perf_counter() - t1)
            dev.synchronize()
            best = min(best, time.perf_counter() - t0)
        return best / STEPS * 1e6, host * 1e6

    hal_step_us, hal_host_us = hal_time(step)
    hal_kernels_us, _ = hal_time(kernels_only)
    dev.queue_execute(step)  # one step from the inputs: the gradients to check
    hal_grads = np.stack([g.read(np.float32).reshape(WIDTH, WIDTH) for g in grads])
    hal_cublas_step_us, hal_cublas_host_us = hal_time(cublas_step)
    dev.queue_execute(cublas_step)
    cublas_grads = np.stack([g.read(np.float32).reshape(WIDTH, WIDTH) for g in grads])

    dist.init_process_group("nccl", init_method="file://" + os.path.join(directory, "torch-id"), rank=rank,
                            world_size=world)
    ta = [torch.from_numpy(x).cuda() for x in a_host]
    tb = [torch.from_numpy(x).cuda() for x in b_host]
    tg = [torch.empty(WIDTH, WIDTH, device="cuda") for _ in range(LAYERS)]

    def torch_step(collectives: bool = True):
        for layer in range(LAYERS):
            torch.matmul(ta[layer], tb[layer], out=tg[layer])
            if collectives:
                dist.all_reduce(tg[layer])

    def torch_time(fn) -> tuple[float, float]:
        fn()
        torch.cuda.synchronize()
        best, host = float("inf"), float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(STEPS):
                t1 = time.perf_counter()
                fn()
                host = min(host, time.perf_counter() - t1)
            torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        return best / STEPS * 1e6, host * 1e6

    eager_us, eager_host_us = torch_time(torch_step)
    torch_kernels_us, _ = torch_time(lambda: torch_step(False))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch_step()  # NCCL's first use outside the capture
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        torch_step()
    graph_us, graph_host_us = torch_time(graph.replay)
    torch_step()
    torch.cuda.synchronize()
    torch_grads = np.stack([g.cpu().numpy() for g in tg])
    error = max(float(np.max(np.abs(ours - torch_grads)) / np.max(np.abs(torch_grads)))
                for ours in (hal_grads, cublas_grads))
    results.put(dict(rank=rank, hal_step_us=hal_step_us, hal_host_us=hal_host_us, hal_kernels_us=hal_kernels_us,
                     hal_cublas_step_us=hal_cublas_step_us, hal_cublas_host_us=hal_cublas_host_us,
                     torch_eager_us=eager_us, torch_eager_host_us=eager_host_us, torch_graph_us=graph_us,
                     torch_graph_host_us=graph_host_us, torch_kernels_us=torch_kernels_us, relative_error=error))
    del graph  # its captured NCCL work would keep the process group's communicator from closing
    dist.destroy_process_group()
    comm.close()
    dev.close()


def data_parallel(world: int) -> list[dict]:
    with tempfile.TemporaryDirectory() as directory:
        rows = in_processes(_dp_worker, [(r, world, directory) for r in range(world)], WORKER_TIMEOUT_S)
    if any("rank" not in row for row in rows):
        raise TimeoutError(f"the data-parallel step: {rows[0]['error']}")
    return sorted(rows, key=lambda row: row["rank"])


def run(max_bytes: int, with_data_parallel: bool = True) -> dict:
    count = len(hal.drivers.get_driver("cuda").devices())
    devices = [hal.create_device(f"cuda:{i}") for i in range(count)]
    comm = hal.create_communicator(devices)
    direct = DirectNccl(list(range(count)))
    try:
        rows = bandwidth(devices, comm, direct, max_bytes)
        small = latency(devices, comm, direct)
        with nccl_only(devices) as through_nccl:
            small["hal_graph_nccl_us"] = latency(devices, through_nccl, direct)["hal_graph_us"]
        rebind = rebinding(devices, comm)
        peer = "on" if comm.peer is not None else f"off ({comm.peer_unavailable})"
        peer_limit = comm.peer.limit if comm.peer is not None else 0
    finally:
        comm.close()
        for d in devices:
            d.close()
    meta = dict(device=devices[0].name, gpus=count, date=time.strftime("%Y-%m-%d"), peer_all_reduce=peer,
                peer_limit_bytes=peer_limit)
    return dict(meta=meta, bandwidth=rows, latency=small, rebinding=rebind,
                data_parallel=data_parallel(count) if with_data_parallel else [])


def report(result: dict) -> str:
    meta = result["meta"]
    lines = [f"## Collectives on {meta['gpus']} x {meta['device']}, {meta['date']}", "",
             "all_reduce (float32 sum): wall µs per operation back to back, bus bandwidth GB/s "
             "(bytes / time x 2(n-1)/n).", "",
             "| bytes | hal µs | NCCL µs | hal GB/s | NCCL GB/s | hal/NCCL bandwidth | correct |",
             "|---:|---:|---:|---:|---:|---:|:---:|"]
    for r in result["bandwidth"]:
        lines.append(f"| {r['bytes']} | {r['hal_us']:.1f} | {r['nccl_us']:.1f} | {r['hal_busbw']:.2f} | "
                     f"{r['nccl_busbw']:.2f} | {r['nccl_us'] / r['hal_us']:.3f}x | {'yes' if r['correct'] else 'NO'} |")
    for low, what in ((1 << 27, "at large sizes (128 MiB and up, near the links' peak)"), (1 << 24, "from 16 MiB")):
        large = [r for r in result["bandwidth"] if r["bytes"] >= low]
        if large:
            worst = min(r["nccl_us"] / r["hal_us"] for r in large)
            lines += ["", f"Target: >= {BANDWIDTH_TARGET}x NCCL's bus bandwidth {what}: {worst:.3f}x at worst "
                          f"({'met' if worst >= BANDWIDTH_TARGET else 'MISSED'})."]
    from backends.cuda_graph.peer_all_reduce import SWITCH
    s = result["latency"]
    limit = meta.get("peer_limit_bytes")  # (0: the peer kernel is off; None: a run from before it was recorded)
    lines += ["", f"Small messages: {s['ops']} all_reduces of 8 B: {s['hal_graph_us']:.2f} µs each in one hal command "
                  f"buffer (one graph launch per rank; hal's peer kernel {meta['peer_all_reduce']}), "
                  f"{s['hal_graph_nccl_us']:.2f} µs each through NCCL in the same ({SWITCH}=0), "
                  f"{s['nccl_eager_us']:.2f} µs each as eager NCCL calls "
                  f"({s['nccl_eager_us'] / s['hal_graph_us']:.2f}x)." +
                  (f" Up to {limit // 1024} KiB a rank, the bandwidth table's hal column is the peer kernel too."
                   if limit else "")]
    b = result["rebinding"]
    patched = ("its node" if limit is None else "the peer kernel's node (new parameters)" if b["bytes"] <= limit
               else "the child graph node (NCCL's work captured again)")
    lines += ["", f"Rebinding: an all_reduce of {b['bytes']} B through slots, another table every step: "
                  f"{b['patch_us']:.1f} µs of host time per step (every rank) patching {patched}, against "
                  f"{b['record_us']:.1f} µs recording and submitting a new command buffer "
                  f"({b['record_us'] / b['patch_us']:.1f}x)."]
    rows = result["data_parallel"]
    if rows:
        r = max(rows, key=lambda row: row["hal_step_us"])  # the slowest rank sets the step
        lines += ["", f"Data-parallel step ({LAYERS} layers: a {WIDTH}x{WIDTH} matmul and an all_reduce of its "
                      f"gradient each), one process per GPU, slowest rank:", "",
                  "| | step µs | host µs per submit | kernels alone µs |", "|---|---:|---:|---:|",
                  f"| hal (one command buffer) | {r['hal_step_us']:.1f} | {r['hal_host_us']:.1f} | "
                  f"{r['hal_kernels_us']:.1f} |",
                  f"| hal, cuBLAS through torch in its command buffer (cb.call) | {r['hal_cublas_step_us']:.1f} | "
                  f"{r['hal_cublas_host_us']:.1f} | |",
                  f"| PyTorch eager | {r['torch_eager_us']:.1f} | {r['torch_eager_host_us']:.1f} | "
                  f"{r['torch_kernels_us']:.1f} |",
                  f"| PyTorch CUDA graph | {r['torch_graph_us']:.1f} | {r['torch_graph_host_us']:.1f} | |", "",
                  f"hal / PyTorch CUDA graph step time: {r['hal_step_us'] / r['torch_graph_us']:.2f}x; the matmul "
                  f"kernels alone: hal {r['hal_kernels_us']:.1f} µs, cuBLAS through torch {r['torch_kernels_us']:.1f} "
                  f"µs. Gradients agree within {max(row['relative_error'] for row in rows):.1e} (relative)."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-bytes", type=int, default=1 << 30)
    parser.add_argument("--no-data-parallel", action="store_true", help="leave out the data-parallel step")
    parser.add_argument("--json", default=None, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = run(args.max_bytes, not args.no_data_parallel)
    return emit(result, report(result), args.json)


if __name__ == "__main__":
    raise SystemExit(main())
