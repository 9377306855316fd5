"""Recording cost: µs of host time per recorded command, and per command for end().

Side by side in one process, on the host device (recording and planning are backend-independent):
deferred vs single_pass, validation on vs off (off drops the race check; the safety checks always
run), barriers vs hazards dependencies, for two programs (a chain of dispatches separated by barriers,
and a fan of dispatches in one segment writing disjoint slices of one buffer) of 10 to 10000 commands.
The reference is a recorder written in plain Python that checks nothing (`FloorRecorder`: look the
export up, build a record object, append it). Targets (issue 17): a recorded dispatch with every check
<= 1.0x the reference; end() per command <= 0.5x the reference's record (barriers mode); hazards-mode
end() <= 2x barriers-mode end(). The hazard analysis is also compared with the naive alternative that
tests every pair of commands, to show what indexing ranges by buffer buys. Where a Vulkan device is present
(lavapipe in CI), the deferred, validated barriers-mode recording runs on it too, against the same reference
in the same run: record <= 1.0x, end() (planning and encoding into a VkCommandBuffer) <= 1.5x.

    python -m bench.record [--sizes 10,100,1000,10000] [--json PATH]
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable

import hal
from bench import sizes_main
from tests.kernels import GLSL

WORKGROUP = 64
SLICE = 1024  # bytes each fan dispatch writes
RECORD_TARGET = 1.0  # hal's record / the reference's
END_TARGET = 0.5  # hal's end() per command / the reference's record
HAZARDS_TARGET = 2.0  # hazards-mode end() / barriers-mode end()
VULKAN_END_TARGET = 1.5  # on a Vulkan device: end() per command / the reference's record


def _noop(ctx):
    pass


EXPORT = hal.Export("add", bindings=3, constants=1, workgroup_size=WORKGROUP, readonly=(0, 1))
SOURCE = hal.ExecutableSource.multi(host=hal.ExecutableSource.python({"add": _noop}, [EXPORT]),
                                    vulkan=hal.ExecutableSource.glsl({"add": GLSL["add"]}, [EXPORT]))


class Fixture:
    """Buffers and references made once, so only recording is timed."""

    def __init__(self, dev: hal.Device, n: int) -> None:
        self.exe = dev.load_executable(SOURCE)
        self.bufs = [dev.allocate(1 << 16) for _ in range(4)]
        self.out = dev.allocate(SLICE * n)
        self.slices = [hal.ref(self.out, i * SLICE, SLICE) for i in range(n)]


def chain(cb: hal.CommandBuffer, f: Fixture, n: int) -> None:
    b, exe = f.bufs, f.exe
    for i in range(n):
        cb.dispatch(exe, "add", (4, 1, 1), (256,), (b[i % 4], b[(i + 1) % 4], b[(i + 2) % 4]))
        cb.execution_barrier()


def fan(cb: hal.CommandBuffer, f: Fixture, n: int) -> None:
    src, exe, slices = f.bufs[0], f.exe, f.slices
    for i in range(n):
        cb.dispatch(exe, "add", (4, 1, 1), (256,), (src, src, slices[i]))


PROGRAMS = {"chain": chain, "fan": fan}


class Record:
    """The reference's record of a dispatch: the fields hal's record holds, in a plain Python object."""

    __slots__ = ("index", "segment", "executable", "export", "ordinal", "workgroups", "constants", "bindings")

    def __init__(self, index, segment, executable, export, ordinal, workgroups, constants, bindings) -> None:
        self.index, self.segment = index, segment
        self.executable, self.export, self.ordinal = executable, export, ordinal
        self.workgroups, self.constants, self.bindings = workgroups, constants, bindings


class FloorRecorder:
    """The reference: a recorder in plain Python that checks nothing. Each call looks the export up, builds
    the same record and appends it. hal's cost over it is what checking (and compiling) buys or costs."""

    __slots__ = ("commands", "_segment")

    def __init__(self) -> None:
        self.commands: list[Record] = []
        self._segment = 0

    def dispatch(self, executable: hal.Executable, name: str, workgroups=(1, 1, 1), constants=(), bindings=()):
        entry = executable.entries[name]
        commands = self.commands
        commands.append(Record(len(commands), self._segment, executable, entry.export, entry.ordinal, workgroups,
                               constants, bindings))

    def execution_barrier(self) -> None:
        self._segment += 1


class CallRecorder:
    """A recorder whose calls do nothing: what the program's own loop and one Python call per command cost, the least
    any recording API taking a call per command pays before it looks at the arguments."""

    __slots__ = ()

    def dispatch(self, executable: hal.Executable, name: str, workgroups=(1, 1, 1), constants=(), bindings=()):
        pass

    def execution_barrier(self) -> None:
        pass


