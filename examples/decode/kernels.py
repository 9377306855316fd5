"""The decoder's kernels, written three times with one meaning: CUDA C (NVRTC), GLSL (glslc) and numpy (the host
backend's ABI). The kernels run workgroups of 64 invocations (attn_softmax and sample: 256); the decode state is
a uint32 buffer:

    state[0] position of the token being forwarded    state[1] steps left (a while region's flag)
    state[2..4] the attention scores' workgroup counts (dispatch_indirect, dynamic)    state[5] prompt length

- start (state; steps, heads): state[1] = steps; the counts for the current position.
- embed (embed, tokens, state, x; dim): x = embed[tokens[position]].
- qkv_rope (qkv, x, gain, rope, state, q, keys, values; dim, head_dim, layer offset): h = RMSNorm(x) * gain, then
  rows (2j, 2j + 1) of qkv @ h per workgroup; q and k pairs rotated by the rope table at the position; q kept,
  k and v written to the cache at the position.
- attn_scores (q, keys, state, scores; dim, head_dim, layer offset, max sequence, scale): workgroups (positions /
  64, heads), counts from the state: scores[h, p] = q_h . k_h[p] * scale for p <= position, each workgroup's
  keys first copied to shared memory, half at a time (reads along rows, head_dim == 64).
- attn_softmax (scores, values, state, out; dim, head_dim, layer offset, max sequence): a workgroup of 256 per head:
  softmax over positions <= position (the exponentials kept in shared memory), then the weighted values, four
  invocations per head dimension each summing a quarter of the positions.
- gemv_add (w, a, x; rows, cols): x += w @ a, rows (2j, 2j + 1) per workgroup.
- swiglu (w1, w3, x, gain, g; ffn, dim): h = RMSNorm(x) * gain; g = SiLU(w1 @ h) * (w3 @ h), a row per workgroup.
- norm_gemv (w, x, gain, y; rows, cols): y = w @ (RMSNorm(x) * gain), rows (2j, 2j + 1) per workgroup.
- sample (logits, state, tokens; vocab, heads): one workgroup: numpy's argmax (the first NaN, else the first index
  of the largest logit) becomes tokens[position + 1] (unless the prompt gives it), the position moves on, the
  steps left drop by one and the counts follow the new position.
"""

from __future__ import annotations

import numpy as np

import hal
from examples.decode.model import EPSILON

WORKGROUP = 64
WIDE_WORKGROUP = 256  # attn_softmax's (four invocations per head dimension) and sample's
MAX_SEQUENCE = 512  # the most positions attn_softmax holds in shared memory

EXPORTS = (
    hal.Export("start", bindings=1, constants=2, workgroup_size=WORKGROUP),
    hal.Export("embed", bindings=4, constants=1, workgroup_size=WORKGROUP, readonly=(0, 1, 2)),
    hal.Export("qkv_rope", bindings=8, constants=3, workgroup_size=WORKGROUP, readonly=(0, 1, 2, 3, 4)),
    hal.Export("attn_scores", bindings=4, constants=5, workgroup_size=WORKGROUP, readonly=(0, 1, 2)),
    hal.Export("attn_softmax", bindings=4, constants=4, workgroup_size=WIDE_WORKGROUP, readonly=(0, 1, 2)),
    hal.Export("gemv_add", bindings=3, constants=2, workgroup_size=WORKGROUP, readonly=(0, 1)),
    hal.Export("swiglu", bindings=5, constants=2, workgroup_size=WORKGROUP, readonly=(0, 1, 2, 3)),
    hal.Export("norm_gemv", bindings=4, constants=2, workgroup_size=WORKGROUP, readonly=(0, 1, 2)),
    hal.Export("sample", bindings=3, constants=2, workgroup_size=WIDE_WORKGROUP, readonly=(0,)),
)

