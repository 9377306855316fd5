"""PNG figures of a `python -m bench` result: one function per figure, each skipped when its data is absent.

matplotlib is imported here only, with the Agg backend, so the benchmarks themselves never need it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

PHASES = ("record", "end", "submit", "run")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def scaling(result: dict, path: Path) -> bool:
    """Per-command cost of each phase against the number of commands, one panel per phase; a flat line
    is linear scaling, a rising one superlinear."""
    runs = [r for key, r in result.items() if key.startswith("scaling:")]
    if not runs:
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(PHASES), figsize=(4.2 * len(PHASES), 3.8), squeeze=False)
    for ax, phase in zip(axes[0], PHASES):
        for run in runs:
            for program in sorted({r["program"] for r in run["rows"]}):
                for strategy in ("deferred", "single_pass"):
                    rows = sorted((r for r in run["rows"] if r["program"] == program and r["strategy"] == strategy),
                                  key=lambda r: r["commands"])
                    ax.plot([r["commands"] for r in rows], [r[phase] for r in rows], marker="o",
                            linestyle="-" if strategy == "deferred" else "--",
                            label=f"{run['driver']} {program} {strategy}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("commands")
        ax.set_ylabel(f"{phase}: µs per command")
        ax.set_title(phase)
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=6, loc="best")
    fig.suptitle(f"hal scaling ({result['meta']['device']}, {result['meta']['date']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def record(result: dict, path: Path) -> bool:
    """Recording cost per command against size: validation on over off, single_pass over deferred."""
    run = result.get("record")
    if not run:
        return False
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    rows = run["rows"]

    def us(program, n, strategy, validate, deps="barriers"):
        return next(r["record_us"] for r in rows if (r["program"], r["commands"], r["strategy"], r["validate"],
                                                     r["dependencies"]) == (program, n, strategy, validate, deps))
    sizes = sorted({r["commands"] for r in rows})
    for program in sorted({r["program"] for r in rows}):
        ax.plot(sizes, [us(program, n, "deferred", True) / us(program, n, "deferred", False) for n in sizes],
                marker="o", label=f"{program}: validation on / off")
        ax.plot(sizes, [us(program, n, "single_pass", True) / us(program, n, "deferred", True) for n in sizes],
                marker="s", linestyle="--", label=f"{program}: single_pass / deferred")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("commands")
    ax.set_ylabel("ratio of record µs per command")
    ax.set_title(f"recording ({run['machine']}, {run['date']})")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


FIGURES: dict[str, Callable[[dict, Path], bool]] = {"scaling": scaling, "record": record}


def write_all(result: dict, stem: Path) -> list[Path]:
    """Every figure the result has data for, as `<stem>-<figure>.png`; returns their paths."""
    written = []
    for name, figure in FIGURES.items():
        path = stem.with_name(f"{stem.name}-{name}.png")
        if figure(result, path):
            written.append(path)
    return written
