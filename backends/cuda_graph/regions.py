"""Regions on CUDA: a conditional WHILE or IF node, its condition set on the GPU (no host round trip).

Before the conditional node, a one-thread kernel node reads the region's uint32 flag and sets the node's
condition handle (cudaGraphSetConditional); a WHILE body ends with the same kernel, after every other node of
the body, so the flag the body leaves decides the next iteration. A k-iteration loop is one graph launch
(probed before it was built: bench/results/probe-cuda-while-nvidia-h100-2026-11-25.md). As for the setter of
dispatch_indirect (backends.cuda_graph.indirect), NVRTC compiles the kernel without the toolkit's headers, so the
device runtime function is declared here as cuda_device_runtime_api.h declares it.
"""

from __future__ import annotations

from hal.executable import ExecutableSource, Export

SET_CONDITION = ExecutableSource.cuda(r"""
typedef unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ __cudart_builtin__ void cudaGraphSetConditional(cudaGraphConditionalHandle handle,
                                                                      unsigned int value);

extern "C" __global__ void set_condition(cudaGraphConditionalHandle handle, const unsigned* flag) {
    cudaGraphSetConditional(handle, *flag != 0u);
}
""", [Export("set_condition", bindings=2)])