CUDA_CODE = r"""
#define WG 64
#define WIDE_WG {wide_wg}
#define MAX_SEQUENCE {max_sequence}
#define EPSILON {epsilon}
#define NEG_INF __int_as_float(0xff800000)

__device__ float block_sum(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_max(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

__device__ float inverse_rms(const float* x, unsigned n, float* sh) {
    float s = 0.0f;
    for (unsigned c = threadIdx.x; c < n; c += WG) s += x[c] * x[c];
    return 1.0f / sqrtf(block_sum(s, sh) / n + EPSILON);
}

// The dots of the rows `first` and `second` (n floats each) with RMSNorm(x) * gain, summed over the workgroup.
__device__ void normed_rows(const float* first, const float* second, const float* x, const float* gain, unsigned n,
                            float* sh, float* a, float* b) {
    float inv = inverse_rms(x, n, sh), u = 0.0f, v = 0.0f;
    for (unsigned c = threadIdx.x; c < n; c += WG) {
        float h = x[c] * inv * gain[c];
        u += first[c] * h;
        v += second[c] * h;
    }
    *a = block_sum(u, sh);
    *b = block_sum(v, sh);
}

// attn_scores' workgroups (of WG positions each) for the positions up to `position`.
__device__ unsigned groups_for(unsigned position) { return (position + WG) / WG; }

#define NONE 0xffffffffu
// Does logit o at index j come before logit m at index k in numpy's argmax order (the first NaN, else the first
// largest)? NONE: no index yet.
__device__ bool precedes(float o, unsigned j, float m, unsigned k) {
    if (j == NONE) return false;
    if (k == NONE) return true;
    if (isnan(o) != isnan(m)) return isnan(o);
    if (isnan(o)) return j < k;
    return o > m || (o == m && j < k);
}

extern "C" __global__ void start(unsigned* state, unsigned steps, unsigned heads) {
    if (threadIdx.x == 0) {
        state[1] = steps;
        state[2] = groups_for(state[0]);
        state[3] = heads;
        state[4] = 1;
    }
}

extern "C" __global__ void embed(const float* table, const unsigned* tokens, const unsigned* state, float* x,
                                 unsigned dim) {
    unsigned i = blockIdx.x * WG + threadIdx.x;
    if (i < dim) x[i] = table[tokens[state[0]] * dim + i];
}

extern "C" __global__ void qkv_rope(const float* w, const float* x, const float* gain, const float* rope,
                                    const unsigned* state, float* q, float* keys, float* values, unsigned dim,
                                    unsigned head_dim, unsigned layer) {
    __shared__ float sh[WG];
    unsigned r = 2 * blockIdx.x;
    float a, b;
    normed_rows(w + r * dim, w + (r + 1) * dim, x, gain, dim, sh, &a, &b);
    if (threadIdx.x != 0) return;
    unsigned position = state[0];
    if (r < 2 * dim) {
        const float* t = rope + (position * (head_dim / 2) + (r % head_dim) / 2) * 2;
        float ra = a * t[0] - b * t[1], rb = a * t[1] + b * t[0];
        a = ra;
        b = rb;
    }
    if (r < dim) {
        q[r] = a;
        q[r + 1] = b;
    } else {
        float* cache = r < 2 * dim ? keys : values;
        unsigned o = layer + position * dim + r % dim;
        cache[o] = a;
        cache[o + 1] = b;
    }
}

extern "C" __global__ void attn_scores(const float* q, const float* keys, const unsigned* state, float* scores,
                                       unsigned dim, unsigned head_dim, unsigned layer, unsigned max_sequence,
                                       float scale) {
    // Half the workgroup's keys at a time, a row per position (padded: no bank conflicts; 8 KiB, within
    // Vulkan's guaranteed 16 KiB of shared memory).
    __shared__ float tile[WG / 2][WG + 1];
    unsigned first = blockIdx.x * WG, h = blockIdx.y, t = threadIdx.x, length = state[0] + 1;
    const float* qh = q + h * head_dim;
    float acc = 0.0f;
    for (unsigned part = 0; part < 2; ++part) {
        unsigned base = first + part * (WG / 2);
        for (unsigned r = 0; r < WG / 2 && base + r < length; ++r)
            tile[r][t] = keys[layer + (base + r) * dim + h * head_dim + t];
        __syncthreads();
        if (t / (WG / 2) == part && first + t < length)
            for (unsigned i = 0; i < WG; ++i) acc += qh[i] * tile[t % (WG / 2)][i];
        __syncthreads();
    }
    if (first + t < length) scores[h * max_sequence + first + t] = acc * scale;
}

extern "C" __global__ void attn_softmax(const float* scores, const float* values, const unsigned* state, float* out,
                                        unsigned dim, unsigned head_dim, unsigned layer, unsigned max_sequence) {
    __shared__ float sh[WIDE_WG];
    __shared__ float e[MAX_SEQUENCE];  // exp(score - max) per position
    unsigned h = blockIdx.x, t = threadIdx.x, length = state[0] + 1;
    const float* s = scores + h * max_sequence;
    float m = NEG_INF;
    for (unsigned p = t; p < length; p += WIDE_WG) m = fmaxf(m, s[p]);
    m = block_max(m, sh);
    float total = 0.0f;
    for (unsigned p = t; p < length; p += WIDE_WG) {
        e[p] = expf(s[p] - m);
        total += e[p];
    }
    total = block_sum(total, sh);  // (its barriers also publish e)
    // Invocation t sums dimension t % head_dim over the positions p = t / head_dim (mod the parts).
    unsigned d = t % head_dim, part = t / head_dim, parts = WIDE_WG / head_dim;
    const float* v = values + layer + h * head_dim + d;
    float acc = 0.0f;
    for (unsigned p = part; p < length; p += parts) acc += e[p] * v[p * dim];
    sh[t] = acc;
    __syncthreads();
    if (part == 0) {
        for (unsigned k = 1; k < parts; ++k) acc += sh[k * head_dim + d];
        out[h * head_dim + d] = acc / total;
    }
}

extern "C" __global__ void gemv_add(const float* w, const float* a, float* x, unsigned rows, unsigned cols) {
    __shared__ float sh[WG];
    unsigned r = 2 * blockIdx.x;
    float u = 0.0f, v = 0.0f;
    for (unsigned c = threadIdx.x; c < cols; c += WG) {
        u += w[r * cols + c] * a[c];
        v += w[(r + 1) * cols + c] * a[c];
    }
    u = block_sum(u, sh);
    v = block_sum(v, sh);
    if (threadIdx.x == 0) {
        x[r] += u;
        x[r + 1] += v;
    }
}

extern "C" __global__ void swiglu(const float* w1, const float* w3, const float* x, const float* gain, float* g,
                                  unsigned ffn, unsigned dim) {
    __shared__ float sh[WG];
    unsigned r = blockIdx.x;
    float a, b;
    normed_rows(w1 + r * dim, w3 + r * dim, x, gain, dim, sh, &a, &b);
    if (threadIdx.x == 0) g[r] = a / (1.0f + expf(-a)) * b;
}

extern "C" __global__ void norm_gemv(const float* w, const float* x, const float* gain, float* y, unsigned rows,
                                     unsigned cols) {
    __shared__ float sh[WG];
    unsigned r = 2 * blockIdx.x;
    float a, b;
    normed_rows(w + r * cols, w + (r + 1) * cols, x, gain, cols, sh, &a, &b);
    if (threadIdx.x == 0) {
        y[r] = a;
        y[r + 1] = b;
    }
}

extern "C" __global__ void sample(const float* logits, unsigned* state, unsigned* tokens, unsigned vocab,
                                  unsigned heads) {
    __shared__ float best[WIDE_WG];
    __shared__ unsigned at[WIDE_WG];
    unsigned t = threadIdx.x;
    float m = t < vocab ? logits[t] : 0.0f;
    unsigned k = t < vocab ? t : NONE;
    for (unsigned c = t + WIDE_WG; c < vocab; c += WIDE_WG) {  // (indices grow: a tie keeps the first)
        float v = logits[c];
        if (v > m || (isnan(v) && !isnan(m))) { m = v; k = c; }
    }
    best[t] = m;
    at[t] = k;
    __syncthreads();
    for (unsigned s = WIDE_WG / 2; s > 0; s >>= 1) {
        if (t < s && precedes(best[t + s], at[t + s], best[t], at[t])) {
            best[t] = best[t + s];
            at[t] = at[t + s];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        unsigned next = state[0] + 1;
        if (next >= state[5]) tokens[next] = at[0];
        state[0] = next;
        if (state[1] > 0) state[1] -= 1;
        state[2] = groups_for(next);
        state[3] = heads;
        state[4] = 1;
    }
}
""".replace("{epsilon}", repr(EPSILON)).replace("{wide_wg}", str(WIDE_WORKGROUP)).replace(
    "{max_sequence}", str(MAX_SEQUENCE))

