"""Kernels shared by the tests: exact uint32 arithmetic, so every backend must agree to the bit.

Each kernel handles `n` = constants[0] elements; invocations past n do nothing, as on a GPU.
"""

from __future__ import annotations

import numpy as np

import hal

WORKGROUP = 64


# Host kernels read ctx.words, the 32-bit words a GPU kernel receives, so -1 means 0xFFFFFFFF everywhere.
def _add(ctx):
    n = ctx.words[0]
    out = ctx.binding(2, np.uint32)
    out[:n] = ctx.binding(0, np.uint32)[:n] + ctx.binding(1, np.uint32)[:n]


def _scale(ctx):
    n, k = ctx.words
    x = ctx.binding(0, np.uint32)
    x[:n] = x[:n] * k


def _xor_copy(ctx):
    n, k = ctx.words
    out = ctx.binding(1, np.uint32)
    out[:n] = ctx.binding(0, np.uint32)[:n] ^ k


def _mark(ctx):
    """Each workgroup (x, y, z) of the grid adds k to x[(z * Y + y) * X + x]: the grid shows in the buffer."""
    groups = ctx.workgroups[0] * ctx.workgroups[1] * ctx.workgroups[2]
    x = ctx.binding(0, np.uint32)
    x[:groups] = x[:groups] + ctx.words[0]


EXPORTS = (
    hal.Export("add", bindings=3, constants=1, workgroup_size=WORKGROUP, readonly=(0, 1)),
    hal.Export("scale", bindings=1, constants=2, workgroup_size=WORKGROUP),
    hal.Export("xor_copy", bindings=2, constants=2, workgroup_size=WORKGROUP, readonly=(0,)),
    hal.Export("mark", bindings=1, constants=1, workgroup_size=WORKGROUP),
)

HOST = hal.ExecutableSource.python({"add": _add, "scale": _scale, "xor_copy": _xor_copy, "mark": _mark}, EXPORTS)

# CUDA ABI: the bindings as device pointers, in order, then each constant as one 32-bit value.
CUDA_CODE = r"""
extern "C" __global__ void add(const unsigned* a, const unsigned* b, unsigned* out, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
extern "C" __global__ void scale(unsigned* x, unsigned n, unsigned k) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = x[i] * k;
}
extern "C" __global__ void xor_copy(const unsigned* x, unsigned* out, unsigned n, unsigned k) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i] ^ k;
}
extern "C" __global__ void mark(unsigned* x, unsigned k) {
    if (threadIdx.x == 0) x[(blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x] += k;
}
"""
CUDA = hal.ExecutableSource.cuda(CUDA_CODE, EXPORTS)

# Vulkan ABI: binding i = storage buffer (set 0, binding i); constants = a push-constant block of words.
_GLSL_HEAD = f"#version 450\nlayout(local_size_x = {WORKGROUP}) in;\n"
GLSL = {
    "add": _GLSL_HEAD + """
layout(set = 0, binding = 0) readonly buffer A { uint a[]; };
layout(set = 0, binding = 1) readonly buffer B { uint b[]; };
layout(set = 0, binding = 2) writeonly buffer C { uint c[]; };
layout(push_constant) uniform P { uint n; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < p.n) c[i] = a[i] + b[i]; }
""",
    "scale": _GLSL_HEAD + """
layout(set = 0, binding = 0) buffer X { uint x[]; };
layout(push_constant) uniform P { uint n; uint k; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < p.n) x[i] = x[i] * p.k; }
""",
    "xor_copy": _GLSL_HEAD + """
layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P { uint n; uint k; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < p.n) y[i] = x[i] ^ p.k; }
""",
    "mark": _GLSL_HEAD + """
layout(set = 0, binding = 0) buffer X { uint x[]; };
layout(push_constant) uniform P { uint k; } p;
void main() {
    uvec3 g = gl_WorkGroupID, n = gl_NumWorkGroups;
    if (gl_LocalInvocationIndex == 0u) x[(g.z * n.y + g.y) * n.x + g.x] += p.k;
}
""",
}
VULKAN = hal.ExecutableSource.glsl(GLSL, EXPORTS)

SOURCE = hal.ExecutableSource.multi(host=HOST, cuda=CUDA, vulkan=VULKAN)


def reference(name: str, constants: tuple[int, ...], arrays: list[np.ndarray]) -> None:
    """Apply kernel `name` to uint32 numpy arrays in place: the sequential meaning of a dispatch."""
    n = constants[0]
    if name == "add":
        arrays[2][:n] = arrays[0][:n] + arrays[1][:n]
    elif name == "scale":
        arrays[0][:n] = arrays[0][:n] * np.uint32(constants[1])
    elif name == "xor_copy":
        arrays[1][:n] = arrays[0][:n] ^ np.uint32(constants[1])
    elif name == "mark":  # n: the workgroups of the grid
        arrays[0][:n] = arrays[0][:n] + np.uint32(constants[1])
    else:
        raise KeyError(name)


def groups(n: int) -> tuple[int, int, int]:
    """Workgroups covering n elements."""
    return (max(1, -(-n // WORKGROUP)), 1, 1)


def u32(values):
    return np.asarray(values, np.uint32)


# Early launch: `shift` (out[i] = x[i] * 3 + k for i < n) marked early_launch, and the same as `shift_plain`, unmarked.
# CUDA's `shift` lets the kernels after it launch at once and waits for the kernels before it before touching
# memory (griddepcontrol, sm_90 and later; older GPUs compile the plain kernel); the other backends ignore the flag.
EARLY_EXPORTS = (
    hal.Export("shift", bindings=2, constants=2, workgroup_size=WORKGROUP, readonly=(0,), early_launch=True),
    hal.Export("shift_plain", bindings=2, constants=2, workgroup_size=WORKGROUP, readonly=(0,)),
)


def _shift(ctx):
    n, k = ctx.words
    ctx.binding(1, np.uint32)[:n] = ctx.binding(0, np.uint32)[:n] * np.uint32(3) + np.uint32(k)


_EARLY_GLSL = _GLSL_HEAD + """
layout(set = 0, binding = 0) readonly buffer X { uint x[]; };
layout(set = 0, binding = 1) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P { uint n; uint k; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < p.n) y[i] = x[i] * 3u + p.k; }
"""
EARLY_CUDA_CODE = r"""
#if __CUDA_ARCH__ >= 900
#define LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define WAIT_FOR_PREDECESSORS() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define LAUNCH_DEPENDENTS()
#define WAIT_FOR_PREDECESSORS()
#endif
extern "C" __global__ void shift(const unsigned* x, unsigned* y, unsigned n, unsigned k) {
    LAUNCH_DEPENDENTS();
    WAIT_FOR_PREDECESSORS();
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 3u + k;
}
extern "C" __global__ void shift_plain(const unsigned* x, unsigned* y, unsigned n, unsigned k) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 3u + k;
}
"""
EARLY_SOURCE = hal.ExecutableSource.multi(
    host=hal.ExecutableSource.python({"shift": _shift, "shift_plain": _shift}, EARLY_EXPORTS),
    cuda=hal.ExecutableSource.cuda(EARLY_CUDA_CODE, EARLY_EXPORTS),
    vulkan=hal.ExecutableSource.glsl({"shift": _EARLY_GLSL, "shift_plain": _EARLY_GLSL}, EARLY_EXPORTS))
