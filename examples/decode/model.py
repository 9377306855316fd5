"""The decoder's shape, its seeded random weights and the numpy reference forward the kernels are checked against.

A GPT-style decoder in float32: token embedding; per layer RMSNorm, fused q/k/v projection, rotary position
embedding (interleaved pairs, from a table), causal attention over a KV cache, output projection and residual,
RMSNorm, SiLU-gated MLP and residual; a final RMSNorm, the logits and a greedy argmax (the first index of the
largest logit). The rotary table is computed once in float64 and rounded, so every backend uses the same values.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

EPSILON = 1e-5  # RMSNorm's


@dataclass(frozen=True)
class Config:
    layers: int = 4
    dim: int = 256
    heads: int = 4
    ffn: int = 1024
    vocab: int = 4096
    max_sequence: int = 512

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


@dataclass(frozen=True)
class Weights:
    """Matrices are row-major, (out, in): a projection is W @ h. `qkv[l]` stacks the q, k and v projections."""

    config: Config
    embed: np.ndarray  # (vocab, dim)
    attn_norm: np.ndarray  # (layers, dim)
    qkv: np.ndarray  # (layers, 3 dim, dim)
    wo: np.ndarray  # (layers, dim, dim)
    ffn_norm: np.ndarray  # (layers, dim)
    w1: np.ndarray  # (layers, ffn, dim): the gate, through SiLU
    w3: np.ndarray  # (layers, ffn, dim): the up projection
    w2: np.ndarray  # (layers, dim, ffn): the down projection
    final_norm: np.ndarray  # (dim,)
    output: np.ndarray  # (vocab, dim)
    rope: np.ndarray  # (max_sequence, head_dim // 2, 2): cos and sin per position and pair


def random_weights(config: Config = Config(), seed: int = 0) -> Weights:
    """Seeded normal weights, each matrix scaled by 1 / sqrt(its input width), norms near 1."""
    rng = np.random.default_rng(seed)
    c = config

    def matrix(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(*shape: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)

    return Weights(c, embed=rng.standard_normal((c.vocab, c.dim)).astype(np.float32),
                   attn_norm=norm(c.layers, c.dim), qkv=matrix(c.layers, 3 * c.dim, c.dim),
                   wo=matrix(c.layers, c.dim, c.dim), ffn_norm=norm(c.layers, c.dim),
                   w1=matrix(c.layers, c.ffn, c.dim), w3=matrix(c.layers, c.ffn, c.dim),
                   w2=matrix(c.layers, c.dim, c.ffn), final_norm=norm(c.dim), output=matrix(c.vocab, c.dim),
                   rope=rope_table(c))


def shard(weights: Weights, rank: int, world: int) -> Weights:
    """Rank `rank` of `world`'s part of the weights, split Megatron style: the heads (their rows of q, k and v, and
    their columns of wo), the hidden units of the MLP (their rows of w1 and w3, their columns of w2) and the
    vocabulary (its rows of the output projection) divided in `world` equal parts, in order; the rest whole on every
    rank. Each rank's products of wo and w2 are parts of a sum, which an all_reduce completes, and its logits a part
    of the whole, which an all_gather completes (runner.Decoder). The config stays the model's."""
    c = weights.config
    if world < 1 or not 0 <= rank < world or c.heads % world or c.ffn % world or c.vocab % world:
        raise ValueError(f"rank {rank} of {world}: the heads ({c.heads}), the ffn ({c.ffn}) and the vocab "
                         f"({c.vocab}) must divide by the world, and the rank be below it")
    if world == 1:
        return weights
    attn, ffn, vocab = c.dim // world, c.ffn // world, c.vocab // world
    own, hidden = slice(rank * attn, (rank + 1) * attn), slice(rank * ffn, (rank + 1) * ffn)
    q, k, v = np.split(weights.qkv, 3, axis=1)
    return dataclasses.replace(
        weights, qkv=np.ascontiguousarray(np.concatenate([q[:, own], k[:, own], v[:, own]], axis=1)),
        wo=np.ascontiguousarray(weights.wo[:, :, own]), w1=np.ascontiguousarray(weights.w1[:, hidden]),
        w3=np.ascontiguousarray(weights.w3[:, hidden]), w2=np.ascontiguousarray(weights.w2[:, :, hidden]),
        output=np.ascontiguousarray(weights.output[rank * vocab:(rank + 1) * vocab]))