def _head(workgroup: int = WORKGROUP) -> str:
    return f"""#version 450
layout(local_size_x = {workgroup}) in;
#define WG {workgroup}u
#define EPSILON {EPSILON!r}
#define INFINITY uintBitsToFloat(0x7f800000u)
"""


_GLSL_HEAD = _head()
_SUM = """
shared float sh[WG];
float block_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    sh[t] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) sh[t] += sh[t + s];
        barrier();
    }
    float r = sh[0];
    barrier();
    return r;
}
"""
_MAX = """
float block_max(float v) {
    uint t = gl_LocalInvocationID.x;
    sh[t] = v;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s) sh[t] = max(sh[t], sh[t + s]);
        barrier();
    }
    float r = sh[0];
    barrier();
    return r;
}
"""


def _normed_rows(first: str, second: str, n: str) -> str:
    """GLSL (after _SUM) of normed_rows: the dots of two rows of n floats, given as the buffer indices `first` and
    `second` of element c, with RMSNorm(x) * gain, summed over the workgroup (a GLSL function cannot take a buffer,
    so each shader gets its own copy, naming its rows)."""
    return f"""
void normed_rows(out float a, out float b) {{
    float s = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < {n}; c += WG) s += x[c] * x[c];
    float inv = 1.0 / sqrt(block_sum(s) / float({n}) + EPSILON), u = 0.0, v = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < {n}; c += WG) {{
        float h = x[c] * inv * gain[c];
        u += {first} * h;
        v += {second} * h;
    }}
    a = block_sum(u);
    b = block_sum(v);
}}
"""


