"""dispatch_indirect on CUDA: a setter kernel node before each device-updatable kernel node (see hal.indirect).

The dispatch's kernel node is made device-updatable (CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, driver
12.4+); a one-thread setter node reads the three counts where the parameters are and, in the same graph launch,
sets the node's grid (cudaGraphKernelNodeSetGridDim) or disables it for a zero count or counts above
max_workgroup_count (noting the fault). No host round trip: static and dynamic counts are both read on the GPU.
Static dispatches' setters (no command of the command buffer may write their counts) form one chain from the
launch's start, off the dispatches' path; a dynamic one's waits for what the dispatch waits for (inside a region's
body, where counts must be dynamic, that is each iteration's). Driver 12.4 or newer. The probe that chose this:
bench/results/probe-cuda-indirect-nvidia-h100-2026-11-25.md.

What CUDA asks of graphs with device-updatable nodes, and hal does: instantiated once (cuGraphExecUpdate is
refused them, so a re-recording instantiates anew), uploaded (cuGraphUpload) before their first launch and
after the host patched such a node (a new binding table or constants).

NVRTC compiles the setter without the CUDA toolkit's headers (cuda_device_runtime_api.h needs its crt/ headers,
which NVRTC does not carry), so the two device runtime functions it calls are declared here as that header
declares them (returning cudaError_t, an int).
"""

from __future__ import annotations

from hal.executable import ExecutableSource, Export

SETTER = ExecutableSource.cuda(r"""
typedef struct CUgraphDeviceUpdatableNode_st* cudaGraphDeviceNode_t;
extern "C" __device__ __cudart_builtin__ int cudaGraphKernelNodeSetEnabled(cudaGraphDeviceNode_t node, bool enable);
extern "C" __device__ __cudart_builtin__ int cudaGraphKernelNodeSetGridDim(cudaGraphDeviceNode_t node, dim3 grid);

extern "C" __global__ void set_counts(cudaGraphDeviceNode_t node, const unsigned* counts, unsigned* fault,
                                      unsigned limit_x, unsigned limit_y, unsigned limit_z, unsigned command) {
    unsigned x = counts[0], y = counts[1], z = counts[2];
    bool over = x > limit_x || y > limit_y || z > limit_z;
    if (over && atomicCAS(fault, 0u, 1u) == 0u) {
        fault[1] = command; fault[2] = x; fault[3] = y; fault[4] = z;
        __threadfence_system();
    }
    bool run = !over && x != 0u && y != 0u && z != 0u;
    cudaGraphKernelNodeSetEnabled(node, run);
    if (run) cudaGraphKernelNodeSetGridDim(node, dim3(x, y, z));
}
""", [Export("set_counts", bindings=3, constants=4)])
