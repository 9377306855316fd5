"""`python -m hal info` lists drivers, devices and capabilities; `python -m hal demo` records a small
program, prints the dependency graph hal rediscovers from its barriers, runs it, checks the result
against numpy, and compares one-shot recording with resubmitting a reusable command buffer;
`python -m hal demo NAME` runs a demo an installed package offers (entry-point group `hal.demos`: hal's own
distribution offers `decode`, the decode loop of examples/decode, which checks its tokens); `python -m hal trace
[NAME]` writes a Chrome/Perfetto trace of one submission and a picture of its dependency graph."""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import os
import pkgutil
import sys
import time
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import numpy as np

import hal
from hal import disk_cache
from hal.drivers import driver_status

EXTENSIONS = tuple(importlib.machinery.EXTENSION_SUFFIXES)
DEMO_GROUP = "hal.demos"
IN_TREE_DEMOS = {"decode": "examples.decode.demo"}  # found by module path when the entry points are not installed
N = 16384  # elements: one update_buffer (64 KiB) fills a whole vector
BUFFERS = ("x", "y", "t", "u", "v", "w", "out", "result", "y_copy")  # what record() uses, N floats each


def _axpy(ctx):
    n, a = ctx.constants
    t = ctx.binding(2, np.float32)
    t[:n] = np.float32(a) * ctx.binding(0, np.float32)[:n] + ctx.binding(1, np.float32)[:n]


def _scale(ctx):
    n, a = ctx.constants
    x = ctx.binding(0, np.float32)
    x[:n] *= np.float32(a)


def _add_scalar(ctx):
    n, a = ctx.constants
    ctx.binding(1, np.float32)[:n] = ctx.binding(0, np.float32)[:n] + np.float32(a)


def _square(ctx):
    n = ctx.constants[0]
    x = ctx.binding(0, np.float32)[:n]
    ctx.binding(1, np.float32)[:n] = x * x


def _sum3(ctx):
    n = ctx.constants[0]
    ctx.binding(3, np.float32)[:n] = (ctx.binding(0, np.float32)[:n] + ctx.binding(1, np.float32)[:n]
                                      + ctx.binding(2, np.float32)[:n])


WORKGROUP = 64
EXPORTS = (
    hal.Export("axpy", bindings=3, constants=2, workgroup_size=WORKGROUP, readonly=(0, 1)),
    hal.Export("scale", bindings=1, constants=2, workgroup_size=WORKGROUP),
    hal.Export("add_scalar", bindings=2, constants=2, workgroup_size=WORKGROUP, readonly=(0,)),
    hal.Export("square", bindings=2, constants=1, workgroup_size=WORKGROUP, readonly=(0,)),
    hal.Export("sum3", bindings=4, constants=1, workgroup_size=WORKGROUP, readonly=(0, 1, 2)),
)
# The same kernels for the GPUs: one element per invocation, `n` = constants[0] elements.
_CUDA_BODIES = {
    "axpy": ("const float* x, const float* y, float* t, unsigned n, float a", "t[i] = a * x[i] + y[i];"),
    "scale": ("float* x, unsigned n, float a", "x[i] *= a;"),
    "add_scalar": ("const float* x, float* y, unsigned n, float a", "y[i] = x[i] + a;"),
    "square": ("const float* x, float* y, unsigned n", "y[i] = x[i] * x[i];"),
    "sum3": ("const float* a, const float* b, const float* c, float* out, unsigned n", "out[i] = a[i] + b[i] + c[i];"),
}
CUDA_CODE = "".join(
    f'extern "C" __global__ void {name}({params}) {{\n'
    f"    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) {{ {body} }}\n}}\n"
    for name, (params, body) in _CUDA_BODIES.items())
