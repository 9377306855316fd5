"""The GPU kernels a piece of work runs, read through CUPTI by torch.profiler.

CUPTI sees the kernels of the process's CUDA context whoever launched them: PyTorch's, hal's graph nodes (one record
per kernel node per launch) and any other library's, so one tool counts and times the kernels of every competitor
of a benchmark. One exception seen on an H200 (2026-11-28): of the iterations of a CUDA conditional node's body it
recorded only a fraction, so loops are profiled one iteration per launch. Without PyTorch or a CUDA device there is
nothing to read it with, and the answer is None.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable


def device_kernels(work: Callable[[], object]) -> dict[str, tuple[int, float]] | None:
    """Per kernel name: (launches, total µs on the GPU) while `work()` runs (the device synchronised after it);
    copies and fills are left out. None without PyTorch or a CUDA device."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # that it clears its events after each cycle: there is one cycle
        with profile(activities=[ProfilerActivity.CUDA]):  # a throwaway session: CUPTI's set-up stays out of the next
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            work()
            torch.cuda.synchronize()
    found: dict[str, tuple[int, float]] = {}
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA or event.name.lower().startswith(("memcpy", "memset")):
            continue
        count, total = found.get(event.name, (0, 0.0))
        found[event.name] = (count + 1, total + event.time_range.elapsed_us())
    return found
