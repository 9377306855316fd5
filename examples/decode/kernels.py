"""The decoder's kernels, written four times with one meaning: CUDA C (kernels_cuda.py), GLSL (kernels_glsl.py),
numpy (kernels_host.py) and Triton (kernels_triton.py, the kernel set "triton"), each compiled for one model shape
(`source(config)`: sizes are constants, so loops unroll). A step is 5 dispatches per layer and one to finish, fused
so that no intermediate vector makes a round trip a kernel could avoid. The decode state is a uint32 buffer:

    state[0] position of the token being forwarded    state[1] steps left
    state[2] prompt length    state[3] the token at the position if the prompt gives it, else NONE (the key's)
    state[4] 1 while at least LONG_LOOP steps are left (the flag of the loop of LONG_LOOP steps an iteration)
    state[5] 1 while at least SHORT_LOOP steps are left (the flag of the loop of SHORT_LOOP steps an iteration)
    state[6:8] the argmax key: one uint64 (little-endian) that the logits' workgroups raise by atomic max

The key (state.argmax_key) orders (logit, index) pairs as numpy's argmax does (the first NaN, else the first largest),
so the largest key names the chosen token, and no workgroup waits for the others to pick it: the step's last kernel
ends when each workgroup has raised the key by its best, and the next step's first kernel reads the token from it.

- start (state, tokens; steps): state[1] = steps (and the flags, state[4] and state[5], to match); state[3] = the
  token at the position if the prompt gives it (else the last step's key holds it).
- embed_qkv_rope (qkv, x, gain, rope, state, q, keys, values, tokens, embed), a step's first kernel: the token at
  the position (state[3], else the key's, then written to tokens), x = its embedding, then as qkv_rope.
- qkv_rope (qkv, x, gain, rope, state, q, keys, values): h = RMSNorm(x) * gain; a warp per rotary pair of rows of
  qkv @ h; q and k pairs rotated by the rope table at the position; q kept, k and v written to the layer's cache
  (the bindings are the layer's part of it) at the position.
- attention (q, keys, values, state, partials): workgroups (CHUNK-position chunks, heads), those wholly past the
  position doing nothing: each chunk's softmax partial for its head (largest score, sum of exponentials,
  exponential-weighted values), the split over keys that lets every position's work run at once. It also clears
  the key, which the step's first kernel has read, for this step's logits. On CUDA, where the attention is wider
  than 256 (`combined`), each head's last workgroup to finish also combines the head's partials into the attended
  vector, after the partials in the same buffer (`attention_words`).
- attn_out (partials, state, wo, x): each workgroup combines the partials into the attended vector (or reads it
  whole, where CUDA's attention combined it), then x += wo @ attended, a row per warp.
- ffn_in (w1, w3, x, gain, g): h = RMSNorm(x) * gain; g = SiLU(w1 @ h) * (w3 @ h), a row of each per warp.
- ffn_out (w2, g, x): x += w2 @ g, a row split over FFN_SPLIT warps.
- logits_argmax (output, x, gain, logits, state, tokens): logits = output @ (RMSNorm(x) * gain); each workgroup
  raises the key by its rows' best; the position moves on, state[3] takes the prompt's token there (if any), the
  steps left drop by one (the flags follow).

After a submission the last chosen token is in the key until a step reads it (state.chosen_token; runner.Decoder's
tokens() adds it).

Split over `world` ranks (model.shard; runner.Decoder with a communicator), rank `rank`'s kernels work on its heads
and hidden units: q, the caches and the partials are its heads' (the attention's width ATTN = dim / world), g its
ffn / world hidden units, and attn_out and ffn_out leave in x its part of the sum (rank 0 adds the residual), which
an all_reduce after each completes. logits_argmax computes the rank's vocab / world logits (its rows of the output
projection, from VOCAB_OFFSET) and raises the key by their best, named by its row in the whole vocabulary; an
all_reduce (max) of the key then gives every rank the same token. CUDA and the host take the split (Vulkan has no
collectives; the Triton set is for one device).
"""

from __future__ import annotations

import functools

import numpy as np

import hal
from examples.decode.kernels_cuda import CODE as CUDA_CODE
from examples.decode.kernels_glsl import shaders
from examples.decode.kernels_host import functions as host_functions
from examples.decode.model import EPSILON, Config

CHUNK = 16  # positions per attention partial
LONG_LOOP, SHORT_LOOP = 32, 4  # steps per iteration of the decode's first two loops (runner.py says why)

