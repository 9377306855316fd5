"""The decoder on a hal device: the weights uploaded once, the decode step recorded once, then run position after
position with only values changing.

One command buffer holds the steps (each position: four layers of five dispatches, the first of them taking the token's
embedding, then the logits and the greedy choice of the next token in one more: 21 dispatches between barriers, the
intermediate vectors in cb.alloca transients) in three while loops: the first runs LONG_LOOP (32) steps an iteration
while at least that many are left, the second SHORT_LOOP (4) while at least 4 are, the third one step an iteration for
the rest (at most 3). So `generate(k)` is one submission for k positions (on CUDA, one graph launch). `step()`,
generate(1), submits a second command buffer instead, the step without the loops (a while node costs CUDA a few kernels'
worth even when it does not run). Loops of several steps because an iteration costs more than its kernels (a CUDA while
node's iteration adds its condition's kernel node and the conditional node's own cost, a few kernels' worth:
bench/README.md), which those steps share; three so that no k pays more than 10 iterations beyond its long ones. The
values that change live on the device: the state buffer holds the position, the steps left and the loops' flags (set
from constant slot 0 at the start of a submission), and the argmax key in which the last kernel leaves the next token;
the next position's first kernel reads it, writes it into the token buffer and projects its embedding, so no value goes
through the host between positions. The attention's grid covers every chunk of positions the cache holds and the chunks
past the position write nothing: cheaper than counts the GPU sets before each attention (a dynamic dispatch_indirect
costs CUDA a setter node on the step's path, one per layer).

Tensor parallelism: given a communicator, each rank's Decoder holds its shard of the weights (model.shard: its heads,
its hidden units, its rows of the vocabulary) and its heads' part of the cache, and records the same loops, with an
all_reduce of x after attn_out and after ffn_out (the kernels leave the rank's part of the sum there, kernels.py) and
an all_reduce (max) of the argmax key after the logits, inside the loops' bodies: one submission per rank runs every
position, the collectives on the device; every rank picks the same token. After the loops (once a submission) an
all_gather puts every rank's logits together. Where the backend refuses collectives inside a loop (the first
submission raises DeviceError), the Decoder records the step without the loops and submits once per position
(`loops_refused` says why); `device_loops=False` asks for that from the start. Ranks driven from one thread:
generate(k) with the loops is one submission a rank, so the ranks may come one after the other; a submission per
position must take the ranks in turn at every position (step() on each), since a rank queued far ahead waits on the
GPU for its peers' part of an all_reduce (on 2 H200s, rank 0's submissions of a token each blocked the host before
rank 1 had any)."""

from __future__ import annotations

import numpy as np

import examples.decode.kernels as kernels
import hal
from examples.decode.model import Weights, shard
from examples.decode.state import KEY_WORD, STATE_WORDS, chosen_token


