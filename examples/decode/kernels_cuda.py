"""The decoder's kernels in CUDA C (NVRTC), written for Hopper; examples/decode/kernels.py says what each computes.

Every kernel is a few warps working alone: a warp owns whole rows of a matrix-vector product, each lane holding
columns 4l + 128j of a row as 16-byte loads (coalesced: a warp reads 512 contiguous bytes per load), all of a
warp's loads issued before the first is used (in a model wider than 512, 512 columns at a time: PART), and its
sums reduced by shuffles; warps meet in shared memory only to add up a row split over warps or to combine pieces of
a softmax, and workgroups meet only in the attention wider than 256 (COMBINED: kernels.combined), whose workgroups
count their arrival a head so that the head's last combines its chunks once. With early launch a kernel loads its
weights, and whatever the kernels two or more back wrote, while the kernel before it runs; after its wait it makes
one trip to memory for what that kernel wrote. RMSNorm is computed by every warp that needs it, from the 1 KiB
vector (cheaper than a kernel of its own), its sum reduced beside the products'. The shape is compiled in (the
#defines `source` writes), so every loop has a constant trip count and unrolls. Split over ranks (model.shard), a
kernel works on its rank's part: ATTN of the attention's DIM columns (LOCAL_HEADS heads), LOCAL_FFN of the hidden
units; attn_out and ffn_out then leave their rank's part of a sum in x, the residual added by rank 0 alone
(RESIDUAL), for the all_reduce after them.
"""

from __future__ import annotations

