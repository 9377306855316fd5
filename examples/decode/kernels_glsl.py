"""The decoder's kernels in GLSL (glslc), one shader per export, the same work split as the CUDA kernels.

A "warp" here is 32 consecutive invocations, as in kernels_cuda.py, so the grids and workgroup sizes are the same
on both; its sums go through shared memory (a tree of barriers) rather than shuffles, since a Vulkan device's
subgroups may be narrower than 32 (lavapipe's are 8 wide). Matrices and the vectors loaded as a row's slice are
read as vec4s (16-byte loads).
"""

from __future__ import annotations

_COMMON = """
#define LANE (gl_LocalInvocationID.x % 32u)
#define WARP (gl_LocalInvocationID.x / 32u)
#define SLICE (DIM / 128u)
#define NEG_INF uintBitsToFloat(0xff800000u)
#define NONE 0xffffffffu
#define ATTENDED (HEAD_DIM + 2u)
#define LOGIT_ROWS 4u
"""

# The sum over this invocation's warp, in every invocation of it (every invocation of the workgroup calls it).
_WARP_SUM = """
shared float reduced[WG];
float warp_sum(float v) {
    uint t = gl_LocalInvocationID.x;
    reduced[t] = v;
    barrier();
    for (uint s = 16u; s > 0u; s >>= 1u) {
        if (LANE < s) reduced[t] += reduced[t + s];
        barrier();
    }
    float r = reduced[t - LANE];
    barrier();
    return r;
}
"""

# h = x / sqrt(mean(x * x) + EPSILON) * gain, this invocation's columns (4 * lane + 128 * j, as vec4 j); x is
# NORM_INPUT's vec4s from `base` (binding x unless the shader says otherwise).
_RMS_NORM = """
#ifndef NORM_INPUT
#define NORM_INPUT x
#endif
void rms_norm(out vec4 h[SLICE], uint base) {
    float s = 0.0;
    for (uint j = 0u; j < SLICE; ++j) {
        h[j] = NORM_INPUT[base + LANE + 32u * j];
        s += h[j].x * h[j].x + h[j].y * h[j].y + h[j].z * h[j].z + h[j].w * h[j].w;
    }
    float inv = 1.0 / sqrt(warp_sum(s) / float(DIM) + EPSILON);
    for (uint j = 0u; j < SLICE; ++j) h[j] = h[j] * inv * gain[LANE + 32u * j];
}
float dot_slice(vec4 a[SLICE], vec4 b[SLICE]) {
    float s = 0.0;
    for (uint j = 0u; j < SLICE; ++j) s += a[j].x * b[j].x + a[j].y * b[j].y + a[j].z * b[j].z + a[j].w * b[j].w;
    return s;
}
"""

# The argmax key of logit v at `index` (examples/decode/state.py): integer order is numpy's argmax order (the first
# NaN, else the first largest; -0 as +0), so the logits' workgroups pick with one atomic max. The token a key names
# needs only its low word: state[6].
_ARGMAX_KEY = """
uint64_t argmax_key(float v, uint index) {
    uint bits = floatBitsToUint(v);
    bits = bits == 0x80000000u ? 0u : bits;  // -0 as +0 (in integers: a compiler may fold v == 0.0 ? 0.0 : v)
    uint order = isnan(v) ? 0xffffffffu : ((bits & 0x80000000u) != 0u ? ~bits : bits | 0x80000000u);
    return (uint64_t(order) << 31) | uint64_t(0x7fffffffu - index);
}
"""
# The steps left and the flags of the loops that run LONG_LOOP and SHORT_LOOP steps an iteration (binding `state`).
_COUNT_STEPS = """
void count_steps(uint left) {
    state[1] = left;
    state[4] = left >= LONG_LOOP ? 1u : 0u;
    state[5] = left >= SHORT_LOOP ? 1u : 0u;
}
"""
_INT64_ATOMICS = """#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_atomic_int64 : require
"""


