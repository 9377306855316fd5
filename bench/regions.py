"""A while_nonzero loop against host submissions of its body, side by side on one device (issue 18: host time O(1)
in k on CUDA, and >= 5x faster than k submissions at k = 100). On Vulkan, also an if_nonzero of one dispatch on the
device (conditional rendering, where the device has it) against the same through the host (a second device made with
HAL_VULKAN_DISABLE_CONDITIONAL_RENDERING): wall µs of a submission to the end of its work, flag set and clear.

The body: a one-workgroup dispatch and a dispatch decrementing the flag (a barrier between). The loop is one
queue_execute of a command buffer holding `while_nonzero(flag)` around the body, the flag set to k beforehand;
the competitor submits a command buffer of the body k times. Reported per k: host µs of the submitting calls, and
wall µs from the first call to the end of the work (best of REPEATS each).

    python -m bench.regions [--device cuda] [--json PATH]
"""

from __future__ import annotations

import os
import threading
import time
from unittest import mock

import numpy as np

import hal
from bench import device_main
from tests.kernels import SOURCE

ITERATIONS = (1, 10, 100)
REPEATS = 20
TARGET = 5.0


def record_body(cb: hal.CommandBuffer, exe: hal.Executable, out: hal.Buffer, flag: hal.Buffer,
                minus_one: hal.Buffer) -> None:
    cb.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
    cb.execution_barrier()
    cb.dispatch(exe, "add", (1, 1, 1), (1,), (flag, minus_one, flag))


def timed(dev: hal.Device, flag: hal.Buffer, k: int, submit) -> tuple[float, float]:
    """(host µs of submit(), wall µs to the end of its work): the best of REPEATS, the flag set to k first."""
    host = wall = float("inf")
    for _ in range(REPEATS):
        flag.write(np.array([k], np.uint32))
        dev.synchronize()
        t0 = time.perf_counter()
        submit()
        t1 = time.perf_counter()
        dev.synchronize()
        t2 = time.perf_counter()
        host, wall = min(host, t1 - t0), min(wall, t2 - t0)
        assert flag.read(np.uint32)[0] == 0
    return host * 1e6, wall * 1e6


def host_checks(dev: hal.Device, flag: hal.Buffer, k: int, loop: hal.CommandBuffer) -> int | None:
    """How often the host checks the loop's flag in a run of k iterations (Vulkan: the waits of the thread that
    submits regions); None where the host never does (CUDA's loops and the host backend's run where the flag is)."""
    if dev.driver != "vulkan":
        return None
    flag.write(np.array([k], np.uint32))
    checks = []
    wait = dev.wait_for_submission
    dev.wait_for_submission = lambda value, deadline=None: (threading.current_thread().name == "hal-vulkan-regions"
                                                            and checks.append(value)) or wait(value, deadline)
    try:
        dev.queue_execute(loop)
        dev.synchronize()
    finally:
        del dev.wait_for_submission
    return len(checks)


def run(device: str | None) -> dict:
    with hal.create_device(device) as dev:
        exe = dev.load_executable(SOURCE)
        out, flag = dev.upload(np.zeros(16, np.uint32)), dev.upload(np.zeros(1, np.uint32))
        minus_one = dev.upload(np.array([0xFFFFFFFF], np.uint32))
        loop = dev.create_command_buffer(mode="reusable")
        with loop:
            with loop.while_nonzero(flag):
                record_body(loop, exe, out, flag, minus_one)
        body = dev.create_command_buffer(mode="reusable")
        with body:
            record_body(body, exe, out, flag, minus_one)
        dev.queue_execute(loop)
        dev.queue_execute(body)
        rows = []
        for k in ITERATIONS:
            loop_host, loop_wall = timed(dev, flag, k, lambda: dev.queue_execute(loop))

            def submissions(k: int = k) -> None:
                for _ in range(k):
                    dev.queue_execute(body)

            each_host, each_wall = timed(dev, flag, k, submissions)
            rows.append(dict(iterations=k, loop_host=loop_host, loop_wall=loop_wall, submissions_host=each_host,
                             submissions_wall=each_wall, checks=host_checks(dev, flag, k, loop)))
        meta = dict(device=dev.name, driver=dev.driver, date=time.strftime("%Y-%m-%d"))
        branches = if_rows(device) if dev.driver == "vulkan" else []
    return dict(meta=meta, rows=rows, branches=branches)


