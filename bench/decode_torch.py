"""The decode example's model in PyTorch, five ways: the competitor rows bench/decode.py prints beside hal's.

The model is examples/decode/model.py's (`Reference` is the numerical spec), in float32 on one device, written as a
PyTorch engineer writes a decode step: the weights as contiguous tensors (w1 and w3 concatenated once, so one matvec
computes both), F.rms_norm, one matvec for q|k|v, one complex multiply that rotates q and k (the table's v rows are
1 + 0i, which leaves v exact and puts the rotated k next to v), one copy per layer writing k and v into a
preallocated cache (per layer: k|v, batch, heads, max_sequence, head_dim), attention, residuals by torch.addmv, the
logits' argmax. The next token stays on the device; the host reads the tokens back once, after the run. While the
rows run, TF32 is off (matmuls and cuDNN, float32 matmul precision "highest"): its 10-bit mantissa would change the
argmax, and every row's tokens must equal numpy's.

- PyTorch eager: the step with the position a host int: the cache sliced to the positions so far, attention by
  F.scaled_dot_product_attention (one call; its default scale is the model's), the prompt forced by the host's
  count (argmax(out=) writes the next token only past the prompt), no host sync.
- PyTorch CUDA graph per token: the step with the position a device tensor that the step advances, the prompt
  forced on the device (torch.where), attention over a fixed bucket of 64 cache rows with those past the position
  masked, as baddbmm (the mask and the scale in the one matmul), softmax and bmm; one graph captured per bucket
  (after a warm-up on a side stream, all in one memory pool), the host replaying the graph of the bucket that
  covers the position.
- torch.compile, CUDA graph per token: that step through torch.compile (default mode, fullgraph, one compile per
  bucket length; the rotation in real arithmetic, since Inductor generates no code for complex numbers), captured
  by hand as in the row before.
- torch.compile reduce-overhead: that step through torch.compile(mode="reduce-overhead"), Inductor's own CUDA
  graphs, called once per token (every tensor marked static, so its graphs hold the mutated state).
- torch.compile, k tokens per CUDA graph: the compiled step captured 64 times in one graph per bucket (a remainder
  in a graph of its own length): a run replays ceil(steps / 64) graphs.

Attention is whichever was faster where it runs, timed on an H200 (torch 2.11): float32 SDPA takes the
memory-efficient kernel, 9.6, 37 and 58 µs of GPU per call over 64, 320 and 512 rows in a graph against 7.0, 9.0 and
9.5 µs for baddbmm, softmax and bmm; in eager mode the host is the bound, and SDPA's one call took 37 µs against 115.

Timing, per row: the first-call work (compiles, autotuning, captures of every bucket the run needs), one warm-up
run, then `runs` timed runs, each from a reset of the tokens and the position; medians reported. tokens/s: steps
over the wall from the first queued call to the tokens read back on the host; host µs per token: the Python calls
that queue the run; GPU µs per token: CUDA events recorded around the run; kernels per token: CUDA kernels (not
copies or memsets) that torch.profiler sees in one step called outside any graph (reduce-overhead's: in its graph's
replay), counted in a second pass once every row is timed; compile_s: the first-call work and the warm-up run's
excess over a timed run's median (with Inductor's caches as the rows before left them). torch is imported inside
functions, so this module imports without it.
"""
from __future__ import annotations

import contextlib
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from bench.kernel_profile import device_kernels
from examples.decode.model import EPSILON, Weights

if TYPE_CHECKING:
    import torch

EAGER = "PyTorch eager"
GRAPH = "PyTorch CUDA graph per token"
COMPILED_GRAPH = "torch.compile, CUDA graph per token"
REDUCE_OVERHEAD = "torch.compile reduce-overhead"
K_PER_GRAPH = "torch.compile, k tokens per CUDA graph"
ROWS = (EAGER, GRAPH, COMPILED_GRAPH, REDUCE_OVERHEAD, K_PER_GRAPH)

T = TypeVar("T")
BUCKET = 64  # positions per attention length bucket, and steps per graph in the k-tokens row
WARMUP_CALLS = 3  # calls of a step on a side stream before its capture (the first compiles and autotunes)


