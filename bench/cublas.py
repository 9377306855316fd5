"""cuBLAS through torch as a call's function (CommandBuffer.call on CUDA): what bench.calls and bench.collectives'
data-parallel step record beside hal's own commands."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def torch_matmul(n: int) -> Callable:
    """A call's function: binding 2 = binding 0 @ binding 1 (n x n float32), cuBLAS through torch on the stream hal
    captures."""
    def matmul(ctx) -> None:
        import torch
        device = f"cuda:{ctx.device}"
        a, b, c = (torch.as_tensor(ctx.binding(i, np.float32), device=device).view(n, n) for i in range(3))
        with torch.cuda.stream(torch.cuda.ExternalStream(ctx.stream, device=device)):
            torch.matmul(a, b, out=c)
    return matmul