def _buffers(*specs: str) -> str:
    """Storage buffer i of set 0 for each spec "qualifier type name"."""
    out = []
    for i, spec in enumerate(specs):
        qualifier, kind, name = spec.split()
        qualifier = "" if qualifier == "rw" else qualifier
        out.append(f"layout(set = 0, binding = {i}) {qualifier} buffer B{i} {{ {kind} {name}[]; }};\n")
    return "".join(out)


# attn_scores' workgroups (of WORKGROUP positions each, whatever the workgroup of the shader using it).
_GROUPS = f"uint groups_for(uint position) {{ return (position + {WORKGROUP}u) / {WORKGROUP}u; }}\n"

GLSL = {
    "start": _GLSL_HEAD + _buffers("rw uint state") + """
layout(push_constant) uniform P { uint steps; uint heads; } p;
""" + _GROUPS + """
void main() {
    if (gl_LocalInvocationID.x == 0u) {
        state[1] = p.steps; state[2] = groups_for(state[0]); state[3] = p.heads; state[4] = 1u;
    }
}
""",
    "embed": _GLSL_HEAD + _buffers("readonly float table", "readonly uint tokens", "readonly uint state",
                                   "writeonly float x") + """
layout(push_constant) uniform P { uint dim; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.dim) x[i] = table[tokens[state[0]] * p.dim + i];
}
""",
    "qkv_rope": _GLSL_HEAD + _buffers("readonly float w", "readonly float x", "readonly float gain",
                                      "readonly float rope", "readonly uint state", "writeonly float q",
                                      "writeonly float keys", "writeonly float vals") + """
layout(push_constant) uniform P { uint dim; uint head_dim; uint layer; } p;
""" + _SUM + _normed_rows("w[2u * gl_WorkGroupID.x * p.dim + c]", "w[(2u * gl_WorkGroupID.x + 1u) * p.dim + c]",
                           "p.dim") + """
void main() {
    uint r = 2u * gl_WorkGroupID.x;
    float a, b;
    normed_rows(a, b);
    if (gl_LocalInvocationID.x != 0u) return;
    uint position = state[0];
    if (r < 2u * p.dim) {
        uint t = (position * (p.head_dim / 2u) + (r % p.head_dim) / 2u) * 2u;
        float ra = a * rope[t] - b * rope[t + 1u], rb = a * rope[t + 1u] + b * rope[t];
        a = ra;
        b = rb;
    }
    uint o = p.layer + position * p.dim + r % p.dim;
    if (r < p.dim) { q[r] = a; q[r + 1u] = b; }
    else if (r < 2u * p.dim) { keys[o] = a; keys[o + 1u] = b; }
    else { vals[o] = a; vals[o + 1u] = b; }
}
""",
    "attn_scores": _GLSL_HEAD + _buffers("readonly float q", "readonly float keys", "readonly uint state",
                                         "writeonly float scores") + """
layout(push_constant) uniform P { uint dim; uint head_dim; uint layer; uint max_sequence; float scale; } p;
shared float tile[WG / 2u][WG + 1u];
void main() {
    uint first = gl_WorkGroupID.x * WG, h = gl_WorkGroupID.y, t = gl_LocalInvocationID.x, length = state[0] + 1u;
    uint qh = h * p.head_dim;
    float acc = 0.0;
    for (uint part = 0u; part < 2u; ++part) {
        uint base = first + part * (WG / 2u);
        for (uint r = 0u; r < WG / 2u && base + r < length; ++r)
            tile[r][t] = keys[p.layer + (base + r) * p.dim + h * p.head_dim + t];
        barrier();
        if (t / (WG / 2u) == part && first + t < length)
            for (uint i = 0u; i < WG; ++i) acc += q[qh + i] * tile[t % (WG / 2u)][i];
        barrier();
    }
    if (first + t < length) scores[h * p.max_sequence + first + t] = acc * p.scale;
}
""",
    "attn_softmax": _head(WIDE_WORKGROUP) + _buffers("readonly float scores", "readonly float vals",
                                                        "readonly uint state", "writeonly float o") + f"""
layout(push_constant) uniform P {{ uint dim; uint head_dim; uint layer; uint max_sequence; }} p;
shared float e[{MAX_SEQUENCE}];
""" + _SUM + _MAX + """
void main() {
    uint h = gl_WorkGroupID.x, t = gl_LocalInvocationID.x, length = state[0] + 1u, s = h * p.max_sequence;
    float m = -INFINITY;
    for (uint pos = t; pos < length; pos += WG) m = max(m, scores[s + pos]);
    m = block_max(m);
    float total = 0.0;
    for (uint pos = t; pos < length; pos += WG) {
        e[pos] = exp(scores[s + pos] - m);
        total += e[pos];
    }
    total = block_sum(total);
    uint d = t % p.head_dim, part = t / p.head_dim, parts = WG / p.head_dim;
    uint v = p.layer + h * p.head_dim + d;
    float acc = 0.0;
    for (uint pos = part; pos < length; pos += parts) acc += e[pos] * vals[v + pos * p.dim];
    sh[t] = acc;
    barrier();
    if (part == 0u) {
        for (uint k = 1u; k < parts; ++k) acc += sh[k * p.head_dim + d];
        o[h * p.head_dim + d] = acc / total;
    }
}
""",
    "gemv_add": _GLSL_HEAD + _buffers("readonly float w", "readonly float a", "rw float x") + """
layout(push_constant) uniform P { uint rows; uint cols; } p;
""" + _SUM + """
void main() {
    uint r = 2u * gl_WorkGroupID.x;
    float u = 0.0, v = 0.0;
    for (uint c = gl_LocalInvocationID.x; c < p.cols; c += WG) {
        u += w[r * p.cols + c] * a[c];
        v += w[(r + 1u) * p.cols + c] * a[c];
    }
    u = block_sum(u);
    v = block_sum(v);
    if (gl_LocalInvocationID.x == 0u) { x[r] += u; x[r + 1u] += v; }
}
""",
    "swiglu": _GLSL_HEAD + _buffers("readonly float w1", "readonly float w3", "readonly float x",
                                    "readonly float gain", "writeonly float g") + """
layout(push_constant) uniform P { uint ffn; uint dim; } p;
""" + _SUM + _normed_rows("w1[gl_WorkGroupID.x * p.dim + c]", "w3[gl_WorkGroupID.x * p.dim + c]", "p.dim") + """
void main() {
    float a, b;
    normed_rows(a, b);
    if (gl_LocalInvocationID.x == 0u) g[gl_WorkGroupID.x] = a / (1.0 + exp(-a)) * b;
}
""",
    "norm_gemv": _GLSL_HEAD + _buffers("readonly float w", "readonly float x", "readonly float gain",
                                       "writeonly float y") + """
layout(push_constant) uniform P { uint rows; uint cols; } p;
""" + _SUM + _normed_rows("w[2u * gl_WorkGroupID.x * p.cols + c]", "w[(2u * gl_WorkGroupID.x + 1u) * p.cols + c]",
                           "p.cols") + """
void main() {
    uint r = 2u * gl_WorkGroupID.x;
    float a, b;
    normed_rows(a, b);
    if (gl_LocalInvocationID.x == 0u) { y[r] = a; y[r + 1u] = b; }
}
""",
    "sample": _head(WIDE_WORKGROUP) + _buffers("readonly float logits", "rw uint state", "rw uint tokens") + """
layout(push_constant) uniform P { uint vocab; uint heads; } p;
shared float best[WG];
shared uint at[WG];
""" + _GROUPS + """
#define NONE 0xffffffffu
// Does logit o at index j come before logit m at index k in numpy's argmax order (the first NaN, else the first
// largest)? NONE: no index yet.
bool precedes(float o, uint j, float m, uint k) {
    if (j == NONE) return false;
    if (k == NONE) return true;
    if (isnan(o) != isnan(m)) return isnan(o);
    if (isnan(o)) return j < k;
    return o > m || (o == m && j < k);
}
void main() {
    uint t = gl_LocalInvocationID.x;
    float m = t < p.vocab ? logits[t] : 0.0;
    uint k = t < p.vocab ? t : NONE;
    for (uint c = t + WG; c < p.vocab; c += WG) {  // (indices grow: a tie keeps the first)
        float v = logits[c];
        if (v > m || (isnan(v) && !isnan(m))) { m = v; k = c; }
    }
    best[t] = m;
    at[t] = k;
    barrier();
    for (uint s = WG / 2u; s > 0u; s >>= 1u) {
        if (t < s && precedes(best[t + s], at[t + s], best[t], at[t])) { best[t] = best[t + s]; at[t] = at[t + s]; }
        barrier();
    }
    if (t == 0u) {
        uint next = state[0] + 1u;
        if (next >= state[5]) tokens[next] = at[0];
        state[0] = next;
        if (state[1] > 0u) state[1] -= 1u;
        state[2] = groups_for(next); state[3] = p.heads; state[4] = 1u;
    }
}
""",
}