# (buffers as (qualifier, name), push constants, body) per export; binding i is buffer i of set 0.
_GLSL_PARTS = {
    "axpy": ((("readonly", "x"), ("readonly", "y"), ("writeonly", "t")), "uint n; float a;",
             "t[i] = p.a * x[i] + y[i];"),
    "scale": ((("", "x"),), "uint n; float a;", "x[i] *= p.a;"),
    "add_scalar": ((("readonly", "x"), ("writeonly", "y")), "uint n; float a;", "y[i] = x[i] + p.a;"),
    "square": ((("readonly", "x"), ("writeonly", "y")), "uint n;", "y[i] = x[i] * x[i];"),
    "sum3": ((("readonly", "a"), ("readonly", "b"), ("readonly", "c"), ("writeonly", "o")), "uint n;",
             "o[i] = a[i] + b[i] + c[i];"),
}
GLSL = {
    name: f"#version 450\nlayout(local_size_x = {WORKGROUP}) in;\n"
    + "".join(f"layout(set = 0, binding = {i}) {q} buffer B{i} {{ float {v}[]; }};\n"
              for i, (q, v) in enumerate(buffers))
    + f"layout(push_constant) uniform P {{ {constants} }} p;\n"
    + f"void main() {{ uint i = gl_GlobalInvocationID.x; if (i < p.n) {{ {body} }} }}\n"
    for name, (buffers, constants, body) in _GLSL_PARTS.items()
}
SOURCE = hal.ExecutableSource.multi(
    host=hal.ExecutableSource.python(
        {"axpy": _axpy, "scale": _scale, "add_scalar": _add_scalar, "square": _square, "sum3": _sum3}, EXPORTS),
    cuda=hal.ExecutableSource.cuda(CUDA_CODE, EXPORTS),
    vulkan=hal.ExecutableSource.glsl(GLSL, EXPORTS),
)


