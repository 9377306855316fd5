"""`python -m bench`: every benchmark this machine supports, each side by side with its competitors.

Runs the recording benchmark (host), the scaling benchmark on every available device, the Vulkan
submission-style benchmark on the Vulkan device (a CPU one such as lavapipe counts) and the CUDA graph
benchmark on a CUDA device; writes bench/results/<device>-<date>.json and .md (a summary table first)
and the PNG figures next to them. `--quick` runs small sizes only (what the tests run).

    python -m bench [--quick] [--out bench/results]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import re
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import hal
from bench import cuda, plots, record, scaling, vulkan

FULL_SIZES = [10, 100, 1000, 10000]
QUICK_SIZES = [10, 100]
CUDA_SIZES = {False: [10, 100, 1000], True: [10, 100]}  # issue 4's sizes; scaling covers 10000 on CUDA
VULKAN_DISPATCHES = {False: 100, True: 10}


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


@contextlib.contextmanager
def progress_bar() -> Iterator[Callable[[str], None]]:
    """A callback told each step's label: tqdm's bar where tqdm is installed, else a line on stderr."""
    try:
        from tqdm import tqdm
    except ImportError:
        yield lambda label: print(f"bench: {label}", file=sys.stderr)
        return
    tqdm.monitor_interval = 0  # no monitor thread: it would outlive the run (the host queue counts live threads)
    with tqdm(unit="step", leave=False) as bar:
        def step(label: str) -> None:
            bar.set_description(label)
            bar.update()

        yield step


def run(quick: bool, progress: Callable[[str], None]) -> dict:
    sizes = QUICK_SIZES if quick else FULL_SIZES
    drivers = hal.available_drivers()  # a CPU Vulkan device such as lavapipe counts: it is measured too
    with hal.create_device() as best:
        meta = dict(device=best.name, driver=best.driver, drivers=drivers, date=time.strftime("%Y-%m-%d"),
                    machine=platform.machine(), python=platform.python_version())
    result: dict = {"meta": meta, "record": record.run(sizes, progress)}
    for driver in drivers:
        with hal.create_device(driver) as dev:
            result[f"scaling:{driver}"] = scaling.run(dev, sizes, progress)
    if "vulkan" in drivers:
        result["vulkan"] = vulkan.run("vulkan", VULKAN_DISPATCHES[quick], progress)
    if "cuda" in drivers:
        result["cuda"] = cuda.run(CUDA_SIZES[quick], progress)
    return result


def summary(result: dict) -> str:
    """One line per headline comparison: hal, its competitor, and the ratio."""
    rows = []

    def add(what: str, ours: float, theirs: float, competitor: str, unit: str) -> None:
        rows.append(f"| {what} | {ours:.2f} {unit} | {competitor}: {theirs:.2f} {unit} | {theirs / ours:.2f}x |")

    rec = result["record"]
    sizes = {r["commands"] for r in rec["rows"]}
    n = 1000 if 1000 in sizes else max(sizes)  # issue 2's target is stated at 1000 commands
    for ref in (r for r in rec["references"] if r["commands"] == n):
        add(f"record a dispatch, {ref['program']} of {n}, every check on (host)", ref["record_us"], ref["floor_us"],
            "a plain-Python recorder that checks nothing", "µs")
    for key in (k for k in result if k.startswith("scaling:")):
        run = result[key]
        fits = {(f["program"], f["strategy"], f["phase"]): f for f in run["fits"]}
        for program in ("chain", "fan", "dag"):
            d, s = fits[(program, "deferred", "end")], fits[(program, "single_pass", "end")]
            rec_d = fits[(program, "deferred", "record")]["slope_us"]
            rec_s = fits[(program, "single_pass", "record")]["slope_us"]
            add(f"record+end slope, {program}, {run['driver']} (deferred vs single_pass)", rec_d + d["slope_us"],
                rec_s + s["slope_us"], "single_pass", "µs/cmd")
    if "vulkan" in result:
        for r in result["vulkan"]["rows"]:
            if "naive_per_dispatch_wall" in r:
                add(f"Vulkan wall per dispatch, {r['elements']} elements, hal reused", r["hal_reused_wall"],
                    r["naive_per_dispatch_wall"], "one VkCommandBuffer per dispatch", "µs")
    if "cuda" in result:
        cuda_rows = result["cuda"]["rows"]
        n = max(r["kernels"] for r in cuda_rows)

        def row(program: str, competitor: str) -> dict | None:
            return cuda.find_row(cuda_rows, program, n, competitor)
        for program in ("chain", "fan"):
            ours, ref, torch = row(program, "hal deferred"), row(program, "reference"), row(program, "torch")
            if ref is not None:
                add(f"CUDA record+end per kernel, {program} of {n}", ours["record"] + ours["end"],
                    ref["record"] + ref["end"], "compiled build+instantiate", "µs")
                add(f"CUDA resubmit, {program} of {n}", ours["submit"], ref["submit"], "compiled cuGraphLaunch", "µs")
                add(f"CUDA GPU time per node, {program} of {n}", ours["gpu"], ref["gpu"], "the same graph", "µs")
            if torch is not None:
                add(f"CUDA record+end per kernel, {program} of {n}", ours["record"] + ours["end"], torch["record"],
                    "PyTorch capture+instantiate", "µs")
                add(f"CUDA recording to first result per kernel, {program} of {n}", ours["first"], torch["first"],
                    "PyTorch capture to first replay's end", "µs")
            add(f"CUDA one-shot wall per kernel, {program} of {n}, stream launches",
                row(program, "one-shot: stream launches (hal deferred)")["wall"],
                row(program, "one-shot: graph (hal single_pass)")["wall"], "a graph built to run once", "µs")
        last = result["cuda"]["rebind"][-1]
        if "reference_submit" in last:
            add(f"CUDA rebind submit, {last['changed']} of 1000 nodes changed", last["hal_submit"],
                last["reference_submit"], "compiled SetParams + launch", "µs")
    return "\n".join(["## Summary", "", "ratio = competitor / hal (above 1: hal is faster)", "",
                      "| measure | hal | competitor | ratio |", "|---|---:|---|---:|", *rows])


def report(result: dict) -> str:
    meta = result["meta"]
    parts = [f"# hal benchmarks on {meta['device']} ({meta['driver']}), {meta['date']}",
             f"drivers: {', '.join(meta['drivers'])}; Python {meta['python']} on {meta['machine']}",
             summary(result), record.report(result["record"])]
    parts += [scaling.report(r) for key, r in result.items() if key.startswith("scaling:")]
    if "vulkan" in result:
        parts.append(vulkan.report(result["vulkan"]))
    if "cuda" in result:
        parts.append(cuda.report(result["cuda"]))
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES} instead of {FULL_SIZES}")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    with progress_bar() as progress:
        result = run(args.quick, progress)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{_slug(result['meta']['device'])}-{result['meta']['date']}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    text = report(result)
    if plots.available():
        figures = plots.write_all(result, stem)
        text += "\n\n## Figures\n" + "\n".join(f"- {p.name}" for p in figures)
    else:
        figures = []
        text += "\n\n## Figures\nnone: matplotlib is not installed (pip install 'hal-command-buffers[bench]')"
    stem.with_suffix(".md").write_text(text + "\n")
    print(text)
    print(f"\nwrote {stem}.json, {stem}.md and {len(figures)} figures")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