def rope_table(c: Config) -> np.ndarray:
    """cos and sin of position * 10000^(-2i / head_dim) for every position and pair i."""
    pairs = c.head_dim // 2
    angles = np.arange(c.max_sequence)[:, None] * 10000.0 ** (-2.0 * np.arange(pairs)[None, :] / c.head_dim)
    return np.stack([np.cos(angles), np.sin(angles)], axis=-1).astype(np.float32)


def rms_norm(x: np.ndarray, gain: np.ndarray) -> np.ndarray:
    inv = np.float32(1.0) / np.sqrt(np.mean(x * x, dtype=np.float32) + np.float32(EPSILON))
    return x * inv * gain


def rotate(v: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Rotate the interleaved pairs (2i, 2i+1) of each head of `v` (heads * head_dim) by `table` (pairs, 2)."""
    pairs = v.reshape(-1, table.shape[0], 2)
    cos, sin = table[:, 0], table[:, 1]
    a, b = pairs[..., 0], pairs[..., 1]
    return np.stack([a * cos - b * sin, a * sin + b * cos], axis=-1).reshape(v.shape)


def silu(a: np.ndarray) -> np.ndarray:
    return a / (np.float32(1.0) + np.exp(-a))


class Reference:
    """The decoder in numpy, one position at a time, with its own KV cache."""

    def __init__(self, weights: Weights) -> None:
        self.w = weights
        c = weights.config
        self.keys = np.zeros((c.layers, c.max_sequence, c.dim), np.float32)
        self.values = np.zeros((c.layers, c.max_sequence, c.dim), np.float32)

    def forward(self, token: int, position: int) -> np.ndarray:
        """The logits after `token` at `position` (positions before it already forwarded)."""
        w, c = self.w, self.w.config
        x = w.embed[token].copy()
        for layer in range(c.layers):
            q, k, v = np.split(w.qkv[layer] @ rms_norm(x, w.attn_norm[layer]), 3)
            self.keys[layer, position] = rotate(k, w.rope[position])
            self.values[layer, position] = v
            q = rotate(q, w.rope[position])
            heads = []
            for h in range(c.heads):
                part = slice(h * c.head_dim, (h + 1) * c.head_dim)
                scores = self.keys[layer, :position + 1, part] @ q[part] * np.float32(1.0 / np.sqrt(c.head_dim))
                p = np.exp(scores - scores.max())
                heads.append((p / p.sum()) @ self.values[layer, :position + 1, part])
            x = x + w.wo[layer] @ np.concatenate(heads)
            h = rms_norm(x, w.ffn_norm[layer])
            x = x + w.w2[layer] @ (silu(w.w1[layer] @ h) * (w.w3[layer] @ h))
        return w.output @ rms_norm(x, w.final_norm)


def reference_generate(weights: Weights, prompt: list[int], steps: int) -> tuple[list[int], np.ndarray]:
    """Greedy decoding: `steps` positions forwarded from the prompt's first token, each feeding the next (the
    prompt's tokens as given, then the argmax of the logits before each). Returns the tokens, the prompt's
    included (max(len(prompt), steps + 1) of them), and the last step's logits."""
    model = Reference(weights)
    tokens = list(prompt)
    logits = np.zeros(weights.config.vocab, np.float32)
    for position in range(steps):
        logits = model.forward(tokens[position], position)
        if position + 1 >= len(tokens):
            tokens.append(int(np.argmax(logits)))
    return tokens, logits
