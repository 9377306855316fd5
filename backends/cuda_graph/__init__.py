"""The CUDA graph backend: hal command buffers as CUDA graphs, through cuda-python's driver bindings."""

from backends.cuda_graph.device import CudaDevice, CudaDriver

__all__ = ["CudaDevice", "CudaDriver"]
