"""The decoder's kernels for the host backend: numpy, each export once for its whole grid, with the same meaning as
the CUDA and GLSL kernels (examples/decode/kernels.py), the attention's chunked partials included, and the same
split over ranks as the CUDA kernels."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from examples.decode.model import Config, rms_norm
from examples.decode.state import KEY_WORD, NONE, argmax_key, chosen_token

KEY = KEY_WORD // 2  # the argmax key in the state's uint64 words


def functions(c: Config, chunk: int, loops: tuple[int, int], world: int = 1, rank: int = 0) -> dict[str, Callable]:
    """Each export's kernel for the shape `c`, the attention's `chunk` positions per partial and the steps per
    iteration of the long and the short loop (`loops`); rank `rank` of `world`'s part (kernels.py)."""
    dim, head_dim, chunks = c.dim, c.head_dim, -(-c.max_sequence // chunk)
    attn, heads, ffn, vocab = dim // world, c.heads // world, c.ffn // world, c.vocab // world  # this rank's
    residual = np.float32(rank == 0)
    attended = head_dim + 2  # a partial: largest score, sum of exponentials, weighted values

    def count_steps(state: np.ndarray, left: int) -> None:
        """The steps left and the flags of the long and the short loop."""
        state[1], state[4], state[5] = left, left >= loops[0], left >= loops[1]

    def start(ctx) -> None:
        state, tokens = ctx.binding(0, np.uint32), ctx.binding(1, np.uint32)
        steps = ctx.constants[0]
        state[3] = tokens[state[0]] if state[0] < state[2] else NONE
        count_steps(state, steps)

    def embed_qkv_rope(ctx) -> None:
        """The token at the position (the prompt's, else the key's, then written to tokens), x its embedding, then
        qkv_rope."""
        state, tokens, x = ctx.binding(4, np.uint32), ctx.binding(8, np.uint32), ctx.binding(1, np.float32)
        position, token = int(state[0]), int(state[3])
        if token == NONE:
            token = tokens[position] = chosen_token(state)
        x[:dim] = ctx.binding(9, np.float32)[token * dim:(token + 1) * dim]
        qkv_rope(ctx)

    def qkv_rope(ctx) -> None:
        position = int(ctx.binding(4, np.uint32)[0])
        y = ctx.binding(0, np.float32)[:3 * attn * dim].reshape(3 * attn, dim) @ \
            rms_norm(ctx.binding(1, np.float32)[:dim], ctx.binding(2, np.float32)[:dim])
        pairs = head_dim // 2
        table = ctx.binding(3, np.float32)[position * pairs * 2:(position + 1) * pairs * 2].reshape(pairs, 2)
        qk = y[:2 * attn].reshape(-1, pairs, 2)
        a, b = qk[..., 0].copy(), qk[..., 1].copy()
        qk[..., 0], qk[..., 1] = a * table[:, 0] - b * table[:, 1], a * table[:, 1] + b * table[:, 0]
        ctx.binding(5, np.float32)[:attn] = y[:attn]
        ctx.binding(6, np.float32)[position * attn:(position + 1) * attn] = y[attn:2 * attn]
        ctx.binding(7, np.float32)[position * attn:(position + 1) * attn] = y[2 * attn:]

    def attention(ctx) -> None:
        state = ctx.binding(3, np.uint32)
        state.view(np.uint64)[KEY] = 0  # (read by the step's first kernel; the logits raise it again)
        length = int(state[0]) + 1
        q = ctx.binding(0, np.float32)[:attn].reshape(heads, head_dim)
        keys = ctx.binding(1, np.float32)[:length * attn].reshape(length, heads, head_dim)
        values = ctx.binding(2, np.float32)[:length * attn].reshape(length, heads, head_dim)
        partials = ctx.binding(4, np.float32)[:heads * chunks * attended].reshape(heads, chunks, attended)
        scale = np.float32(1.0 / np.sqrt(head_dim))
        for first in range(0, length, chunk):
            rows = slice(first, min(first + chunk, length))
            scores = np.einsum("phd,hd->hp", keys[rows], q) * scale
            largest = scores.max(axis=1)
            e = np.exp(scores - largest[:, None])
            part = partials[:, first // chunk]
            part[:, 0], part[:, 1] = largest, e.sum(axis=1)
            part[:, 2:] = np.einsum("hp,phd->hd", e, values[rows])

    def attn_out(ctx) -> None:
        chunks_seen = int(ctx.binding(1, np.uint32)[0]) // chunk + 1
        partials = ctx.binding(0, np.float32)[:heads * chunks * attended].reshape(heads, chunks, attended)
        part = partials[:, :chunks_seen]
        scale = np.exp(part[:, :, 0] - part[:, :, 0].max(axis=1, keepdims=True))
        combined = (part[:, :, 2:] * scale[:, :, None]).sum(axis=1) / (part[:, :, 1] * scale).sum(axis=1)[:, None]
        x = ctx.binding(3, np.float32)
        x[:dim] = residual * x[:dim] + ctx.binding(2, np.float32)[:dim * attn].reshape(dim, attn) @ \
            combined.reshape(attn)

    def ffn_in(ctx) -> None:
        h = rms_norm(ctx.binding(2, np.float32)[:dim], ctx.binding(3, np.float32)[:dim])
        a = ctx.binding(0, np.float32)[:ffn * dim].reshape(ffn, dim) @ h
        b = ctx.binding(1, np.float32)[:ffn * dim].reshape(ffn, dim) @ h
        ctx.binding(4, np.float32)[:ffn] = a / (np.float32(1.0) + np.exp(-a)) * b

    def ffn_out(ctx) -> None:
        x = ctx.binding(2, np.float32)
        x[:dim] = residual * x[:dim] + ctx.binding(0, np.float32)[:dim * ffn].reshape(dim, ffn) @ \
            ctx.binding(1, np.float32)[:ffn]

    def logits_argmax(ctx) -> None:
        """The rank's logits (its rows of the vocabulary: kernels.py), the key raised by their best at once (one
        call covers the grid)."""
        logits = ctx.binding(0, np.float32)[:vocab * dim].reshape(vocab, dim) @ \
            rms_norm(ctx.binding(1, np.float32)[:dim], ctx.binding(2, np.float32)[:dim])
        ctx.binding(3, np.float32)[:vocab] = logits
        state, tokens = ctx.binding(4, np.uint32), ctx.binding(5, np.uint32)
        best = int(np.argmax(logits))
        key = state.view(np.uint64)
        key[KEY] = max(int(key[KEY]), argmax_key(logits[best], rank * vocab + best))
        following = int(state[0]) + 1
        state[0] = following
        state[3] = tokens[following] if following < state[2] else NONE
        count_steps(state, max(int(state[1]) - 1, 0))

    return {"start": start, "embed_qkv_rope": embed_qkv_rope, "qkv_rope": qkv_rope, "attention": attention,
            "attn_out": attn_out, "ffn_in": ffn_in, "ffn_out": ffn_out, "logits_argmax": logits_argmax}