# The step's kernels are marked early_launch: on CUDA each waits for the ones before it to end before it touches
# what they write, and lets the next launch once past that wait (ffn_out at its entry: kernels_cuda.py), so each
# loads its weights while the one before it runs.
EXPORTS = (
    hal.Export("start", bindings=2, constants=1, workgroup_size=32, readonly=(1,)),
    hal.Export("embed_qkv_rope", bindings=10, workgroup_size=128, readonly=(0, 2, 3, 4, 9), early_launch=True),
    hal.Export("qkv_rope", bindings=8, workgroup_size=128, readonly=(0, 1, 2, 3, 4), early_launch=True),
    hal.Export("attention", bindings=5, workgroup_size=128, readonly=(0, 1, 2), early_launch=True),
    hal.Export("attn_out", bindings=4, workgroup_size=256, readonly=(0, 1, 2), early_launch=True),
    hal.Export("ffn_in", bindings=5, workgroup_size=256, readonly=(0, 1, 2, 3), early_launch=True),
    hal.Export("ffn_out", bindings=3, workgroup_size=256, readonly=(0, 1), early_launch=True),
    hal.Export("logits_argmax", bindings=6, workgroup_size=256, readonly=(0, 1, 2, 5), early_launch=True),
)


def ffn_split(c: Config, world: int = 1) -> int:
    """Warps per row of ffn_out: a warp sums 256 columns, at most 8 warps (a workgroup) share a row."""
    return min(c.ffn // world // 256, 8)


def check(c: Config, world: int = 1) -> None:
    """ValidationError unless the kernels' work split fits the shape, split over `world` ranks."""
    split, attn, ffn = ffn_split(c, world), c.dim // world, c.ffn // world
    if c.dim % 128 or c.dim != c.heads * c.head_dim or c.head_dim % 32 or c.heads % world or attn % 128 or \
            c.ffn % world or ffn % 256 or 8 % max(split, 1) or ffn % (128 * max(split, 1)) or \
            c.vocab % (32 * world) or c.max_sequence < 1:
        raise hal.ValidationError(f"the kernels need a dim that is a multiple of 128 and heads x head_dim, a head_dim "
                                  f"that is a multiple of 32, an ffn of 256, 512, 1024 or a multiple of 1024, and a "
                                  f"vocab that is a multiple of 32; split over {world} ranks, each rank's heads x "
                                  f"head_dim a multiple of 128, its ffn one of those and its part of the vocab a "
                                  f"multiple of 32; got {c}")


def chunks(c: Config) -> int:
    return -(-c.max_sequence // CHUNK)


def combined(c: Config, world: int = 1) -> bool:
    """Whether CUDA's attention combines the partials itself, for a rank of `world`: where its width (ATTN) is above
    256, each head's last block to finish (an atomic count a head) combines that head's chunks, so attn_out reads the
    attended vector whole instead of every attn_out block combining all of them (a round a 256 dimensions, block after
    block). On an H200 (bench/results/nvidia-h200-x2-2026-11-29-attention-combined.md): ATTN 2048 96 µs a token
    faster (16 layers), 1024 46 faster; 256 4.7 slower (4 layers: the count and the extra trip cost the attention
    more than one round saves)."""
    return c.dim // world > 256


def attention_words(c: Config, world: int = 1) -> tuple[int, int]:
    """The attention's buffer (its binding 4, attn_out's 0) on a rank of `world`, in 32-bit words: (all of it, where
    its counts start). The heads' partials; `combined`, then the attended vector (ATTN floats) and a count a head,
    which must be zero when a submission starts (each attention leaves them so)."""
    heads = c.heads // world
    partials = heads * chunks(c) * (c.head_dim + 2)
    if not combined(c, world):
        return partials, partials
    counts = partials + c.dim // world
    return counts + heads, counts


def workgroups(c: Config, world: int = 1) -> dict[str, tuple[int, int, int]]:
    """Each export's workgroup counts for the shape, a rank's part of it split over `world`: a warp per pair of
    q | k | v rows, per chunk and head, per row of wo, per row of w1 and w3, FFN_SPLIT warps per row of w2, a warp
    per four of the rank's rows of the output projection."""
    qkv = (3 * c.dim // world // 8, 1, 1)
    return {"start": (1, 1, 1), "embed_qkv_rope": qkv, "qkv_rope": qkv,
            "attention": (chunks(c), c.heads // world, 1), "attn_out": (c.dim // 8, 1, 1),
            "ffn_in": (c.ffn // world // 8, 1, 1), "ffn_out": (c.dim * ffn_split(c, world) // 8, 1, 1),
            "logits_argmax": (c.vocab // world // 32, 1, 1)}


def scale(c: Config) -> float:
    """The attention's score scale, 1 / sqrt(head_dim), as a float32 value."""
    return float(np.float32(1.0 / np.sqrt(c.head_dim)))


def _shape(c: Config, float_suffix: str, world: int = 1, rank: int = 0) -> str:
    sizes = dict(DIM=c.dim, HEADS=c.heads, HEAD_DIM=c.head_dim, FFN=c.ffn, MAX_SEQUENCE=c.max_sequence, CHUNK=CHUNK,
                 CHUNKS=chunks(c), SPLIT=ffn_split(c, world), LONG_LOOP=LONG_LOOP, SHORT_LOOP=SHORT_LOOP,
                 ATTN=c.dim // world, LOCAL_HEADS=c.heads // world, LOCAL_FFN=c.ffn // world, RESIDUAL=int(rank == 0),
                 LOCAL_VOCAB=c.vocab // world, VOCAB_OFFSET=rank * (c.vocab // world), COMBINED=int(combined(c, world)))
    lines = [f"#define {name} {value}u" for name, value in sizes.items()]
    lines += [f"#define EPSILON {EPSILON!r}{float_suffix}", f"#define SCALE {scale(c)!r}{float_suffix}"]
    return "\n".join(lines) + "\n"


KERNEL_SETS = ("native", "triton")
STAMP_CAPACITY = 1 << 15  # records of a timeline (`source`'s stamps), 4 uint64 words each
STAMP_HEADER_WORDS = 8  # the uint64 words before the records: the count, then words left unused


def stamp_defines(address: int) -> str:
    """The #defines that make the CUDA kernels stamp a timeline at device address `address` (kernels_cuda.py):
    STAMP_HEADER_WORDS, then STAMP_CAPACITY records, each kernel's KIND its index in EXPORTS."""
    lines = [f"#define STAMPS {address}ull", f"#define STAMP_CAPACITY {STAMP_CAPACITY}ull",
             f"#define STAMP_HEADER_WORDS {STAMP_HEADER_WORDS}u"]
    lines += [f"#define KIND_{export.name.upper()} {i}u" for i, export in enumerate(EXPORTS)]
    return "\n".join(lines) + "\n"


@functools.lru_cache(maxsize=16)
def source(c: Config, kernel_set: str = "native", world: int = 1, rank: int = 0,
           stamps: int = 0) -> hal.ExecutableSource:
    """The kernels for shape `c`, rank `rank` of `world`'s part (checked; the same source object for equal
    arguments, so a device loads it once): "native", each backend's own (CUDA C, GLSL, numpy), or "triton", the
    Triton set (kernels_triton.py: CUDA, or the host under TRITON_INTERPRET=1). Split over ranks: CUDA and the host
    only, native kernels. `stamps`: a device address where the native CUDA kernels stamp a timeline
    (bench/decode_timeline.py; 0: none)."""
    check(c, world)
    if kernel_set not in KERNEL_SETS:
        raise hal.ValidationError(f"the decoder's kernel sets are {', '.join(KERNEL_SETS)}; got {kernel_set!r}")
    if world > 1 and kernel_set != "native":
        raise hal.ValidationError(f"the {kernel_set} kernel set runs on one device; split over {world} ranks, "
                                  f"the native kernels do")
    if kernel_set == "triton":
        from examples.decode import kernels_triton
        return kernels_triton.source(c, EXPORTS, CHUNK, chunks(c), (LONG_LOOP, SHORT_LOOP), ffn_split(c), scale(c))
    host = hal.ExecutableSource.python(host_functions(c, CHUNK, (LONG_LOOP, SHORT_LOOP), world, rank), EXPORTS)
    stamped = stamp_defines(stamps) if stamps else ""
    cuda = hal.ExecutableSource.cuda(stamped + _shape(c, "f", world, rank) + CUDA_CODE, EXPORTS)
    if world > 1:  # (Vulkan has no collectives)
        return hal.ExecutableSource.multi(host=host, cuda=cuda)
    return hal.ExecutableSource.multi(host=host, cuda=cuda, vulkan=hal.ExecutableSource.glsl(shaders(_shape(c, "")),
                                                                                           EXPORTS))


def bytes_moved(c: Config, export: str, position: int, world: int = 1) -> int:
    """The fewest bytes `export` moves through memory at `position` on a rank of `world`: each matrix and cache row
    it reads once, what it writes once (vectors counted once, though several warps read them)."""
    f = 4  # bytes per float
    seen = position + 1
    attn, heads, ffn = c.dim // world, c.heads // world, c.ffn // world
    parts = chunks(c) * heads * (c.head_dim + 2)
    active = -(-seen // CHUNK) * heads * (c.head_dim + 2)
    return f * {
        "start": 7,  # (state and the prompt's token: words, as every kernel's state below)
        "embed_qkv_rope": 3 * attn * c.dim + 3 * c.dim + c.head_dim + 3 * attn + 4,
        "qkv_rope": 3 * attn * c.dim + 2 * c.dim + c.head_dim + 3 * attn + 1,
        "attention": attn + 2 * seen * attn + active + 3,
        "attn_out": min(active, parts) + c.dim * attn + 2 * c.dim + 1,
        "ffn_in": 2 * ffn * c.dim + 2 * c.dim + ffn,
        "ffn_out": c.dim * ffn + ffn + 2 * c.dim,
        "logits_argmax": c.vocab // world * c.dim + 2 * c.dim + c.vocab // world + 11,
    }[export]


def step_bytes(c: Config, position: int, world: int = 1) -> int:
    """The fewest bytes a whole step moves at `position` on a rank of `world`: its dispatches' bytes_moved,
    summed."""
    per_layer = sum(bytes_moved(c, name, position, world) for name in ("qkv_rope", "attention", "attn_out", "ffn_in",
                                                                        "ffn_out"))
    first = bytes_moved(c, "embed_qkv_rope", position, world) - bytes_moved(c, "qkv_rope", position, world)
    return c.layers * per_layer + first + bytes_moved(c, "logits_argmax", position, world)