def if_rows(device: str | None) -> list[dict]:
    """Wall µs of one submission of an if_nonzero around a dispatch, with the flag 1 and 0: on the device (where
    it can) and through the host, on two devices of one GPU made side by side."""
    timings = {}
    for path, switches in (("device", {}), ("host", {"HAL_VULKAN_DISABLE_CONDITIONAL_RENDERING": "1"})):
        with mock.patch.dict(os.environ, switches):  # read when the device is made
            dev = hal.create_device(device)
        with dev:
            exe = dev.load_executable(SOURCE)
            out, flag = dev.upload(np.zeros(16, np.uint32)), dev.upload(np.zeros(1, np.uint32))
            cb = dev.create_command_buffer(mode="reusable")
            with cb:
                with cb.if_nonzero(flag):
                    cb.dispatch(exe, "mark", (1, 1, 1), (1,), (out,))
            for value in (1, 0):
                flag.write(np.array([value], np.uint32))
                best = float("inf")
                for _ in range(REPEATS):
                    dev.synchronize()
                    t0 = time.perf_counter()
                    dev.queue_execute(cb)
                    dev.synchronize()
                    best = min(best, time.perf_counter() - t0)
                timings[path, value] = (best * 1e6, cb.emitter.driven)
    return [dict(flag=value, device=timings["device", value][0], host=timings["host", value][0],
                 on_device=not timings["device", value][1]) for value in (1, 0)]


def report(result: dict) -> str:
    meta = result["meta"]
    lines = [f"## while_nonzero on {meta['device']} ({meta['driver']}), {meta['date']}", "",
             "A k-iteration loop (one queue_execute) against k submissions of its body: host µs of the submitting "
             f"calls and wall µs to the end of the work, best of {REPEATS}.", "",
             "| k | loop host | submissions host | host ratio | loop wall | submissions wall | wall ratio |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['iterations']} | {r['loop_host']:.1f} | {r['submissions_host']:.1f} | "
                     f"{r['submissions_host'] / r['loop_host']:.1f}x | {r['loop_wall']:.1f} | "
                     f"{r['submissions_wall']:.1f} | {r['submissions_wall'] / r['loop_wall']:.2f}x |")
    checked = [r for r in result["rows"] if r.get("checks") is not None]
    if checked:
        lines += ["", "The host's checks of the loop's flag in a run of k iterations (Vulkan): " + ", ".join(
            f"k = {r['iterations']}: {r['checks']}" for r in checked) + "."]
    last = result["rows"][-1]
    ratio = last["submissions_host"] / last["loop_host"]
    growth = last["loop_host"] / result["rows"][0]["loop_host"]
    lines += ["", f"Targets: at k = {last['iterations']} the loop's host time is {ratio:.1f}x less than the "
                  f"submissions' (>= {TARGET}: {'met' if ratio >= TARGET else 'MISSED'}); from k = "
                  f"{result['rows'][0]['iterations']} to {last['iterations']} the loop's host time grows "
                  f"{growth:.2f}x (O(1) in k)."]
    if checked and checked[-1]["iterations"] >= 64:
        per = checked[-1]["checks"] / checked[-1]["iterations"]
        lines[-1] += (f" Host round trips per iteration at k = {checked[-1]['iterations']}: {per:.3f} (<= 1/8: "
                      f"{'met' if per <= 1 / 8 else 'MISSED'}).")
    if result.get("branches"):
        lines += ["", "if_nonzero around one dispatch, wall µs of a submission to the end of its work (best of "
                      f"{REPEATS}): on the device (conditional rendering) against through the host (a submission "
                      "that copies the flag, a wait for it, then the body's):", "",
                  "| flag | on the device | through the host | host / device | ran on the device |",
                  "|---:|---:|---:|---:|---|"]
        for r in result["branches"]:
            lines.append(f"| {r['flag']} | {r['device']:.1f} | {r['host']:.1f} | {r['host'] / r['device']:.2f}x | "
                         f"{'yes' if r['on_device'] else 'no (no VK_EXT_conditional_rendering)'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return device_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
