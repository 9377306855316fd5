"""Transient memory (issue 19), side by side on one device: a buffer that lives for one step.

A step allocates a buffer, runs one dispatch writing it (a reusable command buffer through a slot), and gives the
buffer back: with allocate() and release(), against queue_alloca() and queue_dealloca(), and the same with a
semaphore signalled by the dealloca (what a runtime chains on). Host µs per step (CYCLES steps, then one
synchronize, best of REPEATS), for a small and a large buffer.

cb.alloca on a 100-command program: the shared arena's peak against the sum of the transients. On CUDA also the
alternative hal did not take, the same program's graph with a memory alloc node before each transient's first use
and a free node after its last (the driver's graph memory), against the graph with hal's planned arena, both built
through cuda-bindings' driver calls: node building, instantiation, first launch, a launch, and the memory each
holds (the arena's bytes; the driver's CU_GRAPH_MEM_ATTR_USED_MEM_HIGH and RESERVED_MEM_HIGH).

    python -m bench.transients [--device host] [--json PATH]
"""

from __future__ import annotations

import time
from array import array

import numpy as np

import hal
from bench import device_main
from tests.kernels import SOURCE

SIZES = (4 << 10, 4 << 20)
PROGRAM_COMMANDS = 100
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
        plan = plan_row(dev, exe)
        graph_memory = graph_memory_row(dev, exe) if dev.driver == "cuda" else None
        meta = dict(device=dev.name, driver=dev.driver, date=time.strftime("%Y-%m-%d"))
    return dict(meta=meta, rows=rows, plan=plan, graph_memory=graph_memory)


def program_shape() -> tuple[list[int], list[int], list[int]]:
    """The 100-command program's transient sizes (1 to 16 KiB), the earlier step each step also reads (a skip
    connection from up to 8 steps back) and each transient's last use."""
    rng = np.random.default_rng(0)
    sizes = [int(256 * rng.integers(4, 65)) for _ in range(PROGRAM_COMMANDS)]
    skips = [int(max(0, i - rng.integers(1, 9))) for i in range(PROGRAM_COMMANDS)]
    last_use = [max([i] + [j for j in range(PROGRAM_COMMANDS) if j - 1 == i or skips[j] == i]) for i in range(
        PROGRAM_COMMANDS)]
    return sizes, skips, last_use


def record_program(cb: hal.CommandBuffer, exe: hal.Executable, source: hal.Buffer, refs: list,
                   skips: list[int]) -> None:
    """Step i adds step i - 1's output and its skip connection's (`skips`) into its own (`refs`), a barrier after
    each."""
    for i in range(PROGRAM_COMMANDS):
        inputs = (source, source) if i == 0 else (refs[i - 1], refs[skips[i]])
        cb.dispatch(exe, "add", (1, 1, 1), (ELEMENTS,), (*inputs, refs[i]))
        cb.execution_barrier()


def plan_row(dev: hal.Device, exe: hal.Executable) -> dict:
    """A 100-command program of transients (a chain, each step also reading a skip connection from up to 8 steps
    back, sizes 1 to 16 KiB): cb.alloca's peak against the sum of the transients and against the most bytes live
    in one segment (a lower bound of any placement), and what planning adds to end()."""
    sizes, skips, last_use = program_shape()
    source = dev.upload(np.arange(ELEMENTS, dtype=np.uint32))
    targets = [dev.allocate(size) for size in sizes]
    ends = {}
    for transient in (False, True):
        best = float("inf")
        for _ in range(REPEATS):
            cb = dev.create_command_buffer(mode="reusable")
            cb.begin()
            record_program(cb, exe, source, [cb.alloca(size) for size in sizes] if transient else targets, skips)
            t0 = time.perf_counter()
            cb.end()
            best = min(best, time.perf_counter() - t0)
        ends[transient] = best * 1e6
    live = max(sum(size for i, size in enumerate(sizes) if i <= s <= last_use[i]) for s in range(PROGRAM_COMMANDS))
    return dict(commands=PROGRAM_COMMANDS, peak=cb.transient_bytes, total=sum(sizes), live_bound=live,
                end_plain_us=ends[False], end_alloca_us=ends[True])


