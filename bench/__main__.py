"""`python -m bench`: every benchmark this machine supports, each side by side with its competitors.

Runs the recording benchmark (host), the scaling benchmark on every available device, and the
backend benchmarks whose device is present; writes bench/results/<device>-<date>.json and .md and
the PNG figures next to them.

    python -m bench [--quick] [--out bench/results]
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import time
from pathlib import Path

from tqdm import tqdm

import hal
from bench import plots, record, scaling

FULL_SIZES = [10, 100, 1000, 10000]
QUICK_SIZES = [10, 100]


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def run(sizes: list[int], bar: tqdm) -> dict:
    def progress(label: str) -> None:
        bar.set_description(label)
        bar.update()

    drivers = hal.available_drivers()  # a CPU Vulkan device such as lavapipe counts: it is measured too
    with hal.create_device() as best:
        meta = dict(device=best.name, driver=best.driver, drivers=drivers, date=time.strftime("%Y-%m-%d"),
                    machine=platform.machine(), python=platform.python_version())
    result: dict = {"meta": meta, "record": record.run(sizes, progress)}
    for driver in drivers:
        with hal.create_device(driver) as dev:
            result[f"scaling:{driver}"] = scaling.run(dev, sizes, progress)
    return result


def report(result: dict) -> str:
    meta = result["meta"]
    parts = [f"# hal benchmarks on {meta['device']} ({meta['driver']}), {meta['date']}",
             f"drivers: {', '.join(meta['drivers'])}; Python {meta['python']} on {meta['machine']}", "",
             record.report(result["record"])]
    parts += [scaling.report(r) for key, r in result.items() if key.startswith("scaling:")]
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES} instead of {FULL_SIZES}")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    tqdm.monitor_interval = 0  # no monitor thread: it would outlive the run (the host queue counts live threads)
    with tqdm(unit="step", leave=False) as bar:
        result = run(sizes, bar)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{_slug(result['meta']['device'])}-{result['meta']['date']}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=1))
    text = report(result)
    figures = plots.write_all(result, stem)
    text += "\n\n## Figures\n" + "\n".join(f"- {p.name}" for p in figures)
    stem.with_suffix(".md").write_text(text + "\n")
    print(text)
    print(f"\nwrote {stem}.json, {stem}.md and {len(figures)} figures")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
