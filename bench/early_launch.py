"""Early launch against plain edges on CUDA (issue 47, item 3a): chains of small dependent kernels, GPU µs per node.

Two kernels, each as a reusable chain of k dispatches (a barrier between each, every one reading what the one before
wrote):
- `shift` (tests.kernels: y = x * 3 + k over ELEMENTS uint32, 1024 workgroups of 64): everything it reads, the
  kernel before wrote, so early launch can only hide the launch;
- `matvec` (a decode step's shape: 128 workgroups of 256, each warp one row of a ROWS x COLUMNS float32 matrix
  times the vector the kernel before wrote): its weights are its own, loaded before its wait, so early launch also
  hides their trip to memory behind the kernel before.
Each runs as its export is marked, early_launch, on the device as it is and on the same GPU opened with
supports_early_launch off (plain edges; the kernel's wait then returns at once); and an unmarked twin (no
griddepcontrol) beside them. GPU µs per node: CUDA events around one launch, the median of RUNS, the competitors in
turns, beside the floor: a dependent node of a chain of empty kernels in a graph (bench.decode.measure_floors, plain
edges). Target (issue 47): early launch <= 0.7x plain edges.

    python -m bench.early_launch [--json PATH]
"""

from __future__ import annotations

import statistics

import numpy as np

import hal
from bench import Events, plain_main
from tests.kernels import EARLY_SOURCE

LENGTHS = (10, 100, 1000)
ELEMENTS = 1 << 16  # shift: 1024 workgroups of 64, a kernel that fills the GPU briefly
ROWS, COLUMNS = 1024, 256  # matvec: a warp a row, 1 KiB of weights and the 1 KiB vector each
RUNS = 15
TARGET = 0.7

MATVEC_CODE = r"""
#if __CUDA_ARCH__ >= 900
#define LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define WAIT_FOR_PREDECESSORS() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define LAUNCH_DEPENDENTS()
#define WAIT_FOR_PREDECESSORS()
#endif
// TRIGGER: where the kernel lets the next launch: 0 nowhere (no griddepcontrol), 1 at its entry, 2 after its wait
template <int TRIGGER>
__device__ void matvec_row(const float4* w, const float4* x, float* y) {
    unsigned warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
    const float4* row = w + warp * 64;
    float4 a = row[lane], b = row[lane + 32];  // the weights: this kernel's own, read before its wait
    if (TRIGGER == 1) LAUNCH_DEPENDENTS();
    if (TRIGGER != 0) WAIT_FOR_PREDECESSORS();
    if (TRIGGER == 2) LAUNCH_DEPENDENTS();
    float4 c = x[lane], d = x[lane + 32];  // the vector the kernel before wrote
    float s = a.x * c.x + a.y * c.y + a.z * c.z + a.w * c.w + b.x * d.x + b.y * d.y + b.z * d.z + b.w * d.w;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) y[warp] = s;
}
extern "C" __global__ void matvec(const float4* w, const float4* x, float* y) { matvec_row<1>(w, x, y); }
extern "C" __global__ void matvec_after_wait(const float4* w, const float4* x, float* y) { matvec_row<2>(w, x, y); }
extern "C" __global__ void matvec_plain(const float4* w, const float4* x, float* y) { matvec_row<0>(w, x, y); }
"""
MATVEC_SOURCE = hal.ExecutableSource.cuda(MATVEC_CODE, [
    hal.Export("matvec", bindings=3, workgroup_size=256, readonly=(0, 1), early_launch=True),
    hal.Export("matvec_after_wait", bindings=3, workgroup_size=256, readonly=(0, 1), early_launch=True),
    hal.Export("matvec_plain", bindings=3, workgroup_size=256, readonly=(0, 1))])
KERNELS = {"shift": ("shift_plain", f"y = x * 3 + k over {ELEMENTS} uint32, {ELEMENTS // 64} workgroups of 64: "
                                    f"nothing of its own to read before its wait"),
           "matvec": ("matvec_plain", f"a {ROWS} x {COLUMNS} float32 matrix times the vector before, "
                                      f"{ROWS * 32 // 256} workgroups of 256, a warp a row: its weights read before "
                                      f"its wait")}