# The host backend: each kernel once for its whole grid, in numpy.
def _rms(x: np.ndarray, gain: np.ndarray) -> np.ndarray:
    inv = np.float32(1.0) / np.sqrt(np.mean(x * x, dtype=np.float32) + np.float32(EPSILON))
    return x * inv * gain


def _counts(state: np.ndarray, heads: int) -> None:
    state[2:5] = ((state[0] + WORKGROUP) // WORKGROUP, heads, 1)


def _start(ctx) -> None:
    state = ctx.binding(0, np.uint32)
    steps, heads = ctx.constants
    state[1] = steps
    _counts(state, heads)


def _embed(ctx) -> None:
    (dim,) = ctx.constants
    token = ctx.binding(1, np.uint32)[ctx.binding(2, np.uint32)[0]]
    ctx.binding(3, np.float32)[:dim] = ctx.binding(0, np.float32)[token * dim:(token + 1) * dim]


def _qkv_rope(ctx) -> None:
    dim, head_dim, layer = ctx.constants
    x, gain, rope = ctx.binding(1, np.float32)[:dim], ctx.binding(2, np.float32)[:dim], ctx.binding(3, np.float32)
    position = int(ctx.binding(4, np.uint32)[0])
    y = ctx.binding(0, np.float32)[:3 * dim * dim].reshape(3 * dim, dim) @ _rms(x, gain)
    pairs = head_dim // 2
    table = rope[position * pairs * 2:(position + 1) * pairs * 2].reshape(pairs, 2)
    qk = y[:2 * dim].reshape(-1, pairs, 2)
    a, b = qk[..., 0].copy(), qk[..., 1].copy()
    qk[..., 0], qk[..., 1] = a * table[:, 0] - b * table[:, 1], a * table[:, 1] + b * table[:, 0]
    ctx.binding(5, np.float32)[:dim] = y[:dim]
    row = layer + position * dim
    ctx.binding(6, np.float32)[row:row + dim] = y[dim:2 * dim]
    ctx.binding(7, np.float32)[row:row + dim] = y[2 * dim:]


def _attn_scores(ctx) -> None:
    dim, head_dim, layer, max_sequence, scale = ctx.constants
    length = min(int(ctx.binding(2, np.uint32)[0]) + 1, ctx.workgroups[0] * WORKGROUP)
    q = ctx.binding(0, np.float32)[:dim]
    keys = ctx.binding(1, np.float32)[layer:layer + length * dim].reshape(length, dim)
    scores = ctx.binding(3, np.float32)
    for h in range(ctx.workgroups[1]):
        part = slice(h * head_dim, (h + 1) * head_dim)
        scores[h * max_sequence:h * max_sequence + length] = keys[:, part] @ q[part] * np.float32(scale)


def _attn_softmax(ctx) -> None:
    dim, head_dim, layer, max_sequence = ctx.constants
    length = int(ctx.binding(2, np.uint32)[0]) + 1
    scores, out = ctx.binding(0, np.float32), ctx.binding(3, np.float32)
    values = ctx.binding(1, np.float32)[layer:layer + length * dim].reshape(length, dim)
    for h in range(ctx.workgroups[0]):
        s = scores[h * max_sequence:h * max_sequence + length]
        p = np.exp(s - s.max())
        out[h * head_dim:(h + 1) * head_dim] = (p / p.sum()) @ values[:, h * head_dim:(h + 1) * head_dim]


def _gemv_add(ctx) -> None:
    rows, cols = ctx.constants
    ctx.binding(2, np.float32)[:rows] += ctx.binding(0, np.float32)[:rows * cols].reshape(rows, cols) @ \
        ctx.binding(1, np.float32)[:cols]


def _swiglu(ctx) -> None:
    ffn, dim = ctx.constants
    h = _rms(ctx.binding(2, np.float32)[:dim], ctx.binding(3, np.float32)[:dim])
    a = ctx.binding(0, np.float32)[:ffn * dim].reshape(ffn, dim) @ h
    b = ctx.binding(1, np.float32)[:ffn * dim].reshape(ffn, dim) @ h
    ctx.binding(4, np.float32)[:ffn] = a / (np.float32(1.0) + np.exp(-a)) * b


def _norm_gemv(ctx) -> None:
    rows, cols = ctx.constants
    h = _rms(ctx.binding(1, np.float32)[:cols], ctx.binding(2, np.float32)[:cols])
    ctx.binding(3, np.float32)[:rows] = ctx.binding(0, np.float32)[:rows * cols].reshape(rows, cols) @ h


def _sample(ctx) -> None:
    vocab, heads = ctx.constants
    state, tokens = ctx.binding(1, np.uint32), ctx.binding(2, np.uint32)
    following = int(state[0]) + 1
    if following >= state[5]:
        tokens[following] = int(np.argmax(ctx.binding(0, np.float32)[:vocab]))
    state[0] = following
    state[1] = max(int(state[1]) - 1, 0)
    _counts(state, heads)


HOST = {"start": _start, "embed": _embed, "qkv_rope": _qkv_rope, "attn_scores": _attn_scores,
        "attn_softmax": _attn_softmax, "gemv_add": _gemv_add, "swiglu": _swiglu, "norm_gemv": _norm_gemv,
        "sample": _sample}

SOURCE = hal.ExecutableSource.multi(host=hal.ExecutableSource.python(HOST, EXPORTS),
                                    cuda=hal.ExecutableSource.cuda(CUDA_CODE, EXPORTS),
                                    vulkan=hal.ExecutableSource.glsl(GLSL, EXPORTS))
