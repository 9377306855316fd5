"""The decoder's kernels in CUDA C (NVRTC), written for Hopper; examples/decode/kernels.py says what each computes.

Every kernel is a few warps working alone: a warp owns whole rows of a matrix-vector product, each lane holding
columns 4l + 128j of a row as 16-byte loads (coalesced: a warp reads 512 contiguous bytes per load), all of a
warp's loads issued before the first is used (the position's too: nothing waits for the state before reading),
and its sums reduced by shuffles; workgroups meet in shared memory only to add up a row split over warps or to
combine pieces of a softmax. So a kernel's time is its launch plus about one trip to memory. RMSNorm is computed
by every warp that needs it, from the 1 KiB vector (cheaper than a kernel of its own). The shape is compiled in
(the #defines `source` writes), so every loop has a constant trip count and unrolls.
"""

from __future__ import annotations

CODE = r"""
#define FULL_MASK 0xffffffffu
#define NEG_INF __int_as_float(0xff800000)
#define NONE 0xffffffffu
#define LANE (threadIdx.x % 32u)
#define WARP (threadIdx.x / 32u)
#define ATTENDED (HEAD_DIM + 2)  // a partial: the chunk's largest score, its sum of exponentials, its weighted values

// Early launch (programmatic dependent launch, sm_90 and later): a step kernel lets the kernels after it launch at
// once, and waits for the kernels before it to end before it touches what they write; only the weights, which
// nothing writes, are read before that. Where the graph's edges are plain, the wait returns at once.
#if __CUDA_ARCH__ >= 900
#define LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define WAIT_FOR_PREDECESSORS() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define LAUNCH_DEPENDENTS()
#define WAIT_FOR_PREDECESSORS()
#endif

__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// N floats of a row, this lane's share: columns 4 * lane + 128 * j as float4s (N a multiple of 128).
template <int N> struct Slice {
    float4 v[N / 128];
    __device__ __forceinline__ void load(const float* row) {
        #pragma unroll
        for (int j = 0; j < N / 128; ++j) v[j] = reinterpret_cast<const float4*>(row)[LANE + 32 * j];
    }
};

// This lane's part of a . b (the warp's sum needs warp_sum).
template <int N> __device__ __forceinline__ float dot(const Slice<N>& a, const Slice<N>& b) {
    float s = 0.0f;
    #pragma unroll
    for (int j = 0; j < N / 128; ++j)
        s += a.v[j].x * b.v[j].x + a.v[j].y * b.v[j].y + a.v[j].z * b.v[j].z + a.v[j].w * b.v[j].w;
    return s;
}

// h = x / sqrt(mean(x * x) + EPSILON) * gain, this lane's columns of x (in h) and gain (in g), as the numpy
// reference rounds it.
__device__ __forceinline__ void rms_norm(Slice<DIM>& h, const Slice<DIM>& g) {
    float s = 0.0f;
    #pragma unroll
    for (int j = 0; j < DIM / 128; ++j)
        s += h.v[j].x * h.v[j].x + h.v[j].y * h.v[j].y + h.v[j].z * h.v[j].z + h.v[j].w * h.v[j].w;
    float inv = 1.0f / sqrtf(warp_sum(s) / DIM + EPSILON);
    #pragma unroll
    for (int j = 0; j < DIM / 128; ++j) {
        h.v[j].x = h.v[j].x * inv * g.v[j].x;
        h.v[j].y = h.v[j].y * inv * g.v[j].y;
        h.v[j].z = h.v[j].z * inv * g.v[j].z;
        h.v[j].w = h.v[j].w * inv * g.v[j].w;
    }
}

// Does logit o at index j come before logit m at index k in numpy's argmax order (the first NaN, else the first
// largest)? NONE: no index yet.
__device__ __forceinline__ bool precedes(float o, unsigned j, float m, unsigned k) {
    if (j == NONE) return false;
    if (k == NONE) return true;
    if (isnan(o) != isnan(m)) return isnan(o);
    if (isnan(o)) return j < k;
    return o > m || (o == m && j < k);
}

__device__ __forceinline__ void warp_argmax(float& m, unsigned& k) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float other = __shfl_xor_sync(FULL_MASK, m, o);
        unsigned at = __shfl_xor_sync(FULL_MASK, k, o);
        if (precedes(other, at, m, k)) { m = other; k = at; }
    }
}

// The first in argmax order of the 8 warps' (m, k), each warp holding its own in every lane: in thread 0.
__device__ __forceinline__ void block_argmax(float& m, unsigned& k, float* best, unsigned* at) {
    if (LANE == 0u) { best[WARP] = m; at[WARP] = k; }
    __syncthreads();
    if (threadIdx.x == 0)
        for (int i = 0; i < 8; ++i)
            if (precedes(best[i], at[i], m, k)) { m = best[i]; k = at[i]; }
}

extern "C" __global__ void __launch_bounds__(256) start(unsigned* state, const unsigned* tokens, const float* embed,
                                                         float* x, unsigned steps) {
    if (threadIdx.x == 0) { state[1] = steps; state[3] = 0u; state[4] = steps >= UNROLL; }
    unsigned token = tokens[state[0]];
    for (unsigned i = threadIdx.x; i < DIM; i += 256u) x[i] = embed[token * DIM + i];
}

// A warp per rotary pair of rows (2p, 2p + 1) of the fused q | k | v projection.
extern "C" __global__ void __launch_bounds__(128) qkv_rope(const float* w, const float* x, const float* gain,
                                                            const float* rope, const unsigned* state, float* q,
                                                            float* keys, float* values) {
    LAUNCH_DEPENDENTS();
    unsigned r = 2u * (blockIdx.x * 4u + WARP);
    Slice<DIM> a, b, h, g;
    a.load(w + r * DIM);
    b.load(w + (r + 1u) * DIM);
    g.load(gain);
    WAIT_FOR_PREDECESSORS();
    unsigned position = state[0];
    h.load(x);
    rms_norm(h, g);
    float u = warp_sum(dot(a, h)), v = warp_sum(dot(b, h));
    if (LANE != 0u) return;
    if (r < 2u * DIM) {  // q and k rotate: pair (r % HEAD_DIM) / 2 of the head, at the position
        const float* t = rope + (position * (HEAD_DIM / 2) + (r % HEAD_DIM) / 2u) * 2u;
        float c = t[0], s = t[1], ru = u * c - v * s, rv = u * s + v * c;
        u = ru;
        v = rv;
    }
    float* out = r < DIM ? q + r : (r < 2u * DIM ? keys : values) + position * DIM + r % DIM;
    out[0] = u;
    out[1] = v;
}

// Grid (CHUNKS, HEADS): the keys of chunk blockIdx.x (CHUNK positions) against head blockIdx.y's query. Each warp
// scores CHUNK / 4 positions, a lane holding HEAD_DIM / 32 dimensions; the four warps' softmax pieces meet in
// shared memory, and the chunk's partial (its largest score, its sum of exponentials, its exponential-weighted
// values) goes to `partials` for attn_out. Every load is issued at once, the position's among them: rows past the
// position are read too (they may hold anything, NaN included) and then left out by selection, never by
// arithmetic; a chunk wholly past the position writes nothing.
#define PER_WARP (CHUNK / 4)
#define LANE_DIMS (HEAD_DIM / 32)
extern "C" __global__ void __launch_bounds__(128) attention(const float* q, const float* keys, const float* values,
                                                             const unsigned* state, float* partials) {
    __shared__ float largest[4], total[4], weighted[4][HEAD_DIM];
    LAUNCH_DEPENDENTS();
    WAIT_FOR_PREDECESSORS();
    unsigned chunk = blockIdx.x, h = blockIdx.y, position = state[0];
    unsigned first = chunk * CHUNK + WARP * PER_WARP, column = h * HEAD_DIM + LANE * LANE_DIMS;
    float qv[LANE_DIMS], k[PER_WARP][LANE_DIMS], v[PER_WARP][LANE_DIMS], score[PER_WARP];
    #pragma unroll
    for (int d = 0; d < LANE_DIMS; ++d) qv[d] = q[column + d];
    #pragma unroll
    for (int i = 0; i < PER_WARP; ++i) {
        unsigned row = min(first + i, MAX_SEQUENCE - 1u);
        #pragma unroll
        for (int d = 0; d < LANE_DIMS; ++d) {
            k[i][d] = keys[row * DIM + column + d];
            v[i][d] = values[row * DIM + column + d];
        }
    }
    float m = NEG_INF;
    #pragma unroll
    for (int i = 0; i < PER_WARP; ++i) {
        float s = 0.0f;
        #pragma unroll
        for (int d = 0; d < LANE_DIMS; ++d) s += qv[d] * k[i][d];
        s = warp_sum(s) * SCALE;
        score[i] = first + i <= position ? s : NEG_INF;
        m = fmaxf(m, score[i]);
    }
    float l = 0.0f, o[LANE_DIMS];
    #pragma unroll
    for (int d = 0; d < LANE_DIMS; ++d) o[d] = 0.0f;
    if (m != NEG_INF) {
        #pragma unroll
        for (int i = 0; i < PER_WARP; ++i) {
            if (first + i > position) continue;
            float e = expf(score[i] - m);
            l += e;
            #pragma unroll
            for (int d = 0; d < LANE_DIMS; ++d) o[d] += e * v[i][d];
        }
    }
    #pragma unroll
    for (int d = 0; d < LANE_DIMS; ++d) weighted[WARP][LANE * LANE_DIMS + d] = o[d];
    if (LANE == 0u) { largest[WARP] = m; total[WARP] = l; }
    __syncthreads();
    if (chunk * CHUNK > position || threadIdx.x >= HEAD_DIM) return;
    float big = fmaxf(fmaxf(largest[0], largest[1]), fmaxf(largest[2], largest[3])), sum = 0.0f, acc = 0.0f;
    #pragma unroll
    for (int w = 0; w < 4; ++w) {  // (warp 0 saw a position, so `big` is a number)
        float scale = largest[w] == NEG_INF ? 0.0f : expf(largest[w] - big);
        sum += total[w] * scale;
        acc += weighted[w][threadIdx.x] * scale;
    }
    float* out = partials + (h * CHUNKS + chunk) * ATTENDED;
    out[2 + threadIdx.x] = acc;
    if (threadIdx.x == 0) { out[0] = big; out[1] = sum; }
}

// x += wo @ attended, a row per warp. Every block first combines the chunks' partials into `attended` (a thread
// per dimension): GROUP chunks' partials loaded at once, before the position says how many there are, the
// group's exponentials independent of one another, groups merged by rescaling (one group up to GROUP * CHUNK
// positions). Launch bounds of one block per SM: registers for a whole group without spilling.
#define GROUP (CHUNKS < 16u ? CHUNKS : 16u)
extern "C" __global__ void __launch_bounds__(256, 1) attn_out(const float* partials, const unsigned* state,
                                                               const float* wo, float* x) {
    __shared__ __align__(16) float attended[DIM];
    LAUNCH_DEPENDENTS();
    unsigned r = blockIdx.x * 8u + WARP;
    Slice<DIM> row, a;
    row.load(wo + r * DIM);
    WAIT_FOR_PREDECESSORS();
    unsigned last = state[0] / CHUNK;  // the last chunk with a partial
    float xr = x[r];
    for (unsigned i = threadIdx.x; i < DIM; i += 256u) {
        const float* p = partials + (i / HEAD_DIM) * CHUNKS * ATTENDED;
        unsigned d = 2u + i % HEAD_DIM, base = 0;
        float big = NEG_INF, sum = 0.0f, acc = 0.0f;
        do {
            float m[GROUP], l[GROUP], o[GROUP], top = NEG_INF, group_sum = 0.0f, group_acc = 0.0f;
            #pragma unroll
            for (unsigned k = 0; k < GROUP; ++k) {
                unsigned c = min(base + k, CHUNKS - 1u);
                m[k] = p[c * ATTENDED];
                l[k] = p[c * ATTENDED + 1u];
                o[k] = p[c * ATTENDED + d];
            }
            #pragma unroll
            for (unsigned k = 0; k < GROUP; ++k)
                if (base + k <= last) top = fmaxf(top, m[k]);
            #pragma unroll
            for (unsigned k = 0; k < GROUP; ++k)
                if (base + k <= last) {
                    float e = expf(m[k] - top);
                    group_sum += l[k] * e;
                    group_acc += o[k] * e;
                }
            float larger = fmaxf(big, top), before = expf(big - larger), now = expf(top - larger);
            sum = sum * before + group_sum * now;
            acc = acc * before + group_acc * now;
            big = larger;
            base += GROUP;
        } while (base <= last);
        attended[i] = acc / sum;
    }
    __syncthreads();
    a.load(attended);
    float u = warp_sum(dot(row, a));
    if (LANE == 0u) x[r] = xr + u;
}

// g = SiLU(w1 @ h) * (w3 @ h), h = RMSNorm(x) * gain: a row of w1 and of w3 per warp.
extern "C" __global__ void __launch_bounds__(256) ffn_in(const float* w1, const float* w3, const float* x,
                                                          const float* gain, float* g) {
    LAUNCH_DEPENDENTS();
    unsigned r = blockIdx.x * 8u + WARP;
    Slice<DIM> a, b, h, n;
    a.load(w1 + r * DIM);
    b.load(w3 + r * DIM);
    n.load(gain);
    WAIT_FOR_PREDECESSORS();
    h.load(x);
    rms_norm(h, n);
    float u = warp_sum(dot(a, h)), v = warp_sum(dot(b, h));
    if (LANE == 0u) g[r] = u / (1.0f + expf(-u)) * v;
}

// x += w2 @ g: SPLIT warps per row (FFN / SPLIT columns each), 8 / SPLIT rows per block, summed in shared memory.
extern "C" __global__ void __launch_bounds__(256) ffn_out(const float* w2, const float* g, float* x) {
    __shared__ float part[8];
    LAUNCH_DEPENDENTS();
    unsigned r = blockIdx.x * (8u / SPLIT) + WARP / SPLIT, span = (WARP % SPLIT) * (FFN / SPLIT);
    Slice<FFN / SPLIT> row, a;
    row.load(w2 + r * FFN + span);
    WAIT_FOR_PREDECESSORS();
    float xr = threadIdx.x < 8u / SPLIT ? x[blockIdx.x * (8u / SPLIT) + threadIdx.x] : 0.0f;
    a.load(g + span);
    float u = warp_sum(dot(row, a));
    if (LANE == 0u) part[WARP] = u;
    __syncthreads();
    if (threadIdx.x < 8u / SPLIT) {
        float s = 0.0f;
        #pragma unroll
        for (int k = 0; k < SPLIT; ++k) s += part[threadIdx.x * SPLIT + k];
        x[blockIdx.x * (8u / SPLIT) + threadIdx.x] = xr + s;
    }
}

// logits = output @ (RMSNorm(x) * gain), LOGIT_ROWS rows per warp, then numpy's argmax: each block's best goes to
// `candidates`; the last block to finish (a counter in state[3]) picks among them, sets the next token (unless the
// prompt gives it), moves the position on, counts the step, and writes the next token's embedding into x (every
// other block has read x by then). Fewer, fuller blocks than the other kernels: each block's count is an atomic
// on one word.
#define LOGIT_ROWS 4u
extern "C" __global__ void __launch_bounds__(256) logits_argmax(const float* w, float* x, const float* gain,
                                                                 float* logits, unsigned* candidates,
                                                                 unsigned* state, unsigned* tokens,
                                                                 const float* embed) {
    __shared__ float best[8];
    __shared__ unsigned at[8], chosen;
    __shared__ bool last;
    LAUNCH_DEPENDENTS();
    unsigned r = LOGIT_ROWS * (blockIdx.x * 8u + WARP), next = 0, left = 0, forced = NONE;
    Slice<DIM> rows[LOGIT_ROWS], h, g;
    #pragma unroll
    for (unsigned k = 0; k < LOGIT_ROWS; ++k) rows[k].load(w + (r + k) * DIM);
    g.load(gain);
    WAIT_FOR_PREDECESSORS();
    if (threadIdx.x == 0) {  // what the last block needs of the state, read while x is
        next = state[0] + 1u;
        left = state[1];
        if (next < state[2]) forced = tokens[next];
    }
    h.load(x);
    rms_norm(h, g);
    float m = 0.0f;
    unsigned k = NONE;
    #pragma unroll
    for (unsigned i = 0; i < LOGIT_ROWS; ++i) {
        float u = warp_sum(dot(rows[i], h));
        if (LANE == 0u) logits[r + i] = u;
        if (precedes(u, r + i, m, k)) { m = u; k = r + i; }
    }
    block_argmax(m, k, best, at);
    if (threadIdx.x == 0) {
        candidates[2u * blockIdx.x] = __float_as_uint(m);
        candidates[2u * blockIdx.x + 1u] = k;
        __threadfence();  // the candidate is visible before the count says so
        last = atomicAdd(&state[3], 1u) == gridDim.x - 1u;
    }
    __syncthreads();
    if (!last) return;
    m = 0.0f;
    k = NONE;
    for (unsigned i = threadIdx.x; i < gridDim.x; i += 256u) {
        float o = __uint_as_float(__ldcg(candidates + 2u * i));
        unsigned j = __ldcg(candidates + 2u * i + 1u);
        if (precedes(o, j, m, k)) { m = o; k = j; }
    }
    warp_argmax(m, k);
    block_argmax(m, k, best, at);
    if (threadIdx.x == 0) {
        chosen = forced == NONE ? k : forced;
        tokens[next] = chosen;
        left = left > 0u ? left - 1u : 0u;
        state[0] = next;
        state[1] = left;
        state[3] = 0u;
        state[4] = left >= UNROLL;
    }
    __syncthreads();
    for (unsigned i = threadIdx.x; i < DIM; i += 256u) x[i] = embed[chosen * DIM + i];
}
"""
