"""PNG figures of a `python -m bench` result: one function per figure, each skipped when its data is absent.

matplotlib is imported here only, with the Agg backend, so the benchmarks themselves never need it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

PHASES = ("record", "end", "submit", "run")


def available() -> bool:
    """Whether matplotlib can be imported (the figures need it; the benchmarks do not)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def scaling(result: dict, path: Path) -> bool:
    """Per-command cost of each phase against the number of commands: a row per device, a panel per
    phase, a colour per program, deferred solid and single_pass (IREE's strategy) dashed. A flat line is
    linear scaling, a rising one superlinear."""
    runs = [r for key, r in result.items() if key.startswith("scaling:")]
    if not runs:
        return False
    plt = _pyplot()
    fig, axes = plt.subplots(len(runs), len(PHASES), figsize=(4.2 * len(PHASES), 3.2 * len(runs)), squeeze=False)
    for row, run in zip(axes, runs):
        for ax, phase in zip(row, PHASES):
            for k, program in enumerate(sorted({r["program"] for r in run["rows"]})):
                for strategy in ("deferred", "single_pass"):
                    rows = sorted((r for r in run["rows"] if r["program"] == program and r["strategy"] == strategy),
                                  key=lambda r: r["commands"])
                    ax.plot([r["commands"] for r in rows], [r[phase] for r in rows], marker="o", color=f"C{k}",
                            linestyle="-" if strategy == "deferred" else "--", label=f"{program} {strategy}")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("commands")
            ax.set_ylabel("µs per command")
            ax.set_title(f"{run['driver']}: {phase}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        row[-1].legend(fontsize=6, loc="best")
    fig.suptitle(f"hal scaling, flat = linear ({result['meta']['device']}, {result['meta']['date']})")
    return _finish(fig, path)


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


def _finish(fig, path: Path) -> bool:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    _pyplot().close(fig)
    return True


def _series(rows: list[dict], program: str, competitor: str, value: Callable[[dict], float]) -> dict[int, float]:
    """kernels -> value(row) for one program and competitor."""
    return {r["kernels"]: value(r) for r in rows if r["program"] == program and r["competitor"] == competitor}


CUDA_PANELS = (("record+end", lambda r: r["record"] + r["end"], "host µs per kernel to record and build"),
               ("first", lambda r: r["first"], "µs per kernel from recording to the first result"),
               ("submit", lambda r: r["submit"], "host µs of one resubmission"),
               ("gpu", lambda r: r["gpu"], "GPU µs per node"))


def cuda_competitors(result: dict, path: Path) -> bool:
    """Per-node cost against graph size, each competitor as a ratio over hal deferred (above 1: hal is
    faster), one panel per phase."""
    run = result.get("cuda")
    if not run:
        return False
    plt = _pyplot()
    rows = [r for r in run["rows"] if "gpu" in r]
    competitors = [c for c in dict.fromkeys(r["competitor"] for r in rows) if c != "hal deferred"]
    fig, axes = plt.subplots(1, len(CUDA_PANELS), figsize=(5 * len(CUDA_PANELS), 4.6), squeeze=False)
    for ax, (_, value, label) in zip(axes[0], CUDA_PANELS):
        for program, style in (("chain", "-"), ("fan", "--")):
            ours = _series(rows, program, "hal deferred", value)
            for k, name in enumerate(competitors):
                theirs = _series(rows, program, name, value)
                sizes = sorted(n for n in theirs if n in ours and ours[n] > 0 and theirs[n] > 0)
                if sizes:
                    ax.plot(sizes, [theirs[n] / ours[n] for n in sizes], marker="o", linestyle=style,
                            color=f"C{k}", label=f"{name}, {program}")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("kernels in the graph")
        ax.set_ylabel("competitor / hal deferred")
        ax.set_title(label, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    submit = [name for name, _, _ in CUDA_PANELS].index("submit")  # every competitor has a line there
    handles, labels = axes[0][submit].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=len(competitors))
    meta = run["meta"]
    fig.suptitle(f"CUDA graphs: each competitor over hal deferred, above 1 hal is faster; solid chain, dashed fan "
                 f"({meta['device']}, driver {meta['driver']}, {meta['date']})", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def cuda_breakdown(result: dict, path: Path) -> bool:
    """Record, end and submit µs per kernel of each competitor at the largest size, stacked; the label
    above a bar is its total over hal deferred's."""
    run = result.get("cuda")
    if not run:
        return False
    plt = _pyplot()
    n = max(r["kernels"] for r in run["rows"])
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), squeeze=False)
    for ax, program in zip(axes[0], ("chain", "fan")):
        rows = [r for r in run["rows"] if "gpu" in r and r["program"] == program and r["kernels"] == n]
        parts = {"record": [r["record"] for r in rows], "end": [r["end"] for r in rows],
                 "submit (per kernel)": [r["submit"] / n for r in rows]}
        bottom = [0.0] * len(rows)
        for k, (label, values) in enumerate(parts.items()):
            ax.bar(range(len(rows)), values, bottom=bottom, color=f"C{k}", label=label)
            bottom = [b + v for b, v in zip(bottom, values)]
        ours = next(total for r, total in zip(rows, bottom) if r["competitor"] == "hal deferred")
        for x, total in enumerate(bottom):
            ax.text(x, total, f"{total / ours:.2f}x", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(rows)), [r["competitor"] for r in rows], rotation=20, fontsize=7)
        ax.set_ylabel("host µs per kernel")
        ax.set_title(f"{program} of {n} kernels (label: total / hal deferred)")
        ax.legend(fontsize=7)
    fig.suptitle(f"where the host time goes ({run['meta']['device']}, {run['meta']['date']})")
    return _finish(fig, path)


