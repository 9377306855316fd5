"""hal.tracing on every backend: a Chrome trace of one submission (host phases, one device event per command, in
order, their times read from the device's queue clock) and a picture of the dependency graph."""

from __future__ import annotations

import json

import numpy as np
import pytest

import hal
from hal.tracing import draw_program, trace, trace_recording
from tests.kernels import u32

N = 64


def record(cb, exe, x, y):
    cb.fill_buffer(x, np.uint32(3))
    cb.execution_barrier()
    cb.dispatch(exe, "scale", (1, 1, 1), (N, hal.constant_slot(0)), (x,))
    cb.dispatch(exe, "xor_copy", (1, 1, 1), (N, 1), (y, hal.slot(0)))
    cb.execution_barrier()
    cb.copy_buffer(x, hal.slot(0))


def test_a_trace_has_the_host_phases_and_every_command_in_order(dev, exe, tmp_path):
    x, y, out = dev.allocate(4 * N), dev.upload(np.arange(N, dtype=np.uint32)), dev.allocate(4 * N)
    result, cb = trace_recording(dev, lambda cb: record(cb, exe, x, y), binding_table=(out,), constants=(5,),
                                 binding_capacity=1, constant_capacity=1)
    np.testing.assert_array_equal(out.read(np.uint32), u32([15] * N))  # the trace ran the commands
    path = tmp_path / "trace.json"
    result.save(path)
    events = json.loads(path.read_text())["traceEvents"]
    host = [e["name"] for e in events if e.get("cat") == "host"]
    assert host == ["record", "end", "submit", "wait for the end"]
    device = [e for e in events if e["ph"] == "X" and e["pid"] == 2]
    assert [e["name"] for e in device] == ["#0 fill", "#1 scale", "#2 xor_copy", "#3 copy"]
    assert [e["args"]["waits for"] for e in device] == [[], [0], [0], [1, 2]]
    starts = [e["ts"] for e in device]
    assert starts == sorted(starts) and all(e["dur"] >= 0 for e in device)
    assert len(result.command_us) == 4 and sum(result.command_us) > 0
    assert {e["args"]["name"].split(":")[0] for e in events if e["ph"] == "M"} >= {dev.name}


def test_trace_refuses_what_it_cannot_run(dev, exe):
    cb = dev.create_command_buffer(mode="one_shot")
    with pytest.raises(hal.ValidationError, match="end\\(\\) it first"):
        trace(cb)
    with cb:
        cb.fill_buffer(dev.allocate(16), np.uint32(0))
    with pytest.raises(hal.ValidationError, match="must be reusable"):
        trace(cb)


def test_the_picture_of_a_program_with_a_region(dev, exe, tmp_path):
    pytest.importorskip("matplotlib",
                        reason="draw_program draws with matplotlib: pip install 'hal-command-buffers[bench]'")
    flag, x = dev.upload(u32([0])), dev.allocate(4 * N)
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(x, np.uint32(1))
        with cb.while_nonzero(flag):
            cb.dispatch(exe, "scale", (1, 1, 1), (N, 2), (x,))
    for suffix in ("png", "svg"):
        path = tmp_path / f"graph.{suffix}"
        draw_program(cb.program, path)
        assert path.stat().st_size > 1000
    assert b"while_nonzero" in (tmp_path / "graph.svg").read_bytes()


def test_a_picture_needs_a_format_matplotlib_writes(dev, tmp_path):
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.fill_buffer(dev.allocate(16), np.uint32(0))
    with pytest.raises(hal.ValidationError, match="should end in one of .png, .svg, .pdf"):
        draw_program(cb.program, tmp_path / "graph.txt")