def _buffers(*specs: str, first: int = 0) -> str:
    """Storage buffer first + i of set 0 for each spec "qualifier type name" (qualifier rw: none)."""
    out = []
    for i, spec in enumerate(specs, first):
        qualifier, kind, name = spec.split()
        qualifier = "" if qualifier == "rw" else qualifier
        out.append(f"layout(set = 0, binding = {i}) {qualifier} buffer B{i} {{ {kind} {name}[]; }};\n")
    return "".join(out)


def _shader(workgroup: int, *parts: str, extensions: str = "") -> str:
    """A shader's text after its #version and shape lines (see `shaders`), its #extension lines first."""
    return extensions + f"#define WG {workgroup}u\nlayout(local_size_x = {workgroup}) in;\n" + _COMMON + "".join(parts)


def shaders(shape: str) -> dict[str, str]:
    """Each export's GLSL, `shape` (the #define lines of the model's sizes) compiled in."""
    return {name: "#version 450\n" + shape + text for name, text in _SHADERS.items()}


# A warp per rotary pair of rows of the fused q | k | v projection. The step's first kernel (EMBED) projects the
# embedding of the token at the position, the prompt's (state[3]) or the last logits' pick (the key's low word), which
# workgroup 0 writes to tokens, with the embedding to x (the residual attn_out reads).
_QKV_ROPE = """
void main() {
    uint r = 2u * (gl_WorkGroupID.x * 4u + WARP), position = state[0], base = 0u;
#ifdef EMBED
    uint given = state[3], token = given != NONE ? given : 0x7fffffffu - (state[6] & 0x7fffffffu);
    base = token * (DIM / 4u);
    if (gl_WorkGroupID.x == 0u) {
        if (gl_LocalInvocationID.x == 0u && given == NONE) tokens[position] = token;
        for (uint i = gl_LocalInvocationID.x; i < DIM / 4u; i += WG) x[i] = embed[base + i];
    }
#endif
    vec4 a[SLICE], b[SLICE], h[SLICE];
    for (uint j = 0u; j < SLICE; ++j) {
        a[j] = w[r * (DIM / 4u) + LANE + 32u * j];
        b[j] = w[(r + 1u) * (DIM / 4u) + LANE + 32u * j];
    }
    rms_norm(h, base);
    float u = warp_sum(dot_slice(a, h)), v = warp_sum(dot_slice(b, h));
    if (LANE != 0u) return;
    if (r < 2u * DIM) {
        uint t = (position * (HEAD_DIM / 2u) + (r % HEAD_DIM) / 2u) * 2u;
        float c = rope[t], s = rope[t + 1u], ru = u * c - v * s, rv = u * s + v * c;
        u = ru;
        v = rv;
    }
    uint o = position * DIM + r % DIM;
    if (r < DIM) { q[r] = u; q[r + 1u] = v; }
    else if (r < 2u * DIM) { keys[o] = u; keys[o + 1u] = v; }
    else { vals[o] = u; vals[o + 1u] = v; }
}
"""

