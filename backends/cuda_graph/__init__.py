"""The CUDA graph backend: hal command buffers as CUDA graphs, through cuda-python's driver bindings.

This package imports without cuda-python: CudaDriver and CudaDevice load on first use, and say what to
install when cuda-python is missing."""

from typing import Any

from hal.device import import_backend

__all__ = ["CudaDevice", "CudaDriver"]
PACKAGES = {"cuda": "pip install 'hal[cuda]' (cuda-python)"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_backend("backends.cuda_graph.device", PACKAGES), name)
