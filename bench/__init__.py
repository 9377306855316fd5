"""Side-by-side benchmarks; each reports ratios between competitors measured in one process."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import queue
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import hal


def wall_us(dev, cb, submissions: int, binding_table: tuple = ()) -> float:
    """Wall µs per submission of `cb` (with `binding_table`) queued `submissions` times back to back on `dev`, to
    the end of the last (the device idle before)."""
    dev.synchronize()
    t0 = time.perf_counter()
    for _ in range(submissions):
        dev.queue_execute(cb, binding_table=binding_table)
    dev.synchronize()
    return (time.perf_counter() - t0) / submissions * 1e6


def in_processes(work: Callable[..., None], args_per_process: list[tuple], timeout_s: float) -> list[Any]:
    """work(*args, results) in a spawned process for each entry of `args_per_process`; each puts one result on
    `results`. Returns them in the order they came; where they did not all come within `timeout_s` (a hang: a worker
    should dump its stack on stderr before), one dict with `error` saying so. Processes still alive 30 s after (stuck
    closing, say) are killed."""
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    processes = [context.Process(target=work, args=(*args, results)) for args in args_per_process]
    for p in processes:
        p.start()
    found: list[Any] = []
    deadline = time.monotonic() + timeout_s
    try:
        for _ in processes:
            found.append(results.get(timeout=max(1.0, deadline - time.monotonic())))
    except queue.Empty:
        found = [dict(error=f"no result within {timeout_s:.0f} s (the processes' stacks are on stderr)")]
    for p in processes:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    return found


def emit(result: dict, report: str, json_path: str | None) -> int:
    """Print a benchmark's report and, when asked, write its result as JSON; the exit status."""
    print(report)
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=1))
    return 0


def plain_main(argv: list[str] | None, doc: str | None, run: Callable[[], dict], report: Callable[[dict], str]) -> int:
    """The command line of a benchmark that takes no arguments but `--json PATH`."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default=None, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = run()
    return emit(result, report(result), args.json)


def sizes_main(argv: list[str] | None, doc: str | None, default_sizes: str, run: Callable[[list[int]], dict],
               report: Callable[[dict], str]) -> int:
    """The command line of a benchmark run over a list of sizes: `--sizes 10,100` and `--json PATH`."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=default_sizes)
    parser.add_argument("--json", default=None, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = run([int(s) for s in args.sizes.split(",")])
    return emit(result, report(result), args.json)


def device_main(argv: list[str] | None, doc: str | None, run: Callable[[str | None], dict],
                report: Callable[[dict], str]) -> int:
    """The command line of a benchmark run on one device: `--device NAME` (default: the best) and `--json PATH`."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default=None, help="a device name for hal.create_device (default: the best)")
    parser.add_argument("--json", default=None, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = run(args.device)
    return emit(result, report(result), args.json)


class Events:
    """CUDA events on a hal device's stream (through cuda-bindings): `mark()` twice, then `seconds()`."""

    def __init__(self, dev: hal.Device) -> None:
        from cuda.bindings import driver
        self.driver, self.dev, self.events = driver, dev, []

    def mark(self) -> None:
        self.dev.activate()
        err, event = self.driver.cuEventCreate(0)
        self.driver.cuEventRecord(event, self.driver.CUstream(self.dev.stream_handle))
        self.events.append(event)

    def seconds(self) -> float:
        self.driver.cuEventSynchronize(self.events[-1])
        err, ms = self.driver.cuEventElapsedTime(self.events[-2], self.events[-1])
        for event in self.events:
            self.driver.cuEventDestroy(event)
        self.events.clear()
        return ms / 1e3