class Chains:
    """One kernel's chains on one device: its buffers and, per length in `lengths`, a command buffer of that many
    dispatches of `export`."""

    def __init__(self, dev: hal.Device, kernel: str, export: str, lengths: tuple[int, ...] = LENGTHS) -> None:
        if kernel == "shift":
            exe = dev.load_executable(EARLY_SOURCE)
            bufs = [dev.upload(np.arange(ELEMENTS, dtype=np.uint32)) for _ in range(2)]

            def record(cb: hal.CommandBuffer, i: int) -> None:
                cb.dispatch(exe, export, (ELEMENTS // 64, 1, 1), (ELEMENTS, i), (bufs[i % 2], bufs[(i + 1) % 2]))
            self.buffers = bufs
        else:
            exe = dev.load_executable(MATVEC_SOURCE)
            weights = dev.upload(np.full((ROWS, COLUMNS), 1.0 / COLUMNS, np.float32))  # keeps the vector bounded
            bufs = [dev.upload(np.ones(ROWS, np.float32)) for _ in range(2)]

            def record(cb: hal.CommandBuffer, i: int) -> None:
                cb.dispatch(exe, export, (ROWS * 32 // 256, 1, 1), (), (weights, bufs[i % 2], bufs[(i + 1) % 2]))
            self.buffers = [weights, *bufs]
        self.chains = {}
        for k in lengths:
            cb = self.chains[k] = dev.create_command_buffer(mode="reusable")
            with cb:
                for i in range(k):
                    if i:
                        cb.execution_barrier()
                    record(cb, i)

    def release(self) -> None:
        """Free the chains' buffers (the device keeps running)."""
        for buffer in self.buffers:
            buffer.release()


def run() -> dict:
    competitors = {"early launch": ({}, False), "plain edges": ({"supports_early_launch": False}, False),
                   "unmarked kernel": ({}, True)}
    devices, chains = {}, {}
    try:
        for name, (capabilities, unmarked) in competitors.items():
            dev = devices[name] = hal.create_device("cuda", capabilities=capabilities)
            for kernel, (plain_export, _) in KERNELS.items():
                chains[name, kernel] = Chains(dev, kernel, plain_export if unmarked else kernel).chains
        supported = devices["early launch"].capabilities.supports_early_launch
        times: dict = {(kernel, name, k): [] for kernel in KERNELS for name in competitors for k in LENGTHS}
        events = {name: Events(dev) for name, dev in devices.items()}
        for _ in range(RUNS + 1):  # the first round warms up
            for kernel in KERNELS:
                for k in LENGTHS:
                    for name, dev in devices.items():
                        dev.synchronize()
                        events[name].mark()
                        dev.queue_execute(chains[name, kernel][k])
                        events[name].mark()
                        times[kernel, name, k].append(events[name].seconds() / k * 1e6)
        rows = [dict(kernel=kernel, kernels=k, competitor=name, gpu_us=statistics.median(times[kernel, name, k][1:]))
                for kernel in KERNELS for k in LENGTHS for name in competitors]
        from bench.decode import measure_floors
        meta = dict(device=devices["early launch"].name, supported=supported,
                    node_us=measure_floors(devices["plain edges"])["node_us"])
    finally:
        for dev in devices.values():
            dev.close()
    return dict(meta=meta, rows=rows)


def report(result: dict) -> str:
    meta, rows = result["meta"], result["rows"]
    lines = [f"## Early launch on {meta['device']} (supports_early_launch: {meta['supported']})", "",
             f"Chains of small dependent kernels, GPU µs per node, median of {RUNS} launches; the floor, a dependent "
             f"node of a chain of empty kernels in a graph: {meta['node_us']:.2f} µs."]
    for kernel, (_, what) in KERNELS.items():
        lines += ["", f"`{kernel}`: {what}.", "",
                  "| kernels | early launch | plain edges | unmarked kernel | early / plain |",
                  "|---:|---:|---:|---:|---:|"]
        for k in LENGTHS:
            us = {r["competitor"]: r["gpu_us"] for r in rows if r["kernels"] == k and r["kernel"] == kernel}
            ratio = us["early launch"] / us["plain edges"]
            lines.append(f"| {k} | {us['early launch']:.2f} | {us['plain edges']:.2f} | {us['unmarked kernel']:.2f} "
                         f"| {ratio:.2f} ({'met' if ratio <= TARGET else 'MISSED'} <= {TARGET}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return plain_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
