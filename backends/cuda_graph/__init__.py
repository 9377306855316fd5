"""The CUDA graph backend: hal command buffers as CUDA graphs, through cuda-bindings.

This package imports without cuda-bindings: CudaDriver and CudaDevice load on first use, and say what to
install when it is missing."""

from typing import Any

from hal.drivers import import_backend

__all__ = ["CudaDevice", "CudaDriver"]
PACKAGES = {"cuda": "pip install 'hal-command-buffers[cuda]' (cuda-bindings)"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    device = import_backend("backends.cuda_graph.device", PACKAGES, "backends.cuda_graph.command_buffer",
                            "cuda-bindings' cydriver.pxd or cuda.h (pip install cuda-bindings nvidia-cuda-runtime)")
    return getattr(device, name)