CODE = r"""
#define FULL_MASK 0xffffffffu
#define NEG_INF __int_as_float(0xff800000)
#define NONE 0xffffffffu
#define LANE (threadIdx.x % 32u)
#define WARP (threadIdx.x / 32u)
#define ATTENDED (HEAD_DIM + 2)  // a partial: the chunk's largest score, its sum of exponentials, its weighted values

// A timeline (bench/decode_timeline.py; kernels.source(..., stamps=address)): thread 0 of block (0, 0) of each
// kernel stamps %globaltimer at its entry, when its wait returns and at its exit, in a record at STAMPS (a device
// address: STAMP_HEADER_WORDS, a count and words unused, then STAMP_CAPACITY records of 4 words, the kernel's KIND
// and the three stamps) taken by an atomic count, so in launch order. Without STAMPS, nothing.
#ifdef STAMPS
struct Stamp {
    unsigned long long* record = nullptr;
    __device__ static unsigned long long now() {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        return t;
    }
    __device__ explicit Stamp(unsigned kind) {
        if (blockIdx.x != 0u || blockIdx.y != 0u || threadIdx.x != 0u) return;
        unsigned long long t = now(), i = atomicAdd(reinterpret_cast<unsigned long long*>(STAMPS), 1ull);
        if (i >= STAMP_CAPACITY) return;
        record = reinterpret_cast<unsigned long long*>(STAMPS) + STAMP_HEADER_WORDS + 4u * i;
        record[0] = kind;
        record[1] = record[2] = t;  // (a kernel without a wait: its entry)
    }
    __device__ void waited() { if (record) record[2] = now(); }
    __device__ ~Stamp() { if (record) record[3] = now(); }
};
#define STAMP(kind) Stamp stamp_(kind)
#define STAMP_WAITED() stamp_.waited()
#else
#define STAMP(kind)
#define STAMP_WAITED()
#endif

// Early launch (programmatic dependent launch, sm_90 and later). A step kernel waits for the kernels before it to end
// before it touches what the kernel just before it wrote, and only then lets the kernels after it launch
// (AFTER_PREDECESSORS). So a step kernel launches only once the kernel before it has passed its wait, that is once
// every kernel two or more back has ended and its writes are visible: what those wrote (the state, the cache's
// earlier rows, x where the kernel just before did not write it) is read before the wait, through L2 (__ldcg: no
// stale line in the SM's L1), as the weights, which nothing writes, are. But ffn_out lets the kernel after it launch
// at its entry: qkv_rope and the logits, which read before their wait only the state, the prompt and what nothing
// writes, so their weights stream in while ffn_in still runs (the logits' 4 MB are bound by bandwidth, and
// qkv_rope's rope pair hangs on the position). That holds while ffn_in and attn_out wait before they let the next
// launch: then what the kernel after ffn_out reads before its wait was written three or more kernels back. Where
// the graph's edges are plain, every kernel before has ended at launch and the wait returns at once. Split over
// ranks, the all_reduce after attn_out and after ffn_out is a kernel that waits before it lets the next launch too
// (backends/cuda_graph/peer_all_reduce.py), so the next kernel loads its weights while the ranks exchange.
#if __CUDA_ARCH__ >= 900
#define LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define WAIT_FOR_PREDECESSORS() asm volatile("griddepcontrol.wait;" ::: "memory"); STAMP_WAITED()
#else
#define LAUNCH_DEPENDENTS()
#define WAIT_FOR_PREDECESSORS() STAMP_WAITED()
#endif
#define AFTER_PREDECESSORS() WAIT_FOR_PREDECESSORS(); LAUNCH_DEPENDENTS()

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
    __device__ __forceinline__ void store(float* row) const {
        #pragma unroll
        for (int j = 0; j < N / 128; ++j) reinterpret_cast<float4*>(row)[LANE + 32 * j] = v[j];
    }
};

// A row of DIM floats is held PART columns at a time: whole in a small model; in a wide one (DIM above 512) its
// first PART columns are loaded before the wait and the rest streamed after it, a part at a time, so that a warp's
// rows never spill out of its registers.
#define PART (DIM < 512u ? DIM : 512u)
#define PARTS (DIM / PART)

// This lane's part of a . b (the warp's sum needs warp_sum).
template <int N> __device__ __forceinline__ float dot(const Slice<N>& a, const Slice<N>& b) {
    float s = 0.0f;
    #pragma unroll
    for (int j = 0; j < N / 128; ++j)
        s += a.v[j].x * b.v[j].x + a.v[j].y * b.v[j].y + a.v[j].z * b.v[j].z + a.v[j].w * b.v[j].w;
    return s;
}

// This lane's parts, over one part of the columns, of sum(x * x) and of each row . (x * gain), added to `squares` and
// `out`.
template <int ROWS> __device__ __forceinline__ void add_part(const Slice<PART> (&w)[ROWS], const Slice<PART>& x,
                                                             const Slice<PART>& gain, float& squares,
                                                             float (&out)[ROWS]) {
    Slice<PART> xg;
    #pragma unroll
    for (int j = 0; j < PART / 128; ++j) {
        const float4 v = x.v[j], g = gain.v[j];
        squares += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        xg.v[j] = make_float4(v.x * g.x, v.y * g.y, v.z * g.z, v.w * g.w);
    }
    #pragma unroll
    for (int i = 0; i < ROWS; ++i) out[i] += dot(w[i], xg);
}

// A warp's rows of W @ (RMSNorm(x) * gain), x / sqrt(mean(x * x) + EPSILON) * gain: `w`, `x` and `gain` hold the
// first part of the rows (`row[i]`), of x (`xs`) and of the gain (`gains`); the other parts are loaded here. Each
// lane's parts of sum(x * x) and of each row . (x * gain) are reduced at once (independent shuffles), then scaled by
// the norm.
template <int ROWS> __device__ __forceinline__ void normed_dots(const Slice<PART> (&w)[ROWS], const Slice<PART>& x,
                                                                const Slice<PART>& gain,
                                                                const float* const (&row)[ROWS], const float* xs,
                                                                const float* gains, float (&out)[ROWS]) {
    float squares = 0.0f;
    #pragma unroll
    for (int i = 0; i < ROWS; ++i) out[i] = 0.0f;
    add_part(w, x, gain, squares, out);
    #pragma unroll 1
    for (unsigned p = 1; p < PARTS; ++p) {
        Slice<PART> wp[ROWS], xp, gp;
        #pragma unroll
        for (int i = 0; i < ROWS; ++i) wp[i].load(row[i] + p * PART);
        xp.load(xs + p * PART);
        gp.load(gains + p * PART);
        add_part(wp, xp, gp, squares, out);
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        squares += __shfl_xor_sync(FULL_MASK, squares, o);
        #pragma unroll
        for (int i = 0; i < ROWS; ++i) out[i] += __shfl_xor_sync(FULL_MASK, out[i], o);
    }
    const float inv = 1.0f / sqrtf(squares / DIM + EPSILON);
    #pragma unroll
    for (int i = 0; i < ROWS; ++i) out[i] *= inv;
}

// The argmax key of logit v at `index` (examples/decode/state.py): integer order is numpy's argmax order (the first
// NaN, else the first largest; -0 as +0), so the step's pick is one atomic max into the state's key (KEY), which the
// next step's first kernel reads and attention clears.
#define KEY(state) reinterpret_cast<unsigned long long*>((state) + 6)
__device__ __forceinline__ unsigned long long argmax_key(float v, unsigned index) {
    const unsigned bits = __float_as_uint(v == 0.0f ? 0.0f : v);
    const unsigned order = isnan(v) ? 0xffffffffu : (bits & 0x80000000u ? ~bits : bits | 0x80000000u);
    return (static_cast<unsigned long long>(order) << 31) | (0x7fffffffu - index);
}

// The token a key names, from its low word (state[6]).
__device__ __forceinline__ unsigned chosen_token(unsigned low) { return 0x7fffffffu - (low & 0x7fffffffu); }

// The steps left and the flags of the loops that run LONG_LOOP and SHORT_LOOP steps an iteration.
__device__ __forceinline__ void count_steps(unsigned* state, unsigned left) {
    state[1] = left;
    state[4] = left >= LONG_LOOP;
    state[5] = left >= SHORT_LOOP;
}

extern "C" __global__ void __launch_bounds__(32) start(unsigned* state, const unsigned* tokens, unsigned steps) {
    STAMP(KIND_START);
    if (threadIdx.x != 0) return;
    const unsigned position = state[0];
    state[3] = position < state[2] ? tokens[position] : NONE;
    count_steps(state, steps);
}

// The cosine and sine that rotate the pair of rows r at `position`, if it is q's or k's: pair (r % HEAD_DIM) / 2 of
// its head (the rows of v do not rotate).
__device__ __forceinline__ void rope_pair(const float* rope, unsigned position, unsigned r, float& c, float& s) {
    c = 1.0f;
    s = 0.0f;
    if (r < 2u * ATTN) {
        const float* t = rope + (position * (HEAD_DIM / 2) + (r % HEAD_DIM) / 2u) * 2u;
        c = t[0];
        s = t[1];
    }
}

// A warp per rotary pair of rows (2p, 2p + 1) of the fused q | k | v projection. The position, and the rope table's
// pair at it, are read before the wait (the logits that moved it on are many kernels back), but for the
// step's first kernel (EMBED), which follows the logits: it reads them after, and projects the embedding of the token
// at the position: the prompt's (state[3]) or the last logits' pick (the key), which block 0 writes to `tokens`;
// block 0 also writes the embedding to x, the residual that attn_out reads (its warp 0 from the registers that hold
// the first part of it).
template <bool EMBED> __device__ __forceinline__ void project_qkv(const float* w, float* x, const float* gain,
                                                                  const float* rope, const unsigned* state, float* q,
                                                                  float* keys, float* values, unsigned* tokens,
                                                                  const float* embed) {
    STAMP(EMBED ? KIND_EMBED_QKV_ROPE : KIND_QKV_ROPE);
    unsigned r = 2u * (blockIdx.x * 4u + WARP), position = 0;
    const float* const row[2] = {w + r * DIM, w + (r + 1u) * DIM};
    Slice<PART> rows[2], h, g;
    rows[0].load(row[0]);
    rows[1].load(row[1]);
    g.load(gain);
    float c, s;
    if (!EMBED) {
        position = __ldcg(state);
        rope_pair(rope, position, r, c, s);
    }
    AFTER_PREDECESSORS();
    const float* input = x;
    unsigned given = NONE, token = 0;
    if (EMBED) {
        position = state[0];
        given = state[3];
        token = given != NONE ? given : chosen_token(state[6]);
        input = embed + token * DIM;
    }
    h.load(input);
    if (EMBED) {
        rope_pair(rope, position, r, c, s);
        if (blockIdx.x == 0u) {
            if (threadIdx.x == 0u && given == NONE) tokens[position] = token;
            if (WARP == 0u) h.store(x);
            for (unsigned i = PART + threadIdx.x; i < DIM; i += blockDim.x) x[i] = input[i];
        }
    }
    float uv[2];
    normed_dots(rows, h, g, row, input, gain, uv);
    if (LANE != 0u) return;
    const bool rotates = r < 2u * ATTN;
    const float u = rotates ? uv[0] * c - uv[1] * s : uv[0], v = rotates ? uv[0] * s + uv[1] * c : uv[1];
    float* out = r < ATTN ? q + r : (r < 2u * ATTN ? keys : values) + position * ATTN + r % ATTN;
    out[0] = u;
    out[1] = v;
}

extern "C" __global__ void __launch_bounds__(128) embed_qkv_rope(const float* w, float* x, const float* gain,
                                                                  const float* rope, const unsigned* state, float* q,
                                                                  float* keys, float* values, unsigned* tokens,
                                                                  const float* embed) {
    project_qkv<true>(w, x, gain, rope, state, q, keys, values, tokens, embed);
}

extern "C" __global__ void __launch_bounds__(128) qkv_rope(const float* w, float* x, const float* gain,
                                                            const float* rope, const unsigned* state, float* q,
                                                            float* keys, float* values) {
    project_qkv<false>(w, x, gain, rope, state, q, keys, values, nullptr, nullptr);
}

#define LANE_CHUNKS ((CHUNKS + 31u) / 32u)
// Lane c's share of head `p`'s combination (p: the head's partials): e[j], the unnormalised weight e^(m - largest)
// of chunk c + 32j, and the warp's sum of the chunks' sums of exponentials so weighted (`total`, the denominator).
// Every lane of a warp calls it for the same head.
__device__ __forceinline__ void head_weights(const float* p, unsigned last, float (&e)[LANE_CHUNKS], float& total) {
    float m[LANE_CHUNKS], l[LANE_CHUNKS], top = NEG_INF;
    #pragma unroll
    for (unsigned j = 0; j < LANE_CHUNKS; ++j) {
        unsigned c = LANE + 32u * j;
        m[j] = c <= last ? __ldcg(p + c * ATTENDED) : NEG_INF;
        l[j] = c <= last ? __ldcg(p + c * ATTENDED + 1u) : 0.0f;
        top = fmaxf(top, m[j]);
    }
    #pragma unroll
    for (int s = 16; s > 0; s >>= 1) top = fmaxf(top, __shfl_xor_sync(FULL_MASK, top, s));
    total = 0.0f;
    #pragma unroll
    for (unsigned j = 0; j < LANE_CHUNKS; ++j) {  // (chunk 0 has a score, so `top` is a number)
        e[j] = LANE + 32u * j <= last ? expf(m[j] - top) : 0.0f;
        total += l[j] * e[j];
    }
    total = warp_sum(total);
}

// Head `p`'s attended vector (p: its partials, chunks 0 to `last`) into `out`, by a block of 128 threads: each warp
// takes the chunks' weights (head_weights), each thread its dimensions' values of every chunk, a group of 32 chunks
// at a time, all loaded at once.
__device__ __forceinline__ void combine_head(const float* p, unsigned last, float* out) {
    float e[LANE_CHUNKS], total;
    head_weights(p, last, e, total);
    for (unsigned d = threadIdx.x; d < HEAD_DIM; d += 128u) {
        float acc = 0.0f;
        #pragma unroll
        for (unsigned j = 0; j < LANE_CHUNKS; ++j) {
            float v[32];
            #pragma unroll
            for (unsigned k = 0; k < 32u; ++k) {
                const unsigned c = 32u * j + k;
                v[k] = c <= last ? __ldcg(p + c * ATTENDED + 2u + d) : 0.0f;
            }
            #pragma unroll
            for (unsigned k = 0; k < 32u; ++k) acc += v[k] * __shfl_sync(FULL_MASK, e[j], k);
        }
        out[d] = acc / total;
    }
}

// Grid (CHUNKS, LOCAL_HEADS): the keys of chunk blockIdx.x (CHUNK positions) against head blockIdx.y's query. Each warp
// scores CHUNK / 4 positions, a lane holding HEAD_DIM / 32 dimensions; the four warps' softmax pieces meet in
// shared memory, and the chunk's partial (its largest score, its sum of exponentials, its exponential-weighted
// values) goes to `partials` for attn_out. The position and the cache's rows are read before the wait (the kernels
// that wrote them are two or more back), all at once: rows past the position too (they may hold anything, NaN
// included; they are left out by selection, never by arithmetic); after the wait, the query and the position's own
// row, which qkv_rope just wrote. A chunk wholly past the position writes nothing. Block (0, 0) clears the argmax key
// (the step's first kernel, which has ended, read it; the step's logits raise it again).
// COMBINED (kernels.combined: an attention wider than 256): past the heads' partials, the attention's buffer holds the
// attended vector (ATTN floats) and a count a head, zero when a submission starts.
#define ATTENDED_VECTOR(partials) ((partials) + LOCAL_HEADS * CHUNKS * ATTENDED)
#define ARRIVED(partials) reinterpret_cast<unsigned*>(ATTENDED_VECTOR(partials) + ATTN)
#define PER_WARP (CHUNK / 4)
#define LANE_DIMS (HEAD_DIM / 32)
extern "C" __global__ void __launch_bounds__(128) attention(const float* q, const float* keys, const float* values,
                                                             unsigned* state, float* partials) {
    STAMP(KIND_ATTENTION);
    __shared__ float largest[4], total[4], weighted[4][HEAD_DIM];
    unsigned chunk = blockIdx.x, h = blockIdx.y, position = __ldcg(state);
    unsigned first = chunk * CHUNK + WARP * PER_WARP, column = h * HEAD_DIM + LANE * LANE_DIMS;
    float qv[LANE_DIMS], k[PER_WARP][LANE_DIMS], v[PER_WARP][LANE_DIMS], score[PER_WARP];
    #pragma unroll
    for (int i = 0; i < PER_WARP; ++i) {
        unsigned row = min(first + i, MAX_SEQUENCE - 1u);
        #pragma unroll
        for (int d = 0; d < LANE_DIMS; ++d) {
            k[i][d] = __ldcg(keys + row * ATTN + column + d);
            v[i][d] = __ldcg(values + row * ATTN + column + d);
        }
    }
    AFTER_PREDECESSORS();
    if (chunk == 0u && h == 0u && threadIdx.x == 0u) *KEY(state) = 0ull;
    #pragma unroll
    for (int d = 0; d < LANE_DIMS; ++d) qv[d] = q[column + d];
    #pragma unroll
    for (int i = 0; i < PER_WARP; ++i)
        if (first + i == position) {
            #pragma unroll
            for (int d = 0; d < LANE_DIMS; ++d) {
                k[i][d] = keys[position * ATTN + column + d];
                v[i][d] = values[position * ATTN + column + d];
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
    if (chunk * CHUNK > position) return;  // (the whole block)
    if (threadIdx.x < HEAD_DIM) {
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
#if COMBINED
    // The head's last block to finish combines its chunks' partials (the others' seen through the fence before each
    // block's count, and through L2) into the attended vector, then clears the count for the next layer's attention.
    __shared__ bool last_block;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0u) last_block = atomicAdd(ARRIVED(partials) + h, 1u) == position / CHUNK;
    __syncthreads();
    if (!last_block) return;
    __threadfence();
    combine_head(partials + h * CHUNKS * ATTENDED, position / CHUNK, ATTENDED_VECTOR(partials) + h * HEAD_DIM);
    if (threadIdx.x == 0u) ARRIVED(partials)[h] = 0u;
#endif
}

// x += wo @ attended, a row per warp. COMBINED, the attention has left `attended` whole; else every block first
// combines the chunks' partials into `attended`, in one trip to memory: a thread per dimension has loaded its first
// GROUP chunks' weighted values (more chunks, or more dimensions than threads, are loaded after) while its warp, whose
// dimensions are all one head's, takes that head's largest scores and sums of exponentials (a lane per chunk) and
// each chunk's weight e^(m - largest); each thread sums its values by those weights, which the warp passes through
// shared memory (a store a lane, then reads of four at once: fewer instructions than a shuffle a chunk), in four
// independent sums, and divides by the rescaled sum of exponentials, which the warp adds up meanwhile. So no warp
// waits for another until `attended` is whole. The position and x (written two or more kernels back) are read before
// the wait. Launch bounds of one block per SM: registers for a whole group. A row of wo is held ATTN_PART columns at
// a time, as normed_dots holds a row of DIM.
#define GROUP (CHUNKS < 32u ? CHUNKS : 32u)
#define ATTN_PART (ATTN < 512u ? ATTN : 512u)
extern "C" __global__ void __launch_bounds__(256, 1) attn_out(const float* partials, const unsigned* state,
                                                               const float* wo, float* x) {
    STAMP(KIND_ATTN_OUT);
#if !COMBINED
    __shared__ __align__(16) float attended[ATTN];
    __shared__ __align__(16) float weights[8][32];  // each warp's chunk weights for its first group
#endif
    unsigned r = blockIdx.x * 8u + WARP;
    Slice<ATTN_PART> row, a;
    row.load(wo + r * ATTN);
    float xr = RESIDUAL ? __ldcg(x + r) : 0.0f;
#if COMBINED
    AFTER_PREDECESSORS();
    const float* attended = ATTENDED_VECTOR(partials);
#else
    unsigned last = __ldcg(state) / CHUNK;  // the last chunk with a partial
    AFTER_PREDECESSORS();
    const unsigned i = threadIdx.x;  // this thread's first dimension
    const float* mine = partials + (i / HEAD_DIM) * CHUNKS * ATTENDED + 2u + i % HEAD_DIM;
    float o[GROUP];
    #pragma unroll
    for (unsigned c = 0; c < GROUP; ++c) o[c] = i < ATTN && c <= last ? mine[c * ATTENDED] : 0.0f;
    for (unsigned d = i; d < ATTN; d += 256u) {  // (ATTN a multiple of 128: a warp's lanes all go on, or none)
        const float* head = partials + (d / HEAD_DIM) * CHUNKS * ATTENDED;
        const float* values = head + 2u + d % HEAD_DIM;
        float e[LANE_CHUNKS], total, acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        head_weights(head, last, e, total);
        if (d == i) {  // (lanes past the last chunk hold 0 in e and in o)
            weights[WARP][LANE] = e[0];
            __syncwarp();
            #pragma unroll
            for (unsigned c = 0; c < GROUP; c += 4u) {
                const float4 w = *reinterpret_cast<const float4*>(&weights[WARP][c]);
                acc[0] += o[c] * w.x;
                if (c + 1u < GROUP) acc[1] += o[c + 1u] * w.y;
                if (c + 2u < GROUP) acc[2] += o[c + 2u] * w.z;
                if (c + 3u < GROUP) acc[3] += o[c + 3u] * w.w;
            }
        }
        #pragma unroll
        for (unsigned j = 0; j < LANE_CHUNKS; ++j)
            for (unsigned c = d == i ? max(GROUP, 32u * j) : 32u * j; c < 32u * (j + 1u) && c <= last; ++c)
                acc[0] += values[c * ATTENDED] * __shfl_sync(FULL_MASK, e[j], c % 32u);
        attended[d] = (acc[0] + acc[1] + (acc[2] + acc[3])) / total;
    }
    __syncthreads();
#endif
    a.load(attended);
    float u = dot(row, a);
    #pragma unroll 1
    for (unsigned p = 1; p < ATTN / ATTN_PART; ++p) {
        row.load(wo + r * ATTN + p * ATTN_PART);
        a.load(attended + p * ATTN_PART);
        u += dot(row, a);
    }
    u = warp_sum(u);
    if (LANE == 0u) x[r] = xr + u;
}

// g = SiLU(w1 @ h) * (w3 @ h), h = RMSNorm(x) * gain: a row of w1 and of w3 per warp.
extern "C" __global__ void __launch_bounds__(256) ffn_in(const float* w1, const float* w3, const float* x,
                                                          const float* gain, float* g) {
    STAMP(KIND_FFN_IN);
    unsigned r = blockIdx.x * 8u + WARP;
    const float* const row[2] = {w1 + r * DIM, w3 + r * DIM};
    Slice<PART> rows[2], h, n;
    rows[0].load(row[0]);
    rows[1].load(row[1]);
    n.load(gain);
    AFTER_PREDECESSORS();
    h.load(x);
    float uv[2];
    normed_dots(rows, h, n, row, x, gain, uv);
    if (LANE == 0u) g[r] = uv[0] / (1.0f + expf(-uv[0])) * uv[1];
}

// x += w2 @ g: SPLIT warps per row (LOCAL_FFN / SPLIT columns each), 8 / SPLIT rows per block, summed in shared
// memory. x (written two kernels back) is read before the wait. The kernel after it may launch at its entry (see
// Early launch above).
extern "C" __global__ void __launch_bounds__(256) ffn_out(const float* w2, const float* g, float* x) {
    STAMP(KIND_FFN_OUT);
    LAUNCH_DEPENDENTS();
    __shared__ float part[8];
    unsigned r = blockIdx.x * (8u / SPLIT) + WARP / SPLIT, span = (WARP % SPLIT) * (LOCAL_FFN / SPLIT);
    Slice<LOCAL_FFN / SPLIT> row, a;
    row.load(w2 + r * LOCAL_FFN + span);
    float xr = RESIDUAL && threadIdx.x < 8u / SPLIT ? __ldcg(x + blockIdx.x * (8u / SPLIT) + threadIdx.x) : 0.0f;
    WAIT_FOR_PREDECESSORS();
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

// logits = output @ (RMSNorm(x) * gain), LOGIT_ROWS rows per warp; each block raises the argmax key by its rows'
// largest key (one atomic max a block: no block waits for another). Split over ranks, the rank's LOCAL_VOCAB rows, the
// vocabulary's from VOCAB_OFFSET: its keys name their rows there, and an all_reduce (max) of the key follows. Block 0
// moves the position on, takes the prompt's token there (if any) into state[3] and counts the step; what it needs of
// the state and the prompt is read before the wait (what wrote them, the logits of the step before, `start` or the
// host, ended many kernels back).
#define LOGIT_ROWS 4u  // (the rows' pointers below are written out for 4)
extern "C" __global__ void __launch_bounds__(256) logits_argmax(const float* w, const float* x, const float* gain,
                                                                 float* logits, unsigned* state,
                                                                 const unsigned* tokens) {
    STAMP(KIND_LOGITS_ARGMAX);
    __shared__ unsigned long long best[8];
    unsigned r = LOGIT_ROWS * (blockIdx.x * 8u + WARP), next = 0, left = 0, given = NONE;
    const float* const row[LOGIT_ROWS] = {w + r * DIM, w + (r + 1u) * DIM, w + (r + 2u) * DIM, w + (r + 3u) * DIM};
    Slice<PART> rows[LOGIT_ROWS], h, g;
    #pragma unroll
    for (unsigned k = 0; k < LOGIT_ROWS; ++k) rows[k].load(row[k]);
    g.load(gain);
    const bool counts = blockIdx.x == 0u && threadIdx.x == 0u;
    if (counts) {
        next = __ldcg(state) + 1u;
        left = __ldcg(state + 1);
        if (next < __ldcg(state + 2)) given = __ldcg(tokens + next);
    }
    AFTER_PREDECESSORS();
    h.load(x);
    float u[LOGIT_ROWS];
    normed_dots(rows, h, g, row, x, gain, u);
    unsigned long long key = 0ull;
    #pragma unroll
    for (unsigned i = 0; i < LOGIT_ROWS; ++i) {
        if (LANE == 0u) logits[r + i] = u[i];
        key = max(key, argmax_key(u[i], VOCAB_OFFSET + r + i));
    }
    if (LANE == 0u) best[WARP] = key;
    __syncthreads();
    if (threadIdx.x != 0u) return;
    #pragma unroll
    for (int i = 1; i < 8; ++i) key = max(key, best[i]);
    atomicMax(KEY(state), key);
    if (counts) {
        state[0] = next;
        state[3] = given;
        count_steps(state, left > 0u ? left - 1u : 0u);
    }
}
"""