class TorchDecoder:
    """The model's weights and the decode state (tokens, position, KV cache) as torch tensors on one device.

    Every tensor is its own allocation (no two inputs of a compiled step alias) and is marked static for
    torch.compile, so reduce-overhead's CUDA graphs read the weights and update the state in place. Split over
    `world` ranks (tensor parallelism, as hal's decoder splits it): `weights` is this rank's shard (model.shard),
    the cache holds its heads, the products of wo and w2 are summed over `group` by torch's functional
    all_reduce (which torch.compile traces and a CUDA graph captures) before their residual is added, and the logits
    of the rank's rows of the vocabulary are gathered from every rank before the argmax. `symmetric`: the products
    summed instead by PyTorch's one-shot all_reduce over symmetric memory (torch.ops.symm_mem, what serving stacks
    use for small all_reduces between the GPUs of one machine), through one buffer of the group's."""

    def __init__(self, weights: Weights, prompt: list[int], device: str, complex_rope: bool = True, world: int = 1,
                 group: Any = None, symmetric: bool = False) -> None:
        import torch

        c = self.config = weights.config
        half = c.head_dim // 2
        self.heads, self.attn, self.ffn, self.group = c.heads // world, c.dim // world, c.ffn // world, group
        if symmetric and group is None:
            raise ValueError("symmetric all_reduces need a process group")
        self.prompt, self.cuda = list(prompt), torch.device(device).type == "cuda"

        def tensor(a: np.ndarray) -> torch.Tensor:
            return torch.tensor(a, device=device)

        self.embed = tensor(weights.embed)
        self.final_norm = tensor(weights.final_norm)
        self.output = tensor(weights.output)
        layers = range(c.layers)
        self.attn_norm = [tensor(weights.attn_norm[i]) for i in layers]
        self.qkv = [tensor(weights.qkv[i]) for i in layers]
        self.wo = [tensor(weights.wo[i]) for i in layers]
        self.ffn_norm = [tensor(weights.ffn_norm[i]) for i in layers]
        self.w13 = [tensor(np.concatenate([weights.w1[i], weights.w3[i]])) for i in layers]
        self.w2 = [tensor(weights.w2[i]) for i in layers]
        rope = torch.view_as_complex(torch.from_numpy(weights.rope))  # (max_sequence, half): cos + i sin
        ones = torch.ones(c.max_sequence, self.heads, half, dtype=rope.dtype)
        rope = torch.cat([rope[:, None].expand(-1, 2 * self.heads, -1), ones], dim=1)  # (max_sequence, 3 heads, half)
        self.complex_rope = complex_rope
        self.rope = (rope if complex_rope else torch.view_as_real(rope)).contiguous().to(device)
        self.mask = torch.full((c.max_sequence, c.max_sequence), float("-inf"), device=device).triu(1)
        self.cache = [torch.zeros(2, 1, self.heads, c.max_sequence, c.head_dim, device=device) for _ in layers]
        length = max(len(prompt), c.max_sequence + 1)
        self.initial = torch.tensor(prompt + [0] * (length - len(prompt)))
        self.tokens = torch.zeros(length, dtype=torch.long, device=device)
        self.position = torch.zeros(1, dtype=torch.long, device=device)
        self.prompt_length = torch.tensor([len(prompt)], device=device)
        self.symmetric = _symmetric_buffer(c.dim, device, group) if symmetric else None
        for t in [self.embed, self.final_norm, self.output, self.rope, self.mask, self.tokens, self.position,
                  self.prompt_length, *self.attn_norm, *self.qkv, *self.wo, *self.ffn_norm, *self.w13, *self.w2,
                  *self.cache, *([self.symmetric] if symmetric else [])]:
            torch._dynamo.mark_static_address(t)

    def reset(self) -> None:
        """The prompt's tokens in place and the position at 0 (the cache needs no clearing: rows past the position
        are sliced off or masked)."""
        self.tokens.copy_(self.initial)
        self.position.zero_()

    def step_at(self, position: int, choose: bool) -> None:
        """One position, known to the host: the cache sliced to the positions so far; the argmax written as the next
        token when `choose` (past the prompt)."""
        import torch
        import torch.nn.functional as F

        c = self.config
        following = position + 1
        x = self.embed.index_select(0, self.tokens[position:following]).view(c.dim)
        rope = self.rope[position]
        for layer in range(c.layers):
            rotated = self._rotated(x, layer, rope)
            kv = self.cache[layer]
            kv[:, :, :, position].copy_(rotated[1:].unsqueeze(1))
            attended = F.scaled_dot_product_attention(rotated[0].view(1, self.heads, 1, c.head_dim),
                                                      kv[0, :, :, :following], kv[1, :, :, :following])
            x = self._mlp(self._add_product(x, self.wo[layer], attended.view(self.attn)), layer)
        if choose:
            torch.argmax(self._logits(x), out=self.tokens[following])

    def step(self, length: int) -> None:
        """One position, held on the device (advanced here), attending over the cache's first `length` rows with
        those past the position masked (baddbmm adds the mask to the scaled scores): fixed shapes and no host
        values, so a CUDA graph can hold it."""
        import torch

        c = self.config
        position = self.position
        x = self.embed.index_select(0, self.tokens.index_select(0, position)).view(c.dim)
        rope = self.rope.index_select(0, position)[0]
        mask = self.mask[:, :length].index_select(0, position).view(1, 1, length)
        for layer in range(c.layers):
            rotated = self._rotated(x, layer, rope)
            kv = self.cache[layer]
            kv.index_copy_(3, position, rotated[1:].view(2, 1, self.heads, 1, c.head_dim))
            keys, values = kv[0, 0, :, :length], kv[1, 0, :, :length]
            scores = torch.baddbmm(mask, rotated[0].view(self.heads, 1, c.head_dim), keys.mT,
                                   alpha=c.head_dim ** -0.5)
            attended = torch.bmm(torch.softmax(scores, dim=-1), values)
            x = self._mlp(self._add_product(x, self.wo[layer], attended.view(self.attn)), layer)
        chosen = self._logits(x).argmax(0, keepdim=True)
        position.add_(1)
        self.tokens.index_copy_(0, position, torch.where(position < self.prompt_length,
                                                         self.tokens.index_select(0, position), chosen))

    def _rotated(self, x: torch.Tensor, layer: int, rope: torch.Tensor) -> torch.Tensor:
        """q, k and v (3, heads, head_dim), q and k rotated: one complex multiply, or for Inductor (which generates
        no code for complex numbers, calling aten's kernel instead) the same in real arithmetic, which it fuses."""
        import torch
        import torch.nn.functional as F

        c = self.config
        qkv = torch.mv(self.qkv[layer], F.rms_norm(x, (c.dim,), self.attn_norm[layer], EPSILON))
        pairs = qkv.view(3 * self.heads, c.head_dim // 2, 2)
        if self.complex_rope:
            return torch.view_as_real(torch.view_as_complex(pairs) * rope).view(3, self.heads, c.head_dim)
        (a, b), (cos, sin) = pairs.unbind(-1), rope.unbind(-1)
        return torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).view(3, self.heads, c.head_dim)

    def _mlp(self, x: torch.Tensor, layer: int) -> torch.Tensor:
        import torch
        import torch.nn.functional as F

        c = self.config
        gate, up = torch.mv(self.w13[layer], F.rms_norm(x, (c.dim,), self.ffn_norm[layer], EPSILON)).split(self.ffn)
        return self._add_product(x, self.w2[layer], F.silu(gate) * up)

    def _add_product(self, x: torch.Tensor, w: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """x + w @ v, the product summed over the ranks when split."""
        import torch

        if self.group is None:
            return torch.addmv(x, w, v)
        if self.symmetric is not None:
            return x + torch.ops.symm_mem.one_shot_all_reduce_copy(self.symmetric, torch.mv(w, v), "sum",
                                                                   self.group.group_name)
        from torch.distributed import _functional_collectives as collectives
        return x + collectives.all_reduce(torch.mv(w, v), "sum", self.group)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        """The logits; split, the rank's rows of the vocabulary (its shard of the output projection) gathered from
        every rank in rank order (torch's functional all_gather, traced and captured as the all_reduces are)."""
        import torch
        import torch.nn.functional as F

        logits = torch.mv(self.output, F.rms_norm(x, (self.config.dim,), self.final_norm, EPSILON))
        if self.group is None:
            return logits
        from torch.distributed import _functional_collectives as collectives
        gather = getattr(collectives, "all_gather_single", None) or collectives.all_gather_tensor  # (newer torch)
        return gather(logits, 0, self.group)


def _symmetric_buffer(size: int, device: str, group: Any) -> Any:
    """`size` float32s of symmetric memory on `device`, rendezvoused over `group` (a collective)."""
    import torch
    from torch.distributed import _symmetric_memory as symm_mem

    if hasattr(symm_mem, "enable_symm_mem_for_group"):  # (needed before rendezvous in older torch, a no-op later)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(group.group_name)
    buffer = symm_mem.empty(size, dtype=torch.float32, device=device)
    symm_mem.rendezvous(buffer, group.group_name)
    return buffer


class StageError(Exception):
    """A row's failure, its message naming the stage that failed."""


@contextlib.contextmanager
def _stage(what: str) -> Iterator[None]:
    try:
        yield
    except StageError:
        raise
    except Exception as e:
        raise StageError(f"{what} failed: {_one_line(e)}") from e


def _one_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0][:300] if lines else ''}"


