"""Traces people can look at: a Chrome/Perfetto trace of a submission, and a picture of a Program's dependencies.

`trace(cb, binding_table, constants)` runs an ended command buffer once as it is (the host phases: submit, and
the wait to its end), then once more command by command to time each one on the device: every command is recorded
alone into a one_shot command buffer, the queue is held at a host call until all of them and the clock's marks
between them are queued (so the device runs them back to back, never waiting for the host), and each command's
time is the time between the marks around it, read where the queue runs: CUDA events on the stream (the commands
then run as stream launches, not as the graph; a dispatch_indirect or a region as a graph of its own), Vulkan
timestamps (each command a submission of its own), host calls on the host backend's queue thread. Those times
are the commands' own, plus what running each alone adds. The command buffer runs twice, so work that changes
state (a loop's counter, a cache position) is timed on the state the first run left: a while loop whose flag the
first run cleared runs no iteration the second time. `trace_recording(device, record)` also times the recording
and end(). `Trace.save(path)` writes the Chrome trace-event JSON (chrome://tracing, ui.perfetto.dev): the host
phases, then the commands, one after the other on one time line.

`draw_program(program, path)` draws the dependency DAG with matplotlib: commands in columns by segment, wrapped
into rows, regions as one box naming their body, an arrow where a command waits for another.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hal.commands import CommandKind
from hal.errors import HalError, UnsupportedError, ValidationError
from hal.nesting import replay

REGIONS = (CommandKind.WHILE_NONZERO, CommandKind.IF_NONZERO)

if TYPE_CHECKING:
    from hal.command_buffer import CommandBuffer
    from hal.device import Device
    from hal.program import Program

GATE_SECONDS = 120  # the longest the queue waits at the gate for the commands to be queued


class Trace:
    """Chrome trace events: the host phases (process "host") and one event per command (process "device")."""

    def __init__(self, events: list[dict], command_us: list[float]) -> None:
        self.events = events
        self.command_us = command_us  # per command, its device time in µs

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"traceEvents": self.events, "displayTimeUnit": "ns"}, indent=1))


def label(command: Any) -> str:
    """`#i kind` or `#i export` for a dispatch."""
    export = getattr(command, "export", None)
    if export is None:
        what = command.kind
    else:
        what = export.name if command.parameters is None else f"{export.name} (indirect)"
    return f"#{command.index} {what}"


def trace(command_buffer: CommandBuffer, binding_table: Sequence[Any] = (), constants: Sequence[Any] = (),
          host_phases: Sequence[tuple[str, float, float]] = ()) -> Trace:
    """Trace one submission of an ended command buffer, then each of its commands alone (see the module docstring).

    Args:
        command_buffer: An ended reusable command buffer (it runs twice: work that changes state is timed on the
            state the first run left).
        binding_table: Its binding table, as for `queue_execute`.
        constants: Its constant slots' values, as for `queue_execute`.
        host_phases: Earlier host phases to include, as (name, start, end) in time.perf_counter() seconds.

    Returns:
        The `Trace`: host phases, and each command's time on the device.

    Raises:
        ValidationError: The command buffer is not ended, or not reusable; or the table or constants are wrong.
    """
    if command_buffer.state != "ended":
        raise ValidationError(f"trace: the command buffer is {command_buffer.state}; end() it first")
    if command_buffer.mode != "reusable":
        raise ValidationError("trace: the command buffer must be reusable (trace runs it, then its commands)")
    dev = command_buffer.device
    program = command_buffer.program
    table, values = tuple(binding_table), tuple(constants)
    dev.synchronize()
    start = time.perf_counter()
    dev.queue_execute(command_buffer, binding_table=table, constants=values)
    queued = time.perf_counter()
    dev.synchronize()
    phases = [*host_phases, ("submit", start, queued), ("wait for the end", queued, time.perf_counter())]

    alone = []
    for c in program.commands:
        piece = dev.create_command_buffer(mode="one_shot", binding_capacity=command_buffer.binding_capacity,
                                          constant_capacity=command_buffer.constant_capacity)
        with piece:
            replay(piece, [c], _as_is)
        alone.append(piece)
    clock = dev.queue_clock()
    try:
        if clock.capacity is not None and len(alone) + 1 > clock.capacity:
            raise UnsupportedError(f"trace: {dev.driver} times at most {clock.capacity - 1} commands; this command "
                                   f"buffer has {len(alone)}")
        gate = threading.Event()

        def hold() -> None:
            if not gate.wait(GATE_SECONDS):
                raise HalError(f"trace: the commands took over {GATE_SECONDS} s to queue")

        try:
            dev.queue_host_call(hold)
            clock.mark()
            for piece in alone:
                dev.queue_execute(piece, binding_table=table, constants=values)
                clock.mark()
        finally:
            gate.set()
        dev.synchronize()
        times = clock.seconds()
    finally:
        clock.close()
    command_us = [(b - a) * 1e6 for a, b in zip(times, times[1:])]
    return Trace(_events(program, phases, times, clock.what, dev), command_us)


def trace_recording(device: Device, record: Callable[[CommandBuffer], None], binding_table: Sequence[Any] = (),
                    constants: Sequence[Any] = (), **options: Any) -> tuple[Trace, CommandBuffer]:
    """Record into a new reusable command buffer, timing the recording and end(), then `trace` it.

    Args:
        device: The device.
        record: A function that records into the command buffer it is given (begun; ended after it returns).
        binding_table: As for `trace`.
        constants: As for `trace`.
        **options: `create_command_buffer`'s arguments (binding_capacity, strategy, ...).

    Returns:
        The trace and the command buffer.

    Raises:
        ValidationError: As `create_command_buffer`, the recording and `trace` do.
    """
    cb = device.create_command_buffer(mode="reusable", **options)
    begin = time.perf_counter()
    cb.begin()
    record(cb)
    recorded = time.perf_counter()
    cb.end()
    ended = time.perf_counter()
    return trace(cb, binding_table, constants, [("record", begin, recorded), ("end", recorded, ended)]), cb


def _as_is(reference: Any) -> Any:
    """The table of a replay that keeps every reference (the one_shot copy takes the same binding table)."""
    return reference


def _events(program: Program, phases: list, times: list[float], what: str, dev: Device) -> list[dict]:
    origin = phases[0][1]
    after = (phases[-1][2] - origin) * 1e6  # the commands' run follows the host phases on the time line
    events = [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": f"host ({dev.driver})"}},
              {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": f"{dev.name}: {what}"}}]
    for name, begin, end in phases:
        events.append({"name": name, "cat": "host", "ph": "X", "pid": 1, "tid": 1, "ts": (begin - origin) * 1e6,
                       "dur": (end - begin) * 1e6})
    for c, begin, end in zip(program.commands, times, times[1:]):
        events.append({"name": label(c), "cat": c.kind, "ph": "X", "pid": 2, "tid": 1, "ts": after + begin * 1e6,
                       "dur": (end - begin) * 1e6,
                       "args": {"segment": c.segment, "waits for": list(program.predecessors(c.index))}})
    return events


ROW = 9  # segments per row of the picture
COLORS = {"dispatch": "#cfe2f3", "dispatch_indirect": "#d9d2e9", "fill": "#fff2cc", "update": "#fce5cd",
          "copy": "#d9ead3", "while_nonzero": "#f4cccc", "if_nonzero": "#f4cccc"}


FORMATS = (".png", ".svg", ".pdf")


def draw_program(program: Program, path: str | Path, title: str | None = None) -> None:
    """Draw a program's dependency DAG into a file: commands in columns by segment, regions as one box naming their
    body. Draws on a figure of its own, leaving matplotlib's pyplot state and backend as they were.

    Args:
        program: A command buffer's `program` (after end()).
        path: Where to write it: its suffix picks PNG, SVG or PDF.
        title: A title above the graph.

    Raises:
        ValidationError: The suffix is not .png, .svg or .pdf.
        UnsupportedError: matplotlib is not installed (the bench extra).
    """
    if Path(path).suffix.lower() not in FORMATS:
        raise ValidationError(f"draw_program: {path} should end in one of {', '.join(FORMATS)}")
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import FancyBboxPatch
    except ImportError as e:
        raise UnsupportedError(f"draw_program needs matplotlib ({e}); "
                               f"pip install 'hal-command-buffers[bench]'") from None
    segments: dict[int, list[Any]] = {}
    for c in program.commands:
        segments.setdefault(c.segment, []).append(c)
    order = sorted(segments)
    tallest = max((len(s) for s in segments.values()), default=1)
    place = {}
    for k, segment in enumerate(order):
        for j, c in enumerate(segments[segment]):
            place[c.index] = (k % ROW * 2.2, -(k // ROW) * (tallest + 1.2) * 1.1 - j * 1.1)
    columns = min(ROW, len(order)) or 1
    rows = -(-len(order) // ROW) or 1
    fig = Figure(figsize=(1.5 + 1.9 * columns, 1.0 + 1.0 * rows * (tallest + 1.2)))
    ax = fig.subplots()
    for k, segment in enumerate(order):  # a band behind each segment
        x, top = k % ROW * 2.2, -(k // ROW) * (tallest + 1.2) * 1.1
        ax.add_patch(FancyBboxPatch((x - 0.95, top - 1.1 * len(segments[segment]) + 0.45), 1.9,
                                    1.1 * len(segments[segment]) + 0.2, boxstyle="round,pad=0.02", fc="#f3f3f3",
                                    ec="none", zorder=0))
        ax.text(x, top + 0.75, f"segment {segment}", ha="center", fontsize=7, color="#666666")
    row_of = {c.index: order.index(c.segment) // ROW for c in program.commands}
    for c in program.commands:
        for p in program.predecessors(c.index):
            (x0, y0), (x1, y1) = place[p], place[c.index]
            if row_of[p] == row_of[c.index]:  # side to side
                start, end = (x0 + 0.8, y0), (x1 - 0.8, y1)
            else:  # from the bottom of one row to the top of a later one, through the gap between them
                start, end = (x0, y0 - 0.4), (x1, y1 + 0.4)
            ax.annotate("", end, start, zorder=1, arrowprops={"arrowstyle": "->", "color": "#888888", "lw": 0.8})
    for c in program.commands:
        x, y = place[c.index]
        kind = "dispatch_indirect" if getattr(c, "parameters", None) is not None else c.kind
        text = label(c).replace(" (indirect)", "\n(indirect)")
        if c.kind in REGIONS:
            text += f"\nbody: {len(c.body.commands)} commands"
        ax.add_patch(FancyBboxPatch((x - 0.8, y - 0.4), 1.6, 0.8, boxstyle="round,pad=0.03",
                                    fc=COLORS.get(kind, "#eeeeee"), ec="#444444", lw=0.8, zorder=2,
                                    ls="--" if c.kind in REGIONS else "-"))
        ax.text(x, y, text, ha="center", va="center", fontsize=7, zorder=3)
    ax.set_xlim(-1.2, (columns - 1) * 2.2 + 1.2)
    ax.set_ylim(min((y for _, y in place.values()), default=0) - 0.8, 1.3)
    ax.axis("off")
    ax.set_title(title or f"{len(program.commands)} commands, {len(order)} segments ({program.dependencies})",
                 fontsize=9)
    fig.savefig(path, dpi=110, bbox_inches="tight")