class Decoder:
    """`reset(prompt)`, then `step()` or `generate(k)` (both only queue work), then `tokens()` and `logits()`;
    `kernel_set` "native" (each backend's own kernels) or "triton" (examples/decode/kernels_triton.py);
    `communicator`: this device's rank of a tensor-parallel group (the module docstring), each rank given the whole
    weights and keeping its shard; `device_loops` False: one submission per position (the step without the while
    loops, `step_buffer`, which step() submits in any case); `stamps`: a device address where the native CUDA
    kernels stamp a timeline (kernels.source)."""

    def __init__(self, device: hal.Device, weights: Weights, kernel_set: str = "native",
                 communicator: hal.Communicator | None = None, device_loops: bool = True, stamps: int = 0) -> None:
        c = weights.config
        self.device, self.config, self.communicator = device, c, communicator
        self.device_loops, self.loops_refused, self.loops_built = device_loops, None, False
        self.rank, self.world = (communicator.rank(device), communicator.size) if communicator else (0, 1)
        # (checks that the kernels fit the shape; kernel_set: see kernels.source)
        self.exe = device.load_executable(kernels.source(c, kernel_set, self.world, self.rank, stamps))
        self.grid = kernels.workgroups(c, self.world)
        part = shard(weights, self.rank, self.world)
        self.weights = {name: device.upload(np.ascontiguousarray(getattr(part, name), np.float32))
                        for name in ("embed", "attn_norm", "qkv", "wo", "ffn_norm", "w1", "w3", "w2", "final_norm",
                                     "output", "rope")}
        cache_bytes = 4 * c.layers * c.max_sequence * c.dim // self.world
        self.keys, self.values = device.allocate(cache_bytes), device.allocate(cache_bytes)
        self.state = device.allocate(4 * STATE_WORDS)
        self.token_buffer = device.allocate(4 * c.max_sequence)
        self.logit_buffer = device.allocate(4 * c.vocab)
        # (split: the rank's logits, which an all_gather at the end of a submission puts into logit_buffer)
        self.rank_logits = device.allocate(4 * c.vocab // self.world) if communicator else self.logit_buffer
        self.step_buffer = self.recorded(loop=False)
        self.command_buffer = self.recorded(loop=True) if device_loops else self.step_buffer
        self.position = 0
        self.prompt_length = 0

    def layer(self, whole: hal.Buffer, layer: int) -> hal.BufferRef:
        """Layer `layer`'s part of a buffer stacked by layer (a weight, or the key or value cache)."""
        size = whole.size // self.config.layers
        return hal.ref(whole, layer * size, size)

    def recorded(self, loop: bool) -> hal.CommandBuffer:
        """A reusable command buffer with the steps recorded (`record`)."""
        cb = self.device.create_command_buffer(mode="reusable", constant_capacity=1)
        with cb:
            self.record(cb, loop)
        return cb

    def record(self, cb: hal.CommandBuffer, loop: bool = True) -> None:
        """Record the steps into `cb` (recording, with a constant slot: the steps to run); `loop` False records one
        step without the while regions (what `python -m hal trace decode` times command by command)."""
        c, world = self.config, self.world
        words, counts = kernels.attention_words(c, world)
        scratch = dict(x=cb.alloca(4 * c.dim), q=cb.alloca(4 * c.dim // world), g=cb.alloca(4 * c.ffn // world),
                       partials=cb.alloca(4 * words))
        cb.dispatch(self.exe, "start", self.grid["start"], (hal.constant_slot(0),), (self.state, self.token_buffer))
        if words > counts:  # (the attention's counts: kernels.attention_words)
            cb.fill_buffer(hal.ref(scratch["partials"].buffer, 4 * counts, 4 * (words - counts)), np.uint32(0))
        cb.execution_barrier()
        if not loop:
            self.record_step(cb, scratch)
        else:  # state[4]: at least LONG_LOOP steps left; state[5]: at least SHORT_LOOP; state[1]: steps left
            for flag, steps in ((4, kernels.LONG_LOOP), (5, kernels.SHORT_LOOP), (1, 1)):
                with cb.while_nonzero(hal.ref(self.state, 4 * flag, 4)):
                    for i in range(steps):
                        if i:
                            cb.execution_barrier()
                        self.record_step(cb, scratch)
        if self.communicator is not None:  # the last position's logits, whole on every rank
            cb.execution_barrier()
            cb.all_gather(self.communicator, self.rank_logits, self.logit_buffer, np.float32)

    def record_step(self, cb: hal.CommandBuffer, scratch: dict[str, hal.BufferRef]) -> None:
        """One position's dispatches (5 a layer and the logits'; split over ranks, an all_reduce after each
        row-parallel product and one of the argmax key), the intermediate vectors in `scratch` (cb's transients)."""
        c, exe, w, grid = self.config, self.exe, self.weights, self.grid
        x, q, g, partials = (scratch[name] for name in ("x", "q", "g", "partials"))
        for layer in range(c.layers):
            keys, values = self.layer(self.keys, layer), self.layer(self.values, layer)
            projection = (self.layer(w["qkv"], layer), x, self.layer(w["attn_norm"], layer), w["rope"], self.state,
                          q, keys, values)
            if layer:
                cb.execution_barrier()
                cb.dispatch(exe, "qkv_rope", grid["qkv_rope"], (), projection)
            else:
                cb.dispatch(exe, "embed_qkv_rope", grid["embed_qkv_rope"], (),
                            projection + (self.token_buffer, w["embed"]))
            cb.execution_barrier()
            cb.dispatch(exe, "attention", grid["attention"], (), (q, keys, values, self.state, partials))
            cb.execution_barrier()
            cb.dispatch(exe, "attn_out", grid["attn_out"], (), (partials, self.state, self.layer(w["wo"], layer), x))
            self.all_reduce(cb, x, np.float32)  # (the ranks' parts of the sum)
            cb.execution_barrier()
            cb.dispatch(exe, "ffn_in", grid["ffn_in"], (),
                        (self.layer(w["w1"], layer), self.layer(w["w3"], layer), x, self.layer(w["ffn_norm"], layer),
                         g))
            cb.execution_barrier()
            cb.dispatch(exe, "ffn_out", grid["ffn_out"], (), (self.layer(w["w2"], layer), g, x))
            self.all_reduce(cb, x, np.float32)
        cb.execution_barrier()
        cb.dispatch(exe, "logits_argmax", grid["logits_argmax"], (),
                    (w["output"], x, w["final_norm"], self.rank_logits, self.state, self.token_buffer))
        self.all_reduce(cb, hal.ref(self.state, 4 * KEY_WORD, 8), np.uint64, "max")  # (every rank's best: one token)

    def all_reduce(self, cb: hal.CommandBuffer, part: hal.BufferRef, dtype: type, op: str = "sum") -> None:
        """Split over ranks: after a barrier, `part` becomes the ranks' parts reduced by `op` (nothing on one
        device)."""
        if self.communicator is not None:
            cb.execution_barrier()
            cb.all_reduce(self.communicator, part, part, dtype, op)

    def dispatches_per_step(self) -> int:
        """The dispatches of one position: the step's, all but `start`."""
        return sum(c.kind == hal.CommandKind.DISPATCH for c in self.step_buffer.commands) - 1

    def reset(self, prompt: list[int]) -> None:
        """Start a sequence at `prompt` (at least one token)."""
        c = self.config
        if not 1 <= len(prompt) <= c.max_sequence or not all(0 <= t < c.vocab for t in prompt):
            raise hal.ValidationError(f"a prompt is 1 to {c.max_sequence} tokens below {c.vocab}; got {prompt!r}")
        tokens = np.zeros(c.max_sequence, np.uint32)
        tokens[:len(prompt)] = prompt
        self.token_buffer.write(tokens)
        self.state.write(np.array([0, 0, len(prompt), 0, 0, 0, 0, 0], np.uint32))
        self.position, self.prompt_length = 0, len(prompt)

    def check_room(self, steps: int) -> None:
        if self.position + steps > self.config.max_sequence - 1:
            raise hal.ValidationError(f"{steps} more steps from position {self.position} go past the last position, "
                             f"{self.config.max_sequence - 1}")

    def step(self) -> None:
        """Queue one position (one submission)."""
        self.generate(1)

    def generate(self, steps: int) -> None:
        """Queue `steps` positions: in one submission of the loops, or, for one step or without device loops, a
        submission of `step_buffer` each."""
        if steps < 1:
            raise hal.ValidationError(f"generate: steps must be at least 1, got {steps}")
        self.check_room(steps)
        if self.device_loops and steps > 1:
            try:
                self.device.queue_execute(self.command_buffer, constants=(steps,))
                self.position += steps
                self.loops_built = True
                return
            except hal.DeviceError as e:  # the first submission builds the loops: the one that may refuse them
                if self.communicator is None or self.loops_built or isinstance(e, (hal.DeviceLostError,
                                                                                   hal.OutOfMemoryError)):
                    raise
                self.without_loops(e)
        for _ in range(steps):
            self.device.queue_execute(self.step_buffer, constants=(1,))
        self.position += steps

    def without_loops(self, refusal: hal.DeviceError) -> None:
        """The backend refused the collectives inside the loops: the step without them, once per position."""
        self.device_loops, self.loops_refused = False, f"{type(refusal).__name__}: {refusal}"
        self.command_buffer.reset()
        self.command_buffer = self.step_buffer

    def tokens(self) -> list[int]:
        """The sequence so far: the prompt, then the tokens chosen (waits for the work queued; the last chosen is
        still in the state's argmax key, kernels.py)."""
        count = max(self.prompt_length, self.position + 1)
        tokens = self.token_buffer.read(np.uint32)[:count]
        if self.position >= self.prompt_length:
            tokens[self.position] = chosen_token(self.state.read(np.uint32))
        return [int(t) for t in tokens]

    def logits(self) -> np.ndarray:
        """The logits of the last position run (waits for the work queued)."""
        return self.logit_buffer.read(np.float32)
