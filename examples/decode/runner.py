"""The decoder on a hal device: the weights uploaded once, the decode step recorded once, then run position after
position with only values changing.

One command buffer holds the step (each position: the embedding of its token, four layers, the logits and the
greedy choice of the next token, 27 dispatches between barriers, the intermediate vectors in cb.alloca transients)
inside `while_nonzero` on the steps left, so `generate(k)` is one submission for k positions (on CUDA, one graph
launch) and `step()` is generate(1). The values that change live on the device: the state buffer holds the
position, the steps left (set from constant slot 0 at the start of a submission) and the workgroup counts of the
attention scores, which cover the positions so far (a dynamic dispatch_indirect); the last kernel writes the next
token into the token buffer, which the next position's embedding reads, so no value goes through the host
between positions.
"""

from __future__ import annotations

import contextlib

import numpy as np

import hal
from examples.decode.kernels import MAX_SEQUENCE, SOURCE, WORKGROUP
from examples.decode.model import Weights

STATE_WORDS = 8  # see examples.decode.kernels


class Decoder:
    """`reset(prompt)`, then `step()` or `generate(k)` (both only queue work), then `tokens()` and `logits()`."""

    def __init__(self, device: hal.Device, weights: Weights) -> None:
        c = weights.config
        if c.dim != c.heads * c.head_dim or c.head_dim != WORKGROUP or c.dim % (2 * WORKGROUP) or c.vocab % 2 or \
                c.max_sequence > MAX_SEQUENCE:
            raise hal.ValidationError(f"the kernels need dim = heads x {WORKGROUP} (the head_dim), a dim that is a "
                                      f"multiple of {2 * WORKGROUP}, an even vocab and at most {MAX_SEQUENCE} "
                                      f"positions; got {c}")
        self.device, self.config = device, c
        self.exe = device.load_executable(SOURCE)
        self.weights = {name: device.upload(np.ascontiguousarray(getattr(weights, name), np.float32))
                        for name in ("embed", "attn_norm", "qkv", "wo", "ffn_norm", "w1", "w3", "w2", "final_norm",
                                     "output", "rope")}
        cache_bytes = 4 * c.layers * c.max_sequence * c.dim
        self.keys, self.values = device.allocate(cache_bytes), device.allocate(cache_bytes)
        self.state = device.allocate(4 * STATE_WORDS)
        self.token_buffer = device.allocate(4 * c.max_sequence)
        self.logit_buffer = device.allocate(4 * c.vocab)
        self.command_buffer = self.device.create_command_buffer(mode="reusable", constant_capacity=1)
        with self.command_buffer:
            self.record(self.command_buffer)
        self.position = 0
        self.prompt_length = 0

    def layer(self, name: str, layer: int) -> hal.BufferRef:
        """Layer `layer`'s part of the stacked weight `name`."""
        whole = self.weights[name]
        size = whole.size // self.config.layers
        return hal.ref(whole, layer * size, size)

    def record(self, cb: hal.CommandBuffer, loop: bool = True) -> None:
        """Record the steps into `cb` (recording, with a constant slot: the steps to run); `loop` False records one
        step without the while region (what `python -m hal trace decode` times command by command)."""
        c, exe, w = self.config, self.exe, self.weights
        x, q, attended = cb.alloca(4 * c.dim), cb.alloca(4 * c.dim), cb.alloca(4 * c.dim)
        gated, scores = cb.alloca(4 * c.ffn), cb.alloca(4 * c.heads * c.max_sequence)
        cb.dispatch(exe, "start", (1, 1, 1), (hal.constant_slot(0), c.heads), (self.state,))
        cb.execution_barrier()
        with cb.while_nonzero(hal.ref(self.state, 4, 4)) if loop else contextlib.nullcontext():
            cb.dispatch(exe, "embed", (c.dim // WORKGROUP, 1, 1), (c.dim,),
                        (w["embed"], self.token_buffer, self.state, x))
            for layer in range(c.layers):
                offset = layer * c.max_sequence * c.dim
                cb.execution_barrier()
                cb.dispatch(exe, "qkv_rope", (3 * c.dim // 2, 1, 1), (c.dim, c.head_dim, offset),
                            (self.layer("qkv", layer), x, self.layer("attn_norm", layer), w["rope"], self.state,
                             q, self.keys, self.values))
                cb.execution_barrier()
                cb.dispatch_indirect(exe, "attn_scores", hal.ref(self.state, 8, 12),
                                     (c.dim, c.head_dim, offset, c.max_sequence, float(c.head_dim) ** -0.5),
                                     (q, self.keys, self.state, scores), dynamic=True)
                cb.execution_barrier()
                cb.dispatch(exe, "attn_softmax", (c.heads, 1, 1), (c.dim, c.head_dim, offset, c.max_sequence),
                            (scores, self.values, self.state, attended))
                cb.execution_barrier()
                cb.dispatch(exe, "gemv_add", (c.dim // 2, 1, 1), (c.dim, c.dim),
                            (self.layer("wo", layer), attended, x))
                cb.execution_barrier()
                cb.dispatch(exe, "swiglu", (c.ffn, 1, 1), (c.ffn, c.dim),
                            (self.layer("w1", layer), self.layer("w3", layer), x, self.layer("ffn_norm", layer),
                             gated))
                cb.execution_barrier()
                cb.dispatch(exe, "gemv_add", (c.dim // 2, 1, 1), (c.dim, c.ffn),
                            (self.layer("w2", layer), gated, x))
            cb.execution_barrier()
            cb.dispatch(exe, "norm_gemv", (c.vocab // 2, 1, 1), (c.vocab, c.dim),
                        (w["output"], x, w["final_norm"], self.logit_buffer))
            cb.execution_barrier()
            cb.dispatch(exe, "sample", (1, 1, 1), (c.vocab, c.heads),
                        (self.logit_buffer, self.state, self.token_buffer))

    def reset(self, prompt: list[int]) -> None:
        """Start a sequence at `prompt` (at least one token)."""
        c = self.config
        if not 1 <= len(prompt) <= c.max_sequence or not all(0 <= t < c.vocab for t in prompt):
            raise hal.ValidationError(f"a prompt is 1 to {c.max_sequence} tokens below {c.vocab}; got {prompt!r}")
        tokens = np.zeros(c.max_sequence, np.uint32)
        tokens[:len(prompt)] = prompt
        self.token_buffer.write(tokens)
        self.state.write(np.array([0, 0, 0, 0, 0, len(prompt), 0, 0], np.uint32))
        self.position, self.prompt_length = 0, len(prompt)

    def check_room(self, steps: int) -> None:
        if self.position + steps > self.config.max_sequence - 1:
            raise hal.ValidationError(f"{steps} more steps from position {self.position} go past the last position, "
                             f"{self.config.max_sequence - 1}")

    def step(self) -> None:
        """Queue one position (one submission)."""
        self.generate(1)

    def generate(self, steps: int) -> None:
        """Queue `steps` positions in one submission."""
        if steps < 1:
            raise hal.ValidationError(f"generate: steps must be at least 1, got {steps}")
        self.check_room(steps)
        self.device.queue_execute(self.command_buffer, constants=(steps,))
        self.position += steps

    def tokens(self) -> list[int]:
        """The sequence so far: the prompt, then the tokens chosen (waits for the work queued)."""
        count = max(self.prompt_length, self.position + 1)
        return [int(t) for t in self.token_buffer.read(np.uint32)[:count]]

    def logits(self) -> np.ndarray:
        """The logits of the last position run (waits for the work queued)."""
        return self.logit_buffer.read(np.float32)