_SHADERS = {
    "start": _shader(32, _buffers("rw uint state", "readonly uint tokens"), _COUNT_STEPS, """
layout(push_constant) uniform P { uint steps; } p;
void main() {
    if (gl_LocalInvocationID.x != 0u) return;
    uint position = state[0];
    state[3] = position < state[2] ? tokens[position] : NONE;
    count_steps(p.steps);
}
"""),
    "embed_qkv_rope": _shader(128, "#define EMBED\n#define NORM_INPUT embed\n",
                              _buffers("readonly vec4 w", "writeonly vec4 x", "readonly vec4 gain",
                                       "readonly float rope", "readonly uint state", "writeonly float q",
                                       "writeonly float keys", "writeonly float vals", "writeonly uint tokens",
                                       "readonly vec4 embed"),
                              _WARP_SUM, _RMS_NORM, _QKV_ROPE),
    "qkv_rope": _shader(128, _buffers("readonly vec4 w", "readonly vec4 x", "readonly vec4 gain",
                                      "readonly float rope", "readonly uint state", "writeonly float q",
                                      "writeonly float keys", "writeonly float vals"), _WARP_SUM, _RMS_NORM, _QKV_ROPE),
    "attention": _shader(128, _buffers("readonly float q", "readonly float keys", "readonly float vals",
                                       "rw uint state", "writeonly float partials"), """
#define PER_WARP (CHUNK / 4u)
#define LANE_DIMS (HEAD_DIM / 32u)
shared float scored[PER_WARP][WG];
shared float largest[4], total[4], weighted[4][HEAD_DIM];
void main() {
    uint chunk = gl_WorkGroupID.x, h = gl_WorkGroupID.y, position = state[0], t = gl_LocalInvocationID.x;
    if (chunk == 0u && h == 0u && t == 0u) { state[6] = 0u; state[7] = 0u; }  // the key, read by the step's first
    if (chunk * CHUNK > position) return;
    uint first = chunk * CHUNK + WARP * PER_WARP, column = h * HEAD_DIM + LANE * LANE_DIMS;
    for (uint i = 0u; i < PER_WARP; ++i) {
        float s = 0.0;
        if (first + i <= position)  // (rows past it may hold anything, NaN included: never read)
            for (uint d = 0u; d < LANE_DIMS; ++d) s += q[column + d] * keys[(first + i) * DIM + column + d];
        scored[i][t] = s;
    }
    barrier();
    for (uint s = 16u; s > 0u; s >>= 1u) {
        if (LANE < s)
            for (uint i = 0u; i < PER_WARP; ++i) scored[i][t] += scored[i][t + s];
        barrier();
    }
    float score[PER_WARP], m = NEG_INF;
    for (uint i = 0u; i < PER_WARP; ++i) {
        score[i] = first + i <= position ? scored[i][t - LANE] * SCALE : NEG_INF;
        m = max(m, score[i]);
    }
    float l = 0.0, o[LANE_DIMS];
    for (uint d = 0u; d < LANE_DIMS; ++d) o[d] = 0.0;
    if (m != NEG_INF) {
        for (uint i = 0u; i < PER_WARP; ++i) {
            if (first + i > position) continue;
            float e = exp(score[i] - m);
            l += e;
            for (uint d = 0u; d < LANE_DIMS; ++d) o[d] += e * vals[(first + i) * DIM + column + d];
        }
    }
    for (uint d = 0u; d < LANE_DIMS; ++d) weighted[WARP][LANE * LANE_DIMS + d] = o[d];
    if (LANE == 0u) { largest[WARP] = m; total[WARP] = l; }
    barrier();
    if (t >= HEAD_DIM) return;
    float big = max(max(largest[0], largest[1]), max(largest[2], largest[3])), sum = 0.0, acc = 0.0;
    for (uint w = 0u; w < 4u; ++w) {  // (warp 0 always saw a position, so `big` is a number)
        float scale = largest[w] == NEG_INF ? 0.0 : exp(largest[w] - big);
        sum += total[w] * scale;
        acc += weighted[w][t] * scale;
    }
    uint part = (h * CHUNKS + chunk) * ATTENDED;
    partials[part + 2u + t] = acc;
    if (t == 0u) { partials[part] = big; partials[part + 1u] = sum; }
}
"""),
    "attn_out": _shader(256, _buffers("readonly float partials", "readonly uint state", "readonly vec4 wo",
                                      "rw float x"), _WARP_SUM, """
shared vec4 attended[DIM / 4u];
void main() {
    uint t = gl_LocalInvocationID.x, r = gl_WorkGroupID.x * 8u + WARP, chunks = state[0] / CHUNK + 1u;
    for (uint i = t; i < DIM; i += WG) {
        uint p = (i / HEAD_DIM) * CHUNKS * ATTENDED;
        float big = NEG_INF, sum = 0.0, acc = 0.0;
        for (uint c = 0u; c < chunks; ++c) big = max(big, partials[p + c * ATTENDED]);
        for (uint c = 0u; c < chunks; ++c) {
            float scale = exp(partials[p + c * ATTENDED] - big);
            sum += partials[p + c * ATTENDED + 1u] * scale;
            acc += partials[p + c * ATTENDED + 2u + i % HEAD_DIM] * scale;
        }
        attended[i / 4u][i % 4u] = acc / sum;
    }
    barrier();
    float u = 0.0;
    for (uint j = 0u; j < SLICE; ++j) {
        vec4 a = attended[LANE + 32u * j], row = wo[r * (DIM / 4u) + LANE + 32u * j];
        u += row.x * a.x + row.y * a.y + row.z * a.z + row.w * a.w;
    }
    u = warp_sum(u);
    if (LANE == 0u) x[r] += u;
}
"""),
    "ffn_in": _shader(256, _buffers("readonly vec4 w1", "readonly vec4 w3", "readonly vec4 x", "readonly vec4 gain",
                                    "writeonly float g"), _WARP_SUM, _RMS_NORM, """
void main() {
    uint r = gl_WorkGroupID.x * 8u + WARP;
    vec4 a[SLICE], b[SLICE], h[SLICE];
    for (uint j = 0u; j < SLICE; ++j) {
        a[j] = w1[r * (DIM / 4u) + LANE + 32u * j];
        b[j] = w3[r * (DIM / 4u) + LANE + 32u * j];
    }
    rms_norm(h, 0u);
    float u = warp_sum(dot_slice(a, h)), v = warp_sum(dot_slice(b, h));
    if (LANE == 0u) g[r] = u / (1.0 + exp(-u)) * v;
}
"""),
    "ffn_out": _shader(256, _buffers("readonly vec4 w2", "readonly vec4 g", "rw float x"), _WARP_SUM, """
shared float part[8];
void main() {
    uint t = gl_LocalInvocationID.x, r = gl_WorkGroupID.x * (8u / SPLIT) + WARP / SPLIT;
    uint span = (WARP % SPLIT) * (FFN / SPLIT / 4u);
    float u = 0.0;
    for (uint j = 0u; j < FFN / SPLIT / 128u; ++j) {
        vec4 row = w2[r * (FFN / 4u) + span + LANE + 32u * j], a = g[span + LANE + 32u * j];
        u += row.x * a.x + row.y * a.y + row.z * a.z + row.w * a.w;
    }
    u = warp_sum(u);
    if (LANE == 0u) part[WARP] = u;
    barrier();
    if (t < 8u / SPLIT) {
        float s = 0.0;
        for (uint k = 0u; k < SPLIT; ++k) s += part[t * SPLIT + k];
        x[gl_WorkGroupID.x * (8u / SPLIT) + t] += s;
    }
}
"""),
    # Each workgroup raises the key by its rows' largest (one atomic max); workgroup 0 moves the position on, takes
    # the prompt's token there (if any) into state[3] and counts the step.
    "logits_argmax": _shader(256, _buffers("readonly vec4 w", "readonly vec4 x", "readonly vec4 gain",
                                           "writeonly float logits"),
                             "layout(set = 0, binding = 4) buffer B4 { uint state[6]; uint64_t key; };\n",
                             _buffers("readonly uint tokens", first=5), _WARP_SUM, _RMS_NORM, _ARGMAX_KEY,
                             _COUNT_STEPS, """
shared uint64_t best[8];
void main() {
    uint t = gl_LocalInvocationID.x, r = LOGIT_ROWS * (gl_WorkGroupID.x * 8u + WARP);
    vec4 rows[LOGIT_ROWS][SLICE], h[SLICE];
    for (uint k = 0u; k < LOGIT_ROWS; ++k)
        for (uint j = 0u; j < SLICE; ++j) rows[k][j] = w[(r + k) * (DIM / 4u) + LANE + 32u * j];
    rms_norm(h, 0u);
    uint64_t k = 0ul;
    for (uint i = 0u; i < LOGIT_ROWS; ++i) {
        float u = warp_sum(dot_slice(rows[i], h));
        if (LANE == 0u) logits[r + i] = u;
        k = max(k, argmax_key(u, r + i));
    }
    if (LANE == 0u) best[WARP] = k;
    barrier();
    if (t != 0u) return;
    for (uint i = 1u; i < 8u; ++i) k = max(k, best[i]);
    atomicMax(key, k);
    if (gl_WorkGroupID.x == 0u) {
        uint next = state[0] + 1u;
        state[3] = next < state[2] ? tokens[next] : NONE;
        state[0] = next;
        count_steps(state[1] > 0u ? state[1] - 1u : 0u);
    }
}
""", extensions=_INT64_ATOMICS),
}