class Row:
    """How one competitor queues a run's `steps` positions, after prepare() did its first-call work."""

    def __init__(self, decoder: TorchDecoder, steps: int) -> None:
        self.decoder, self.steps = decoder, steps
        # for the profiler: the first position whose argmax is the next token (or the last one forwarded)
        self.profile_position = min(len(decoder.prompt), steps) - 1
        max_sequence = decoder.config.max_sequence
        # (first position, positions, attention length) of each bucket the run covers
        self.buckets = [(start, min(BUCKET, steps - start), min(start + BUCKET, max_sequence))
                        for start in range(0, steps, BUCKET)]
        self.lengths = [self.buckets[p // BUCKET][2] for p in range(steps)]

    def prepare(self) -> None:
        """Compiles and captures (nothing for eager)."""

    def notes(self) -> list[str]:
        """What the reader of the row's numbers should know, once it ran."""
        return []

    def run(self) -> None:
        raise NotImplementedError

    def one_step(self) -> Callable[[], None]:
        """One step outside any graph, for the profiler: sets the position, returns the call."""
        raise NotImplementedError


class Eager(Row):
    """TorchDecoder.step_at per position, the host counting positions."""

    def run(self) -> None:
        step, prompt = self.decoder.step_at, len(self.decoder.prompt)
        for position in range(self.steps):
            step(position, position + 1 >= prompt)

    def one_step(self) -> Callable[[], None]:
        return lambda: self.decoder.step_at(self.profile_position, True)


class Stepped(Row):
    """A row built on `fn`, the device-position step (TorchDecoder.step, or it compiled)."""

    def __init__(self, decoder: TorchDecoder, steps: int, fn: Callable[[int], None], compiled: bool) -> None:
        super().__init__(decoder, steps)
        self.fn, self.compiled = fn, compiled
        self.replays: list[Callable[[], None]] = []

    def one_step(self) -> Callable[[], None]:
        self.decoder.position.fill_(self.profile_position)
        return lambda: self.fn(self.lengths[self.profile_position])

    def capture(self, start: int, length: int, calls: int, pool: Any) -> Callable[[], None]:
        """The replay of a CUDA graph of `calls` steps over `length` cache rows, captured after WARMUP_CALLS at
        position `start` on a side stream (cuBLAS handles, compiles and autotuning happen there, not in the
        capture)."""
        import torch

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with _stage("torch.compile" if self.compiled else "warm-up"), torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                self.decoder.position.fill_(start)
                self.fn(length)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with _stage("CUDA graph capture"), torch.cuda.graph(graph, pool=pool):
            for _ in range(calls):
                self.fn(length)
        return graph.replay


class PerToken(Stepped):
    """A step per token: the captured graph of the position's bucket replayed (on CPU: the compiled step called,
    no graph)."""

    def prepare(self) -> None:
        if self.decoder.cuda:
            pool = _pool()
            self.replays = [self.capture(start, length, 1, pool) for start, _, length in self.buckets]
            return
        with _stage("torch.compile"):
            for start, _, length in self.buckets:
                self.decoder.position.fill_(start)
                self.fn(length)

    def notes(self) -> list[str]:
        return [] if self.replays else ["on CPU: compiled, called once per token, no CUDA graph"]

    def run(self) -> None:
        if self.replays:
            replays = self.replays
            for position in range(self.steps):
                replays[position // BUCKET]()
        else:
            fn = self.fn
            for length in self.lengths:
                fn(length)


class PerBucket(Stepped):
    """One graph per bucket holding all of its positions' steps (the compiled step captured that many times)."""

    def prepare(self) -> None:
        pool = _pool()
        self.replays = [self.capture(start, length, count, pool) for start, count, length in self.buckets]

    def run(self) -> None:
        for replay in self.replays:
            replay()


class ReduceOverhead(Stepped):
    """The reduce-overhead function called per token, each call a new step for Inductor's CUDA graph trees."""

    def prepare(self) -> None:
        import torch

        self.skips = _cudagraph_skips()
        with _stage("torch.compile"):
            for start, _, length in self.buckets:
                for _ in range(2):  # the first call compiles and warms up, the second records the graph
                    self.decoder.position.fill_(start)
                    torch.compiler.cudagraph_mark_step_begin()
                    self.fn(length)

    def notes(self) -> list[str]:
        skipped = _cudagraph_skips() - self.skips
        return [f"Inductor skipped its CUDA graphs {skipped} times (TORCH_LOGS=cudagraphs says why)"] * bool(skipped) \
            + ["kernels counted in its CUDA graph's replay"]

    def run(self) -> None:
        import torch

        mark, fn = torch.compiler.cudagraph_mark_step_begin, self.fn
        for length in self.lengths:
            mark()
            fn(length)

    def one_step(self) -> Callable[[], None]:
        import torch

        step = super().one_step()

        def marked() -> None:
            torch.compiler.cudagraph_mark_step_begin()
            step()

        return marked


def _cudagraph_skips() -> int:
    """How many times Inductor so far gave up CUDA graphs for a compiled graph (it logs why)."""
    from torch._dynamo.utils import counters

    return counters["inductor"]["cudagraph_skips"]


def _pool() -> Any:
    """One memory pool for a row's graphs: they never run concurrently and leave no tensor alive past a replay."""
    import torch

    return torch.cuda.graph_pool_handle()


def _error_row(error: str) -> dict:
    return dict(tokens_per_s=None, host_us=None, gpu_us=None, kernels=None, match=False, compile_s=None, runs=[],
                error=error, note=None)


def _timed_run(row: Row, count: int) -> tuple[float, float, float | None, list[int]]:
    """(wall, host, GPU seconds, tokens) of one run from a reset, the device idle before."""
    import torch

    decoder, cuda = row.decoder, row.decoder.cuda
    decoder.reset()
    if cuda:
        torch.cuda.synchronize()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
    start = time.perf_counter()
    row.run()
    queued = time.perf_counter()
    if cuda:
        end.record()
    tokens = decoder.tokens[:count].tolist()
    done = time.perf_counter()
    gpu = None
    if cuda:
        end.synchronize()
        gpu = begin.elapsed_time(end) / 1e3
    return done - start, queued - start, gpu, tokens


def _kernels(row: Row) -> int:
    """CUDA kernels in one step, from torch.profiler (copies and memsets left out)."""
    step = row.one_step()
    return sum(count for count, _ in (device_kernels(step) or {}).values())


def _measure(row: Row, steps: int, expected: list[int], runs: int) -> dict:
    """The row's numbers: prepare(), a warm-up run and `runs` timed runs (its kernels are torch_kernel_counts')."""
    started = time.perf_counter()
    row.prepare()
    prepared = time.perf_counter() - started
    with _stage("run"):
        timings = [_timed_run(row, len(expected)) for _ in range(runs + 1)]
    timed = timings[1:]
    wall = statistics.median(t[0] for t in timed)
    cuda = row.decoder.cuda
    return dict(tokens_per_s=steps / wall, host_us=statistics.median(t[1] for t in timed) / steps * 1e6,
                gpu_us=statistics.median(t[2] for t in timed) / steps * 1e6 if cuda else None, kernels=None,
                match=all(t[3] == expected for t in timings),
                compile_s=None if isinstance(row, Eager) else prepared + max(0.0, timings[0][0] - wall),
                runs=[steps / t[0] for t in timed], error=None, note="; ".join(row.notes()) or None)


def _count(row: Row) -> int | str:
    """prepare(), then the kernels of one step from the profiler, or why there is no count."""
    if not row.decoder.cuda:
        return "no kernel count on CPU"
    row.prepare()
    try:
        return _kernels(row) or "the profiler saw no kernels"
    except Exception as e:  # the row's numbers stand without its kernel count
        return f"profiler failed: {_one_line(e)}"


def _row(name: str, decoder: TorchDecoder, steps: int) -> Row:
    import torch

    if name == EAGER:
        return Eager(decoder, steps)
    if name == GRAPH:
        return PerToken(decoder, steps, decoder.step, compiled=False)
    mode = "reduce-overhead" if name == REDUCE_OVERHEAD else None
    fn = torch.compile(decoder.step, mode=mode, fullgraph=True, dynamic=False)
    kind = {COMPILED_GRAPH: PerToken, REDUCE_OVERHEAD: ReduceOverhead, K_PER_GRAPH: PerBucket}[name]
    return kind(decoder, steps, fn, compiled=True)


@contextlib.contextmanager
def _float32_only() -> Iterator[None]:
    """TF32 off for matmuls and cuDNN (restored after), and Inductor's advice to turn it on silenced."""
    import torch

    flags = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="TensorFloat32 tensor cores")
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = flags[:2]
        torch.set_float32_matmul_precision(flags[2])


def torch_rows(weights: Weights, prompt: list[int], steps: int, expected: list[int], runs: int = 5,
               device: str = "cuda", rows: tuple[str, ...] | None = None, world: int = 1,
               group: Any = None, symmetric: bool = False) -> dict[str, dict]:
    """The rows named in `rows` (default: all of ROWS) for `steps` positions forwarded from position 0 of `prompt`;
    `expected` is reference_generate's token list; split over `world` ranks (TorchDecoder), `weights` is this
    rank's shard and `group` the ranks' process group (`symmetric`: its all_reduces over symmetric memory). A row
    that cannot run or fails has `error` set, and the others go on. Their kernels per token are left to
    torch_kernel_counts, called once every timing in the process is done: a profiler session slows every launch
    after it (on an H200, 2026-11-29: an empty kernel's node in a CUDA graph from 0.50 to 0.91 µs)."""
    c = weights.config
    if not 1 <= steps <= c.max_sequence or not prompt or len(expected) != max(len(prompt), steps + 1):
        raise ValueError(f"steps must be in 1..{c.max_sequence}, the prompt not empty and expected "
                         f"max(len(prompt), steps + 1) tokens long")
    found = _each_row(weights, prompt, steps, device, rows, lambda row: _measure(row, steps, expected, runs),
                      world, group, symmetric)
    return {name: _error_row(r) if isinstance(r, str) else r for name, r in found.items()}


def torch_kernel_counts(weights: Weights, prompt: list[int], steps: int, device: str = "cuda",
                        rows: tuple[str, ...] | None = None) -> dict[str, int | str]:
    """Each row's CUDA kernels in one step (compiled and captured again), or why there is no count."""
    return _each_row(weights, prompt, steps, device, rows, _count)


def _each_row(weights: Weights, prompt: list[int], steps: int, device: str, rows: tuple[str, ...] | None,
              work: Callable[[Row], T], world: int = 1, group: Any = None,
              symmetric: bool = False) -> dict[str, T | str]:
    """work(row) for each row named (default: all of ROWS), each set up afresh; a row that cannot run or fails
    gives why instead, and the others go on."""
    names = ROWS if rows is None else rows
    try:
        import torch
    except ImportError:
        return {name: "torch is not installed" for name in names}
    cuda = torch.device(device).type == "cuda"
    if cuda and not torch.cuda.is_available():
        return {name: "needs a CUDA device (torch.cuda.is_available() is False)" for name in names}
    results: dict[str, T | str] = {}
    with _float32_only():
        for name in names:
            if not cuda and name not in (EAGER, COMPILED_GRAPH):
                results[name] = "needs a CUDA device"
                continue
            compiles = name not in (EAGER, GRAPH)
            try:
                if compiles:
                    torch._dynamo.reset()  # a fresh compile for each row (Inductor's caches on disk stay)
                with _stage("setup"):
                    row = _row(name, TorchDecoder(weights, prompt, device, complex_rope=not compiles, world=world,
                                                  group=group, symmetric=symmetric), steps)
                with torch._dynamo.config.patch(recompile_limit=max(8, len(row.buckets) + 1)):
                    results[name] = work(row)
            except StageError as e:
                results[name] = str(e)
            except Exception as e:  # one row's failure must not stop the others
                results[name] = f"{name} failed: {_one_line(e)}"
            finally:
                if compiles:
                    torch._dynamo.reset()
    return results