def record(cb: hal.CommandBuffer, exe: hal.Executable, b: dict[str, hal.Buffer], y: np.ndarray) -> None:
    """fill + update -> a chain (axpy, scale) -> fan-out (3 kernels) -> fan-in (sum3) -> two copies.

    The copy of y needs only the update of y: barriers make it wait for sum3, hazards do not."""
    groups = (N // WORKGROUP, 1, 1)
    cb.fill_buffer(b["x"], np.float32(1.5))
    cb.update_buffer(b["y"], y)
    cb.execution_barrier()
    cb.dispatch(exe, "axpy", groups, (N, 2.0), (b["x"], b["y"], b["t"]))
    cb.execution_barrier()
    cb.dispatch(exe, "scale", groups, (N, 0.5), (b["t"],))
    cb.execution_barrier()
    cb.dispatch(exe, "add_scalar", groups, (N, 1.0), (b["t"], b["u"]))
    cb.dispatch(exe, "square", groups, (N,), (b["t"], b["v"]))
    cb.dispatch(exe, "add_scalar", groups, (N, -1.0), (b["t"], b["w"]))
    cb.execution_barrier()
    cb.dispatch(exe, "sum3", groups, (N,), (b["u"], b["v"], b["w"], b["out"]))
    cb.execution_barrier()
    cb.copy_buffer(b["out"], b["result"])
    cb.copy_buffer(b["y"], b["y_copy"])


def expected(y: np.ndarray) -> np.ndarray:
    x = np.full(N, 1.5, np.float32)
    t = (np.float32(2.0) * x + y) * np.float32(0.5)
    return (t + np.float32(1.0)) + t * t + (t + np.float32(-1.0))


def describe(cb: hal.CommandBuffer) -> str:
    graph = cb.dependency_graph()
    lines = [f"dependency graph ({cb.dependencies}): {graph.number_of_nodes()} commands, "
             f"{graph.number_of_edges()} edges"]
    for c in cb.commands:
        what = f"{c.kind} {c.export.name}" if c.kind == hal.CommandKind.DISPATCH else str(c.kind)
        waits = " ".join(f"#{p}" for p in sorted(graph.predecessors(c.index)))
        lines.append(f"  #{c.index:<2} segment {c.segment}  {what:<22} waits for: {waits or '-'}")
    return "\n".join(lines)


def demo(device: str | None, iterations: int) -> int:
    with hal.create_device(device) as dev:
        print(f"device: {dev.driver}: {dev.name}")
        exe = dev.load_executable(SOURCE)
        b = {name: dev.allocate(4 * N) for name in BUFFERS}
        y = np.linspace(-1.0, 1.0, N, dtype=np.float32)

        for mode in ("barriers", "hazards"):
            cb = dev.create_command_buffer(dependencies=mode)
            with cb:
                record(cb, exe, b, y)
            print(describe(cb))
        dev.queue_execute(cb)
        got = b["result"].read(np.float32)
        want = expected(y)
        ok = np.allclose(got, want, rtol=1e-6, atol=1e-6) and np.array_equal(b["y_copy"].read(np.float32), y)
        print(f"result: {'matches' if ok else 'DIFFERS FROM'} numpy "
              f"(max abs error {float(np.max(np.abs(got - want))):.3g} over {N} elements)")

        start = time.perf_counter()
        for _ in range(iterations):
            cb = dev.create_command_buffer(mode="one_shot")
            with cb:
                record(cb, exe, b, y)
            dev.queue_execute(cb)
        dev.synchronize()
        one_shot = (time.perf_counter() - start) / iterations

        reusable = dev.create_command_buffer(mode="reusable")
        with reusable:
            record(reusable, exe, b, y)
        start = time.perf_counter()
        for _ in range(iterations):
            dev.queue_execute(reusable)
        dev.synchronize()
        reused = (time.perf_counter() - start) / iterations
        print(f"{iterations} runs: one-shot (record + submit each time) {one_shot * 1e6:.1f} us/run, "
              f"reused (submit only) {reused * 1e6:.1f} us/run: reuse is {one_shot / reused:.2f}x faster")
        for buf in b.values():
            buf.release()
        return 0 if ok else 1


def demos() -> dict[str, EntryPoint]:
    """The demos packages offer: entry-point group `hal.demos`, each naming a module with `run(device, tokens,
    [kernel_set]) -> exit status` and `trace(device) -> (name, title, Trace, CommandBuffer, text)`; and, as for
    drivers, the in-tree ones by module path, for a source tree whose entry points are not installed. hal imports
    none of them until asked."""
    found = {name: EntryPoint(name, value, DEMO_GROUP) for name, value in IN_TREE_DEMOS.items()}
    found.update((entry.name, entry) for entry in entry_points(group=DEMO_GROUP))
    return found


def trace_command(example: EntryPoint | None, device: str | None, out: str) -> int:
    """`python -m hal trace [NAME]`: trace one submission of the demo program (or of demo `example`'s choice) and
    draw its dependency graph, into `out`."""
    from hal.tracing import draw_program, label, trace_recording
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    with hal.create_device(device) as dev:
        report = ""
        if example is not None:
            name, title, result, cb, report = example.load().trace(dev)
        else:
            exe = dev.load_executable(SOURCE)
            b = {name: dev.allocate(4 * N) for name in BUFFERS}
            y = np.linspace(-1.0, 1.0, N, dtype=np.float32)
            name, title = "demo", "the demo program (python -m hal demo)"
            result, cb = trace_recording(dev, lambda cb: record(cb, exe, b, y))
        trace_path = folder / f"trace-{name}-{dev.driver}.json"
        result.save(trace_path)
        print(f"device: {dev.driver}: {dev.name}")
        print(f"trace: {trace_path} (open in https://ui.perfetto.dev or chrome://tracing)")
        phases = {e["name"]: e["dur"] for e in result.events if e.get("cat") == "host"}
        print("host: " + ", ".join(f"{k} {v:.0f} us" for k, v in phases.items()))
        ranked = sorted(zip(result.command_us, cb.commands), key=lambda p: -p[0])
        print(f"device: {sum(result.command_us):.0f} us over {len(cb.commands)} commands, each run alone; the "
              f"longest: " + ", ".join(f"{label(c)} {us:.1f} us" for us, c in ranked[:5]))
        if report:
            print(report)
        try:
            graph_path = folder / f"graph-{name}.png"
            draw_program(cb.program, graph_path, title)
            print(f"graph: {graph_path}")
        except hal.UnsupportedError as e:
            print(f"graph: not drawn ({e})")
    return 0


def compiled_modules() -> dict[str, bool]:
    """name -> compiled?: the modules of hal and its GPU backends that import as compiled extensions, and
    each GPU backend's command_buffer, which must be one (left out where its headers were missing when hal
    was installed)."""
    found = {}
    for package in ("hal", "backends.vulkan", "backends.cuda_graph"):
        path = importlib.util.find_spec(package).submodule_search_locations
        for module in pkgutil.iter_modules(path, package + "."):
            if (importlib.util.find_spec(module.name).origin or "").endswith(EXTENSIONS):
                found[module.name] = True
    for package in ("backends.vulkan", "backends.cuda_graph"):
        found.setdefault(package + ".command_buffer", False)
    return found


def info() -> int:
    modules = compiled_modules()
    print(f"compiled core: {', '.join(name for name, built in modules.items() if built)}")
    for name in (name for name, built in modules.items() if not built):
        print(f"  not built: {name} (its headers were missing when hal was installed)")
    top, entries, size = disk_cache.statistics()
    print(f"disk cache: {top}, {entries} entries, {size} bytes (python -m hal cache clear empties it)" if top else
          "disk cache: off (HAL_CACHE_DIR is empty)")
    for name, devices in driver_status().items():
        if isinstance(devices, str):
            print(f"{name}: {devices}")
            continue
        print(f"{name}: {len(devices)} device(s)")
        for d in devices:
            print(f"  {name}:{d.index}  {d.name} ({d.kind})")
            try:
                with hal.create_device(f"{name}:{d.index}") as dev:
                    for field, value in dev.capabilities.as_dict().items():
                        print(f"      {field} = {value}")
            except hal.HalError as e:
                print(f"      cannot open: {e}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hal", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="drivers, devices and capabilities")
    found = demos()
    names = sorted(found)
    p = sub.add_parser("demo", help="record, analyse, run and check a small program (or an installed demo)")
    p.add_argument("example", nargs="?", choices=names,
                   help="an installed demo (decode: the GPT-style decode loop of examples/decode, checked against "
                        "numpy)")
    p.add_argument("--device", default=None, help="host, vulkan, vulkan:1, cuda:0 ... (default: the best)")
    p.add_argument("--iterations", type=int, default=200, help="runs for the one-shot vs reused comparison")
    p.add_argument("--tokens", type=int, default=32, help="decode: tokens to generate after its prompt")
    p.add_argument("--kernels", default=None, help="decode: the kernel set, native (each backend's own, the "
                                                   "default) or triton (CUDA; the host under TRITON_INTERPRET=1)")
    p.add_argument("--ranks", type=int, default=None, help="decode: split the model over this many devices of the "
                                                          "driver (host, or cuda: cuda:0, cuda:1 ...)")
    c = sub.add_parser("cache", help="the disk cache of compiled binaries (GLSL's SPIR-V, CUDA's cubins)")
    c.add_argument("action", choices=["clear"], help="clear: remove every entry")
    t = sub.add_parser("trace", help="a Chrome/Perfetto trace of a submission and a picture of its dependencies")
    t.add_argument("example", nargs="?", choices=names, help="an installed demo (decode: one decode step)")
    t.add_argument("--device", default=None, help="host, vulkan, cuda ... (default: the best)")
    t.add_argument("--out", default=".", help="the folder for the trace JSON and the PNG (default: here)")
    args = parser.parse_args(argv)
    try:
        if args.command == "info":
            return info()
        if args.command == "cache":
            print(f"removed {disk_cache.clear()} entries from {disk_cache.root()}")
            return 0
        if args.command == "trace":
            return trace_command(found.get(args.example), args.device, args.out)
        if args.example is not None:
            options = {"kernel_set": args.kernels} if args.kernels else {}  # (a demo without these options takes none)
            if args.ranks is not None:
                options["ranks"] = args.ranks
            return found[args.example].load().run(args.device, max(1, args.tokens), **options)
        return demo(args.device, max(1, args.iterations))
    except hal.HalError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`python -m hal info | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
