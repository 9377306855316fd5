"""The decoder's kernels in Triton (`Decoder(..., kernels="triton")`): the same eight exports, grids and meanings as
kernels_cuda.py (examples/decode/kernels.py says what each computes), written as Triton writes them: each program
loads whole tiles (its rows of a matrix, a chunk of the cache) and reduces them with tl.sum, tl.max and tl.reduce.

On CUDA the step kernels load their weights (which nothing writes), then wait for the kernels before them to end
and let the next launch (griddepcontrol through Triton's gdc_wait and gdc_launch_dependents: the exports are marked
early_launch), then read what those kernels wrote. Under TRITON_INTERPRET=1 the host runs the same functions in
Triton's interpreter, which has no griddepcontrol (and needs none): EARLY is then False. Division and square root
round as IEEE's (div_rn, sqrt_rn), as NVRTC's do, so the logits stay within the tests' tolerance of numpy's.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

import hal
from examples.decode.model import EPSILON, Config

NONE = tl.constexpr(0xFFFFFFFF)  # state[3] where the prompt gives no token
LOGIT_ROWS = 32  # rows of the output projection a program of logits_argmax reduces
WARPS = {"start": 1, "embed_qkv_rope": 4, "qkv_rope": 4, "attention": 4, "attn_out": 8, "ffn_in": 8, "ffn_out": 8,
         "logits_argmax": 8}


@triton.jit
def _after_predecessors(EARLY: tl.constexpr):
    if EARLY:
        gdc_wait()
        gdc_launch_dependents()


@triton.jit
def _normed(x, gain, cols, DIM: tl.constexpr, EPSILON: tl.constexpr):
    """x * gain and 1 / sqrt(mean(x * x) + EPSILON): a row's dot with the first, times the second, is the row's
    product with RMSNorm(x) * gain."""
    v = tl.load(x + cols)
    inv = tl.div_rn(1.0, tl.sqrt_rn(tl.sum(v * v, 0) / DIM + EPSILON))
    return v * tl.load(gain + cols), inv


@triton.jit
def _argmax_key(u, index):
    """The argmax keys of logits `u` at `index` (examples/decode/state.py: numpy's argmax order as int64 order)."""
    bits = u.to(tl.uint32, bitcast=True)
    bits = tl.where(bits == 0x80000000, 0, bits)  # -0 as +0
    order = tl.where((bits & 0x80000000) != 0, bits ^ 0xFFFFFFFF, bits | 0x80000000)
    order = tl.where(u != u, 0xFFFFFFFF, order)
    return (order.to(tl.int64) << 31) | (0x7FFFFFFF - index).to(tl.int64)


@triton.jit
def _count_steps(state, left, LONG_LOOP: tl.constexpr, SHORT_LOOP: tl.constexpr):
    """The steps left and the flags of the loops that run LONG_LOOP and SHORT_LOOP steps an iteration."""
    tl.store(state + 1, left)
    tl.store(state + 4, (left >= LONG_LOOP).to(tl.uint32))
    tl.store(state + 5, (left >= SHORT_LOOP).to(tl.uint32))


@triton.jit
def start(state, tokens, steps, LONG_LOOP: tl.constexpr, SHORT_LOOP: tl.constexpr):
    position = tl.load(state)
    prompted = position < tl.load(state + 2)
    tl.store(state + 3, tl.where(prompted, tl.load(tokens + position, mask=prompted, other=0), NONE).to(tl.uint32))
    _count_steps(state, steps, LONG_LOOP, SHORT_LOOP)


@triton.jit
def _project_qkv(rows, r, source, gain, rope, position, q, keys, values, DIM: tl.constexpr, HEAD_DIM: tl.constexpr,
                 EPSILON: tl.constexpr):
    """Rows r..r+7 of the fused q | k | v projection of RMSNorm(source) * gain: pairs rotated (q and k), written to
    q or the cache at the position."""
    cols = tl.arange(0, DIM)
    h, inv = _normed(source, gain, cols, DIM, EPSILON)
    u, v = tl.split(tl.reshape(tl.sum(rows * h[None, :], 1) * inv, (4, 2)))
    pair = ((r + 2 * tl.arange(0, 4)) % HEAD_DIM) // 2
    table = rope + (position * (HEAD_DIM // 2) + pair) * 2
    c = tl.load(table)
    s = tl.load(table + 1)
    rotates = r < 2 * DIM
    out = tl.reshape(tl.join(tl.where(rotates, u * c - v * s, u), tl.where(rotates, u * s + v * c, v)), (8,))
    i = tl.arange(0, 8)
    tl.store(q + r + i, out, mask=(r + i) < DIM)
    tl.store(keys + position * DIM + (r - DIM) + i, out, mask=(r >= DIM) & (r < 2 * DIM))
    tl.store(values + position * DIM + (r - 2 * DIM) + i, out, mask=(r + i) >= 2 * DIM)


@triton.jit
def embed_qkv_rope(w, x, gain, rope, state, q, keys, values, tokens, embed, DIM: tl.constexpr,
                   HEAD_DIM: tl.constexpr, EPSILON: tl.constexpr, EARLY: tl.constexpr):
    """A step's first kernel: qkv_rope of the embedding of the token at the position, the prompt's (state[3]) or
    the last logits' pick (the key), which program 0 writes to tokens, with the embedding to x."""
    r = tl.program_id(0) * 8
    cols = tl.arange(0, DIM)
    rows = tl.load(w + (r + tl.arange(0, 8))[:, None] * DIM + cols[None, :])
    _after_predecessors(EARLY)
    position = tl.load(state).to(tl.int32)
    given = tl.load(state + 3).to(tl.int64)
    chosen = 0x7FFFFFFF - (tl.load(state + 6).to(tl.int64) & 0x7FFFFFFF)
    token = tl.where(given != NONE, given, chosen).to(tl.int32)
    source = embed + token * DIM
    if tl.program_id(0) == 0:
        tl.store(tokens + position, token.to(tl.uint32), mask=given == NONE)
        tl.store(x + cols, tl.load(source + cols))
    _project_qkv(rows, r, source, gain, rope, position, q, keys, values, DIM, HEAD_DIM, EPSILON)


@triton.jit
def qkv_rope(w, x, gain, rope, state, q, keys, values, DIM: tl.constexpr, HEAD_DIM: tl.constexpr,
             EPSILON: tl.constexpr, EARLY: tl.constexpr):
    """Rows r..r+7 of the fused q | k | v projection: pairs rotated (q and k), written to q or the cache."""
    r = tl.program_id(0) * 8
    cols = tl.arange(0, DIM)
    rows = tl.load(w + (r + tl.arange(0, 8))[:, None] * DIM + cols[None, :])
    _after_predecessors(EARLY)
    position = tl.load(state).to(tl.int32)
    _project_qkv(rows, r, x, gain, rope, position, q, keys, values, DIM, HEAD_DIM, EPSILON)


@triton.jit
def attention(q, keys, values, state, partials, DIM: tl.constexpr, HEAD_DIM: tl.constexpr, CHUNK: tl.constexpr,
              CHUNKS: tl.constexpr, SCALE: tl.constexpr, EARLY: tl.constexpr):
    """Chunk program_id(0) of CHUNK positions against head program_id(1)'s query: the chunk's largest score, sum of
    exponentials and exponential-weighted values (nothing for a chunk wholly past the position). Program (0, 0)
    clears the argmax key, which the step's first kernel read."""
    chunk = tl.program_id(0)
    head = tl.program_id(1)
    _after_predecessors(EARLY)
    if (chunk == 0) & (head == 0):
        tl.store(state + 6 + tl.arange(0, 2), tl.zeros((2,), tl.uint32))
    position = tl.load(state).to(tl.int32)
    if chunk * CHUNK <= position:
        rows = chunk * CHUNK + tl.arange(0, CHUNK)
        dims = tl.arange(0, HEAD_DIM)
        seen = rows <= position  # rows past the position may hold anything: left out by selection
        at = rows[:, None] * DIM + head * HEAD_DIM + dims[None, :]
        k = tl.load(keys + at, mask=seen[:, None], other=0.0)
        v = tl.load(values + at, mask=seen[:, None], other=0.0)
        score = tl.where(seen, tl.sum(k * tl.load(q + head * HEAD_DIM + dims)[None, :], 1) * SCALE, float("-inf"))
        largest = tl.max(score, 0)
        e = tl.where(seen, tl.exp(score - largest), 0.0)
        out = partials + (head * CHUNKS + chunk) * (HEAD_DIM + 2)
        tl.store(out, largest)
        tl.store(out + 1, tl.sum(e, 0))
        tl.store(out + 2 + dims, tl.sum(e[:, None] * v, 0))


@triton.jit
def attn_out(partials, state, wo, x, DIM: tl.constexpr, HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
             CHUNK: tl.constexpr, CHUNKS: tl.constexpr, EARLY: tl.constexpr):
    """Every program combines the chunks' partials into the attended vector, then x += wo @ attended for its 8
    rows."""
    rows = tl.program_id(0) * 8 + tl.arange(0, 8)
    cols = tl.arange(0, DIM)
    w = tl.load(wo + rows[:, None] * DIM + cols[None, :])
    _after_predecessors(EARLY)
    last = tl.load(state).to(tl.int32) // CHUNK
    heads = tl.arange(0, HEADS)
    chunks = tl.arange(0, CHUNKS)
    dims = tl.arange(0, HEAD_DIM)
    active = (chunks <= last)[None, :]
    part = partials + (heads[:, None] * CHUNKS + chunks[None, :]) * (HEAD_DIM + 2)
    largest = tl.load(part, mask=active, other=float("-inf"))
    total = tl.load(part + 1, mask=active, other=0.0)
    weighted = tl.load(part[:, :, None] + 2 + dims[None, None, :], mask=active[:, :, None], other=0.0)
    scale = tl.where(active, tl.exp(largest - tl.max(largest, 1)[:, None]), 0.0)
    attended = tl.div_rn(tl.sum(weighted * scale[:, :, None], 1), tl.sum(total * scale, 1)[:, None])
    tl.store(x + rows, tl.load(x + rows) + tl.sum(w * tl.reshape(attended, (DIM,))[None, :], 1))


@triton.jit
def ffn_in(w1, w3, x, gain, g, DIM: tl.constexpr, EPSILON: tl.constexpr, EARLY: tl.constexpr):
    """g = SiLU(w1 @ h) * (w3 @ h), h = RMSNorm(x) * gain, for the program's 8 rows."""
    rows = tl.program_id(0) * 8 + tl.arange(0, 8)
    cols = tl.arange(0, DIM)
    at = rows[:, None] * DIM + cols[None, :]
    gate = tl.load(w1 + at)
    up = tl.load(w3 + at)
    _after_predecessors(EARLY)
    h, inv = _normed(x, gain, cols, DIM, EPSILON)
    a = tl.sum(gate * h[None, :], 1) * inv
    b = tl.sum(up * h[None, :], 1) * inv
    tl.store(g + rows, tl.div_rn(a, 1.0 + tl.exp(-a)) * b)


@triton.jit
def ffn_out(w2, g, x, FFN: tl.constexpr, ROWS: tl.constexpr, EARLY: tl.constexpr):
    """x += w2 @ g for the program's ROWS rows."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, FFN)
    w = tl.load(w2 + rows[:, None] * FFN + cols[None, :])
    _after_predecessors(EARLY)
    tl.store(x + rows, tl.load(x + rows) + tl.sum(w * tl.load(g + cols)[None, :], 1))


@triton.jit
def logits_argmax(w, x, gain, logits, state, tokens, DIM: tl.constexpr, ROWS: tl.constexpr,
                  LONG_LOOP: tl.constexpr, SHORT_LOOP: tl.constexpr, EPSILON: tl.constexpr, EARLY: tl.constexpr):
    """The program's ROWS logits; the argmax key raised by their largest (one atomic max a program); program 0
    moves the position on, takes the prompt's token there (if any) into state[3] and counts the step."""
    p = tl.program_id(0)
    rows = p * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, DIM)
    m = tl.load(w + rows[:, None] * DIM + cols[None, :])
    counts = p == 0
    following = tl.load(state, mask=counts, other=0, cache_modifier=".cg") + 1  # (before the wait: through L2)
    prompted = counts & (following < tl.load(state + 2, mask=counts, other=0, cache_modifier=".cg"))
    given = tl.where(prompted, tl.load(tokens + following, mask=prompted, other=0, cache_modifier=".cg"),
                     NONE).to(tl.uint32)
    left = tl.load(state + 1, mask=counts, other=0, cache_modifier=".cg")
    _after_predecessors(EARLY)
    h, inv = _normed(x, gain, cols, DIM, EPSILON)
    u = tl.sum(m * h[None, :], 1) * inv
    tl.store(logits + rows, u)
    tl.atomic_max((state + 6).to(tl.pointer_type(tl.int64), bitcast=True), tl.max(_argmax_key(u, rows), 0))
    if counts:
        tl.store(state, following)
        tl.store(state + 3, given)
        _count_steps(state, tl.where(left > 0, left - 1, 0), LONG_LOOP, SHORT_LOOP)


FUNCTIONS = {"start": start, "embed_qkv_rope": embed_qkv_rope, "qkv_rope": qkv_rope, "attention": attention,
             "attn_out": attn_out, "ffn_in": ffn_in, "ffn_out": ffn_out, "logits_argmax": logits_argmax}
WORDS = ("state", "tokens")  # the uint32 buffers; every other is float32


def source(c: Config, exports: tuple[hal.Export, ...], chunk: int, chunks: int, loops: tuple[int, int],
           split: int, scale: float) -> hal.ExecutableSource:
    """The Triton kernels for shape `c` (the same exports as the other sets)."""
    early = isinstance(start, triton.runtime.jit.JITFunction)  # (False under TRITON_INTERPRET=1)
    shape = dict(DIM=c.dim, HEAD_DIM=c.head_dim, HEADS=c.heads, FFN=c.ffn, CHUNK=chunk, CHUNKS=chunks,
                 LONG_LOOP=loops[0], SHORT_LOOP=loops[1], EPSILON=EPSILON, SCALE=scale, EARLY=early)
    rows = {"ffn_out": 8 // split, "logits_argmax": LOGIT_ROWS}  # (ROWS: what a program reduces)
    constexprs = {name: {p: rows[name] if p == "ROWS" else shape[p] for p in f.arg_names if p in shape or p == "ROWS"}
                  for name, f in FUNCTIONS.items()}
    signature = {name: {p: "*u32" for p in f.arg_names if p in WORDS} for name, f in FUNCTIONS.items()}
    return hal.ExecutableSource.triton(FUNCTIONS, exports, constexprs=constexprs, signature=signature,
                                       num_warps=WARPS)