def rebind(result: dict, path: Path) -> bool:
    """Host µs of a submit whose new binding table changes k nodes of a 1000-node graph: hal patches those k
    nodes and launches, the compiled reference sets their parameters and launches; the labels are hal / it."""
    run = result.get("cuda")
    if not run:
        return False
    plt = _pyplot()
    rows = run["rebind"]
    ks = [r["changed"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(ks, [r["hal_submit"] for r in rows], marker="o", label="hal: the submit that rebinds")
    if "reference_submit" in rows[0]:
        ax.plot(ks, [r["reference_submit"] for r in rows], marker="s", label="compiled SetParams + launch")
        for r in rows:
            ax.annotate(f"{r['hal_submit'] / r['reference_submit']:.2f}x", (r["changed"], r["hal_submit"]),
                        textcoords="offset points", xytext=(4, 6), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("nodes whose binding changed (of 1000)")
    ax.set_ylabel("host µs per submit")
    ax.set_title(f"rebinding a 1000-node graph ({run['meta']['device']}; label: hal / reference)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return _finish(fig, path)


VULKAN_STYLES = (("one VkCommandBuffer per dispatch", "naive_per_dispatch_wall"),
                 ("batched, `vulkan` wrappers", "naive_batched_wall"), ("hal one-shot deferred", "hal_deferred_wall"),
                 ("hal one-shot single_pass", "hal_single_pass_wall"), ("hal reused", "hal_reused_wall"))


def vulkan(result: dict, path: Path) -> bool:
    """Wall µs per dispatch by submission style, per problem size; the labels are each style over hal reused."""
    run = result.get("vulkan")
    if not run:
        return False
    plt = _pyplot()
    rows = run["rows"]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / len(VULKAN_STYLES)
    for k, (label, key) in enumerate(VULKAN_STYLES):
        xs = [i + k * width for i, r in enumerate(rows) if key in r]
        values = [r[key] for r in rows if key in r]
        ax.bar(xs, values, width, color=f"C{k}", label=label)
        for x, r in zip(xs, (r for r in rows if key in r)):
            ax.text(x, r[key], f"{r[key] / r['hal_reused_wall']:.1f}x", ha="center", va="bottom", fontsize=6)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(rows))], [f"{r['elements']} elements" for r in rows])
    ax.set_yscale("log")
    ax.set_ylabel("wall µs per dispatch")
    meta = run["meta"]
    ax.set_title(f"Vulkan submission styles ({meta['device']}, {meta['date']}; label: style / hal reused)", fontsize=9)
    ax.legend(fontsize=7)
    return _finish(fig, path)


FIGURES: dict[str, Callable[[dict, Path], bool]] = {
    "scaling": scaling, "record": record, "cuda-competitors": cuda_competitors, "cuda-breakdown": cuda_breakdown,
    "rebind": rebind, "vulkan": vulkan}


def write_all(result: dict, stem: Path) -> list[Path]:
    """Every figure the result has data for, as `<stem>-<figure>.png`; returns their paths."""
    written = []
    for name, figure in FIGURES.items():
        path = stem.with_name(f"{stem.name}-{name}.png")
        if figure(result, path):
            written.append(path)
    return written