def reference_us(program, recorder: Callable[[], FloorRecorder | CallRecorder], f: object, n: int,
                 repeats: int) -> float:
    """Best-of-`repeats` µs per command for a reference recorder taking program(recorder, f, n) (`f`: the
    program's fixture)."""
    best = float("inf")
    for _ in range(repeats):
        r = recorder()
        t0 = time.perf_counter()
        program(r, f, n)
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def once(dev: hal.Device, program, f: Fixture, n: int, strategy: str, validate: bool, deps: str) -> tuple[float, float]:
    """µs per command for recording and for end(), once."""
    cb = dev.create_command_buffer(strategy=strategy, validate=validate, dependencies=deps)
    cb.begin()
    t0 = time.perf_counter()
    program(cb, f, n)
    t1 = time.perf_counter()
    cb.end()
    t2 = time.perf_counter()
    return (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6


def measure(dev: hal.Device, program, f: Fixture, n: int, strategy: str, validate: bool, deps: str,
            repeats: int) -> tuple[float, float]:
    """Best-of-`repeats` µs per command for recording and for end()."""
    times = [once(dev, program, f, n, strategy, validate, deps) for _ in range(repeats)]
    return min(t[0] for t in times), min(t[1] for t in times)


def against_reference(dev: hal.Device, program, f: Fixture, n: int, repeats: int, hazards: bool = True) -> dict:
    """The targets' numbers, best-of-`repeats` µs per command, taken in turns (the reference recorder, then hal's
    deferred validated recording in barriers mode, then in hazards mode, again and again), so that a drift of
    the host's speed over the run lands on all of them alike: floor_us, record_us, end_us (and hazards_end_us)."""
    best = dict(floor_us=float("inf"), record_us=float("inf"), end_us=float("inf"))
    if hazards:
        best["hazards_end_us"] = float("inf")
    for _ in range(repeats):
        best["floor_us"] = min(best["floor_us"], reference_us(program, FloorRecorder, f, n, 1))
        record, end = once(dev, program, f, n, "deferred", True, "barriers")
        best["record_us"], best["end_us"] = min(best["record_us"], record), min(best["end_us"], end)
        if hazards:
            best["hazards_end_us"] = min(best["hazards_end_us"],
                                         once(dev, program, f, n, "deferred", True, "hazards")[1])
    return best


def pairwise_hazards(cb: hal.CommandBuffer) -> int:
    """The naive analysis: test every earlier command of an earlier segment. Returns the edge count."""
    ranges = [[(r.buffer, r.offset, r.end, w) for r, w in c.accesses()] for c in cb.commands]
    segments = [c.segment for c in cb.commands]
    edges = 0
    for v, av in enumerate(ranges):
        for u in range(v):
            if segments[u] < segments[v] and any(
                    bu is bv and su < ev and sv < eu and (wu or wv)
                    for bu, su, eu, wu in ranges[u] for bv, sv, ev, wv in av):
                edges += 1
    return edges


def run(sizes: list[int], progress: Callable[[str], None] = lambda _: None) -> dict:
    """Every program x size x strategy x validation x dependency mode on the host device, and the notes
    the report derives from them (targets, validation cost, linearity, collector share, naive hazards)."""
    rows = []
    with hal.create_device("host") as dev:
        for name, program in PROGRAMS.items():
            for n in sizes:
                progress(f"record {name} n={n}")
                f = Fixture(dev, n)
                repeats = 15 if n <= 1000 else 3
                for strategy in ("deferred", "single_pass"):
                    for validate in (True, False):
                        for deps in ("barriers", "hazards"):
                            rec, end = measure(dev, program, f, n, strategy, validate, deps, repeats)
                            rows.append(dict(program=name, commands=n, strategy=strategy, validate=validate,
                                             dependencies=deps, record_us=rec, end_us=end))
        references = []
        for name, program in PROGRAMS.items():
            for n in sizes:
                progress(f"record references {name} n={n}")
                f, repeats = Fixture(dev, n), 15 if n <= 1000 else 3
                references.append(dict(program=name, commands=n, **against_reference(dev, program, f, n, repeats)))
        notes = _notes(dev, rows, references, sizes)
    result = dict(machine=platform.processor() or platform.machine(), python=platform.python_version(),
                  date=time.strftime("%Y-%m-%d"), rows=rows, references=references, notes=notes)
    if "vulkan" in hal.available_drivers():
        result["vulkan"] = run_vulkan(sizes, progress)
    return result


def run_vulkan(sizes: list[int], progress: Callable[[str], None]) -> dict:
    """The deferred, validated barriers-mode recording on the Vulkan device (end() encodes a VkCommandBuffer),
    beside the reference recorder in the same run."""
    rows = []
    with hal.create_device("vulkan") as dev:
        for name, program in PROGRAMS.items():
            for n in sizes:
                progress(f"record on Vulkan, {name} n={n}")
                f, repeats = Fixture(dev, n), 15 if n <= 1000 else 3
                rows.append(dict(program=name, commands=n,
                                 **against_reference(dev, program, f, n, repeats, hazards=False)))
        device, cpu = dev.name, dev.physical.kind == "cpu"

    def verdict(ratio: float, target: float) -> str:
        """The targets are lavapipe's: on a GPU, end() also pays the driver's encoding, which bench.vulkan compares
        with a compiled reference issuing the same calls (its own target)."""
        return _verdict(ratio, target) if cpu else f"{ratio:.2f}x"

    notes = [f"{r['program']} of {r['commands']} on {device}: record {r['record_us']:.2f} µs/cmd vs the reference "
             f"{r['floor_us']:.2f}: {verdict(r['record_us'] / r['floor_us'], RECORD_TARGET)}; end() "
             f"{r['end_us']:.2f} µs/cmd: {verdict(r['end_us'] / r['floor_us'], VULKAN_END_TARGET)} of it"
             for r in rows]
    if not cpu:
        notes.append("the targets above are lavapipe's; on a GPU, see bench.vulkan's record+end against the compiled "
                     "reference")
    return dict(device=device, rows=rows, notes=notes)


def _verdict(ratio: float, target: float) -> str:
    return f"{ratio:.2f}x (<= {target}: {'met' if ratio <= target else 'MISSED'})"


def _notes(dev: hal.Device, rows: list[dict], references: list[dict], sizes: list[int]) -> list[str]:
    def row(name, n, s, v, d):
        return next(r for r in rows if (r["program"], r["commands"], r["strategy"], r["validate"],
                                        r["dependencies"]) == (name, n, s, v, d))

    verdict = _verdict
    notes = []
    for ref in references:  # measured in turns (against_reference)
        name, n, floor = ref["program"], ref["commands"], ref["floor_us"]
        record = verdict(ref['record_us'] / floor, RECORD_TARGET)
        notes.append(f"{name} of {n}: record with every check {ref['record_us']:.2f} µs/cmd vs the plain-Python "
                     f"recorder that checks nothing {floor:.2f}: {record}; "
                     f"end() {ref['end_us']:.2f} µs/cmd: {verdict(ref['end_us'] / floor, END_TARGET)} of it; "
                     f"hazards end() {ref['hazards_end_us']:.2f}: "
                     f"{verdict(ref['hazards_end_us'] / ref['end_us'], HAZARDS_TARGET)} barriers end()")
    big, small = sizes[-1], sizes[-2] if len(sizes) > 1 else sizes[-1]
    for name in PROGRAMS:
        v_on, v_off = row(name, big, "deferred", True, "barriers"), row(name, big, "deferred", False, "barriers")
        notes.append(f"{name}: validation costs {v_on['record_us'] / v_off['record_us']:.2f}x the unvalidated "
                     f"recording ({v_on['record_us']:.2f} vs {v_off['record_us']:.2f} µs/cmd at {big} commands)")
        for deps in ("barriers", "hazards"):
            a, b = row(name, small, "deferred", True, deps), row(name, big, "deferred", True, deps)
            notes.append(f"{name}, {deps}: end() per command at {big} / at {small} commands = "
                         f"{b['end_us'] / a['end_us']:.2f} (1.0 = linear)")
        sp, de = row(name, big, "single_pass", True, "barriers"), row(name, big, "deferred", True, "barriers")
        notes.append(f"{name}: single_pass record+end / deferred record+end = "
                     f"{(sp['record_us'] + sp['end_us']) / (de['record_us'] + de['end_us']):.2f}")
    n = min(2000, sizes[-1])
    f = Fixture(dev, n)
    cb = dev.create_command_buffer(dependencies="hazards", validate=False)
    cb.begin()
    chain(cb, f, n)
    t0 = time.perf_counter()
    cb.end()
    indexed = time.perf_counter() - t0
    t0 = time.perf_counter()
    pairwise_hazards(cb)
    pairwise = time.perf_counter() - t0
    notes.append(f"hazard analysis of a {n}-command chain: indexed by buffer {indexed * 1e3:.1f} ms, "
                 f"every pair {pairwise * 1e3:.1f} ms: {pairwise / indexed:.0f}x")
    return notes


def report(result: dict) -> str:
    lines = [f"# record.py on {result['machine']}, Python {result['python']}, {result['date']}",
             "µs of host time per command (best of several runs); a chain command is a dispatch plus the "
             "execution_barrier() after it", "",
             "| program | commands | strategy | validate | dependencies | record µs/cmd | end() µs/cmd |",
             "|---|---:|---|---|---|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['program']} | {r['commands']} | {r['strategy']} | {'on' if r['validate'] else 'off'} | "
                     f"{r['dependencies']} | {r['record_us']:.2f} | {r['end_us']:.2f} |")
    lines += ["", "## Ratios"] + [f"- {note}" for note in result["notes"]]
    if "vulkan" in result:
        lines += ["", f"## On the Vulkan device ({result['vulkan']['device']}): deferred, validated, barriers", "",
                  "| program | commands | record µs/cmd | end() µs/cmd | reference µs/cmd |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {r['program']} | {r['commands']} | {r['record_us']:.2f} | {r['end_us']:.2f} | "
                  f"{r['floor_us']:.2f} |" for r in result["vulkan"]["rows"]]
        lines += [""] + [f"- {note}" for note in result["vulkan"]["notes"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return sizes_main(argv, __doc__, "10,100,1000,10000", run, report)


if __name__ == "__main__":
    raise SystemExit(main())
