"""The decoder's kernels in Triton (`Decoder(..., kernels="triton")`): the same seven exports, grids and meanings as
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

NONE = 0xFFFFFFFF
LOGIT_ROWS = 32  # rows of the output projection a program of logits_argmax reduces
WARPS = {"start": 8, "qkv_rope": 4, "attention": 4, "attn_out": 8, "ffn_in": 8, "ffn_out": 8, "logits_argmax": 8}


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
def _first_of(a, i, b, j):
    """numpy's argmax order: the first NaN, else the first largest."""
    a_nan = a != a
    b_nan = b != b
    take_a = tl.where(a_nan | b_nan, a_nan & (~b_nan | (i < j)), (a > b) | ((a == b) & (i < j)))
    return tl.where(take_a, a, b), tl.where(take_a, i, j)


@triton.jit
def start(state, tokens, embed, x, steps, DIM: tl.constexpr, UNROLL: tl.constexpr):
    tl.store(state + 1, steps)
    tl.store(state + 3, 0)
    tl.store(state + 4, (steps >= UNROLL).to(tl.uint32))
    cols = tl.arange(0, DIM)
    token = tl.load(tokens + tl.load(state)).to(tl.int32)
    tl.store(x + cols, tl.load(embed + token * DIM + cols))


@triton.jit
def qkv_rope(w, x, gain, rope, state, q, keys, values, DIM: tl.constexpr, HEAD_DIM: tl.constexpr,
             EPSILON: tl.constexpr, EARLY: tl.constexpr):
    """Rows r..r+7 of the fused q | k | v projection: pairs rotated (q and k), written to q or the cache."""
    r = tl.program_id(0) * 8
    cols = tl.arange(0, DIM)
    rows = tl.load(w + (r + tl.arange(0, 8))[:, None] * DIM + cols[None, :])
    _after_predecessors(EARLY)
    position = tl.load(state).to(tl.int32)
    h, inv = _normed(x, gain, cols, DIM, EPSILON)
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
def attention(q, keys, values, state, partials, DIM: tl.constexpr, HEAD_DIM: tl.constexpr, CHUNK: tl.constexpr,
              CHUNKS: tl.constexpr, SCALE: tl.constexpr, EARLY: tl.constexpr):
    """Chunk program_id(0) of CHUNK positions against head program_id(1)'s query: the chunk's largest score, sum of
    exponentials and exponential-weighted values (nothing for a chunk wholly past the position)."""
    chunk = tl.program_id(0)
    head = tl.program_id(1)
    _after_predecessors(EARLY)
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
def logits_argmax(w, x, gain, logits, candidates, state, tokens, embed, DIM: tl.constexpr, ROWS: tl.constexpr,
                  PROGRAMS: tl.constexpr, UNROLL: tl.constexpr, EPSILON: tl.constexpr, EARLY: tl.constexpr):
    """The program's ROWS logits and their first in numpy's argmax order, into `candidates`; the last program to
    count itself in (state[3]) picks among the candidates, sets the next token unless the prompt gives it, moves the
    position on, counts the step and writes the next token's embedding into x (every program has read x by then)."""
    p = tl.program_id(0)
    rows = p * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, DIM)
    m = tl.load(w + rows[:, None] * DIM + cols[None, :])
    _after_predecessors(EARLY)
    h, inv = _normed(x, gain, cols, DIM, EPSILON)
    u = tl.sum(m * h[None, :], 1) * inv
    tl.store(logits + rows, u)
    best, at = tl.reduce((u, rows), 0, _first_of)
    tl.store(candidates + 2 * p, best.to(tl.uint32, bitcast=True))
    tl.store(candidates + 2 * p + 1, at.to(tl.uint32))
    tl.debug_barrier()  # every thread's stores before the count says so
    if tl.atomic_add(state + 3, 1, sem="acq_rel") == PROGRAMS - 1:
        tl.debug_barrier()
        i = tl.arange(0, PROGRAMS)
        values = tl.load(candidates + 2 * i, cache_modifier=".cg").to(tl.float32, bitcast=True)
        indices = tl.load(candidates + 2 * i + 1, cache_modifier=".cg").to(tl.int32)
        _, chosen = tl.reduce((values, indices), 0, _first_of)
        following = tl.load(state).to(tl.int32) + 1
        prompted = following < tl.load(state + 2).to(tl.int32)
        chosen = tl.where(prompted, tl.load(tokens + following, mask=prompted, other=0).to(tl.int32), chosen)
        left = tl.load(state + 1)
        left = tl.where(left > 0, left - 1, 0)
        tl.store(tokens + following, chosen.to(tl.uint32))
        tl.store(state, following.to(tl.uint32))
        tl.store(state + 1, left)
        tl.store(state + 3, 0)
        tl.store(state + 4, (left >= UNROLL).to(tl.uint32))
        tl.store(x + cols, tl.load(embed + chosen * DIM + cols))


FUNCTIONS = {"start": start, "qkv_rope": qkv_rope, "attention": attention, "attn_out": attn_out, "ffn_in": ffn_in,
             "ffn_out": ffn_out, "logits_argmax": logits_argmax}
WORDS = ("state", "tokens", "candidates")  # the uint32 buffers; every other is float32


def source(c: Config, exports: tuple[hal.Export, ...], chunk: int, chunks: int, unroll: int,
           split: int, scale: float) -> hal.ExecutableSource:
    """The Triton kernels for shape `c` (the same exports as the other sets)."""
    early = isinstance(start, triton.runtime.jit.JITFunction)  # (False under TRITON_INTERPRET=1)
    shape = dict(DIM=c.dim, HEAD_DIM=c.head_dim, HEADS=c.heads, FFN=c.ffn, CHUNK=chunk, CHUNKS=chunks,
                 UNROLL=unroll, EPSILON=EPSILON, SCALE=scale, PROGRAMS=c.vocab // LOGIT_ROWS, EARLY=early)
    rows = {"ffn_out": 8 // split, "logits_argmax": LOGIT_ROWS}  # (ROWS: what a program reduces)
    constexprs = {name: {p: rows[name] if p == "ROWS" else shape[p] for p in f.arg_names if p in shape or p == "ROWS"}
                  for name, f in FUNCTIONS.items()}
    signature = {name: {p: "*u32" for p in f.arg_names if p in WORDS} for name, f in FUNCTIONS.items()}
    return hal.ExecutableSource.triton(FUNCTIONS, exports, constexprs=constexprs, signature=signature,
                                       num_warps=WARPS)