def graph_memory_row(dev: hal.Device, exe: hal.Executable) -> dict:
    """The program's CUDA graph two ways, through cuda-bindings' driver calls: the kernels pointing into hal's
    planned arena (cb.alloca, the addresses its Program holds), and the same kernels with a memory alloc node
    before each transient's first use (after the frees of those whose last use is past) and a free node after its
    last use. Per graph: µs to add the nodes, to instantiate, to the end of the first launch, per launch (50 back
    to back), and bytes of memory."""
    from cuda.bindings import driver

    def check(result):
        err, *rest = result if isinstance(result, tuple) else (result,)
        if err != driver.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"a driver call failed: {err!r}")
        return rest[0] if len(rest) == 1 else rest

    sizes, skips, last_use = program_shape()
    source = dev.upload(np.arange(ELEMENTS, dtype=np.uint32))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        record_program(cb, exe, source, [cb.alloca(size) for size in sizes], skips)
    arena = [[r.buffer.address + r.offset for r in c.bindings] for c in cb.program.commands]
    dev.activate()
    stream, device = driver.CUstream(dev.stream_handle), check(driver.cuCtxGetDevice())
    function = driver.CUfunction(exe.functions[0])  # "add"
    kept = []  # the parameter arrays, alive while the driver reads them

    def kernel(graph, deps: list, words: list[int]):
        values = array("Q", words + [ELEMENTS])
        pointers = array("Q", [values.buffer_info()[0] + 8 * k for k in range(len(values))])
        kept.append((values, pointers))
        params = driver.CUDA_KERNEL_NODE_PARAMS()
        params.func, params.gridDimX, params.gridDimY, params.gridDimZ = function, 1, 1, 1
        params.blockDimX, params.blockDimY, params.blockDimZ = exe.exports[0].workgroup_size
        params.kernelParams = pointers.buffer_info()[0]
        return check(driver.cuGraphAddKernelNode(graph, deps, len(deps), params))

    def build_arena(graph) -> None:
        previous = []
        for words in arena:
            previous = [kernel(graph, previous, words)]

    def build_memory_nodes(graph) -> None:
        address, frees, previous = [], {}, []
        for i in range(PROGRAM_COMMANDS):
            alloc = driver.CUDA_MEM_ALLOC_NODE_PARAMS()
            alloc.poolProps.allocType = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
            alloc.poolProps.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
            alloc.poolProps.location.id = int(device)
            alloc.bytesize = sizes[i]
            deps = previous + frees.pop(i - 1, [])  # the frees just made: their memory may serve this one
            node = check(driver.cuGraphAddMemAllocNode(graph, deps, len(deps), alloc))
            address.append(int(alloc.dptr))
            inputs = arena[0][:2] if i == 0 else [address[i - 1], address[skips[i]]]
            previous = [kernel(graph, previous + [node], inputs + [address[i]])]
            for j in range(i + 1):
                if last_use[j] == i:
                    frees.setdefault(i, []).append(check(driver.cuGraphAddMemFreeNode(graph, previous, 1,
                                                                                       address[j])))

    high = driver.CUgraphMem_attribute
    rows = {}
    for name, build in (("arena", build_arena), ("memory_nodes", build_memory_nodes)):
        check(driver.cuCtxSynchronize())
        check(driver.cuDeviceGraphMemTrim(device))
        for attribute in (high.CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, high.CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH):
            check(driver.cuDeviceSetGraphMemAttribute(device, attribute, driver.cuuint64_t(0)))
        graph = check(driver.cuGraphCreate(0))
        t0 = time.perf_counter()
        build(graph)
        t1 = time.perf_counter()
        graph_exec = check(driver.cuGraphInstantiate(graph, 0))
        t2 = time.perf_counter()
        check(driver.cuGraphLaunch(graph_exec, stream))
        check(driver.cuStreamSynchronize(stream))
        t3 = time.perf_counter()
        for _ in range(50):
            check(driver.cuGraphLaunch(graph_exec, stream))
        check(driver.cuStreamSynchronize(stream))
        t4 = time.perf_counter()
        used, reserved = (int(check(driver.cuDeviceGetGraphMemAttribute(device, a)))
                          for a in (high.CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, high.CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH))
        rows[name] = dict(build_us=(t1 - t0) * 1e6, instantiate_us=(t2 - t1) * 1e6, first_us=(t3 - t2) * 1e6,
                          launch_us=(t4 - t3) / 50 * 1e6,
                          bytes=cb.transient_bytes if name == "arena" else used, reserved=reserved)
        check(driver.cuGraphExecDestroy(graph_exec))
        check(driver.cuGraphDestroy(graph))
        kept.clear()
    check(driver.cuDeviceGraphMemTrim(device))
    cb.reset()
    return rows


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
    p = result["plan"]
    lines += ["", f"cb.alloca on a {p['commands']}-command program (a chain with skip connections, 1 to 16 KiB "
              f"transients): peak {p['peak']} bytes, {p['peak'] / p['total']:.3f}x the sum of the transients "
              f"({p['total']}) and {p['peak'] / p['live_bound']:.3f}x the most bytes live at once ({p['live_bound']}, "
              f"a lower bound); end() {p['end_alloca_us']:.0f} µs against {p['end_plain_us']:.0f} µs with plain "
              f"buffers."]
    g = result.get("graph_memory")
    if g:
        lines += ["", "The program's CUDA graph with hal's arena against the driver's graph memory nodes (an alloc "
                  "node per transient, a free node after its last use), built through cuda-bindings' driver calls:", "",
                  "| graph | add nodes µs | instantiate µs | first launch µs | launch µs | bytes | reserved |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for name in ("arena", "memory_nodes"):
            r = g[name]
            lines.append(f"| {name.replace('_', ' ')} | {r['build_us']:.0f} | {r['instantiate_us']:.0f} | "
                         f"{r['first_us']:.0f} | {r['launch_us']:.1f} | {r['bytes']} | {r['reserved']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return device_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
