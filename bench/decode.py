"""The decode example (issue 20) against PyTorch, side by side in one process on one GPU.

The same model and weights (examples.decode) run as: hal on CUDA with one submission per token (generate(1): the
decoder's one command buffer, its while loop run once), hal on CUDA with all tokens in one submission (one graph
launch), hal on the GPU's Vulkan driver (both ways),
PyTorch eager, and PyTorch CUDA graphs (one step captured, replayed per token). The PyTorch model is written with
torch ops, everything on the device (the position a tensor, the token fed back by argmax, attention over the whole
cache with the positions to come masked, as a captured graph needs fixed shapes). Per competitor: tokens/s (wall,
to the last token read), host µs per token (the calls that queue the work), GPU µs per token (CUDA events around
the run; the Vulkan rows report wall) and whether its tokens match the numpy reference.

    python -m bench.decode [--tokens 256] [--json PATH]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import hal
from bench import emit
from examples.decode import Decoder, random_weights, reference_generate
from examples.decode.demo import PROMPT

TOKENS = 256
TARGET_GRAPHS, TARGET_EAGER, TARGET_HOST_US = 1.0, 3.0, 5.0


class Timing:
    """One competitor's run of `steps` positions: wall, host and GPU seconds, and its tokens."""

    def __init__(self, steps: int, wall: float, host: float, gpu: float | None, tokens: list[int], expected: list[int]):
        self.row = dict(tokens_per_s=steps / wall, host_us=host / steps * 1e6,
                        gpu_us=None if gpu is None else gpu / steps * 1e6, match=tokens == expected)


def cuda_events(stream_handle: int):
    """(record, elapsed): CUDA events on a raw stream, through cuda-bindings."""
    from cuda.bindings import driver
    events = []

    def record() -> None:
        err, event = driver.cuEventCreate(0)
        driver.cuEventRecord(event, driver.CUstream(stream_handle))
        events.append(event)

    def elapsed() -> float:
        driver.cuEventSynchronize(events[-1])
        err, ms = driver.cuEventElapsedTime(events[-2], events[-1])
        for event in events:
            driver.cuEventDestroy(event)
        events.clear()
        return ms / 1e3

    return record, elapsed


def hal_rows(device: str, weights, steps: int, expected: list[int]) -> dict:
    rows = {}
    with hal.create_device(device) as dev:
        decoder = Decoder(dev, weights)
        events = cuda_events(dev.stream_handle) if dev.driver == "cuda" else None
        for mode in ("per_token", "one_submission"):
            for _ in range(2):  # the first builds and warms up
                decoder.reset(PROMPT)
                dev.synchronize()
                if events:
                    dev.activate()
                    events[0]()
                start = time.perf_counter()
                if mode == "per_token":
                    for _ in range(steps):
                        decoder.step()
                else:
                    decoder.generate(steps)
                queued = time.perf_counter()
                if events:
                    events[0]()
                tokens = decoder.tokens()
                done = time.perf_counter()
                gpu = events[1]() if events else None
            rows[f"hal {dev.driver} {mode.replace('_', ' ')}"] = Timing(steps, done - start, queued - start, gpu,
                                                                      tokens, expected).row
        name = dev.name
    return dict(rows=rows, name=name)


class TorchDecoder:
    """The decoder in torch ops on one CUDA device (see the module docstring)."""

    def __init__(self, weights, torch) -> None:
        self.torch = torch
        c = self.c = weights.config
        cuda = torch.device("cuda")

        def tensor(a):
            return torch.from_numpy(np.ascontiguousarray(a)).to(cuda)

        self.w = {name: tensor(getattr(weights, name)) for name in ("embed", "attn_norm", "qkv", "wo", "ffn_norm",
                                                                    "w1", "w3", "w2", "final_norm", "output")}
        self.cos, self.sin = tensor(weights.rope[..., 0]), tensor(weights.rope[..., 1])
        self.keys = torch.zeros(c.layers, c.max_sequence, c.dim, device=cuda)
        self.values = torch.zeros_like(self.keys)
        self.tokens = torch.zeros(c.max_sequence, dtype=torch.long, device=cuda)
        self.position = torch.zeros(1, dtype=torch.long, device=cuda)
        self.prompt_length = torch.zeros(1, dtype=torch.long, device=cuda)
        self.positions = torch.arange(c.max_sequence, device=cuda)

    def reset(self, prompt: list[int]) -> None:
        self.tokens.zero_()
        self.tokens[:len(prompt)] = self.torch.tensor(prompt, device=self.tokens.device)
        self.position.zero_()
        self.prompt_length.fill_(len(prompt))

    def rms(self, x, gain):
        return x * self.torch.rsqrt((x * x).mean() + 1e-5) * gain

    def rotate(self, v, cos, sin):
        pairs = v.view(-1, cos.shape[-1], 2)
        a, b = pairs[..., 0], pairs[..., 1]
        return self.torch.stack([a * cos - b * sin, a * sin + b * cos], dim=-1).view(-1)

    def step(self) -> None:
        torch, c, w = self.torch, self.c, self.w
        position = self.position
        x = w["embed"][self.tokens[position]].view(-1)
        cos, sin = self.cos[position].view(-1), self.sin[position].view(-1)
        future = (self.positions > position).view(1, -1)
        for layer in range(c.layers):
            q, k, v = (w["qkv"][layer] @ self.rms(x, w["attn_norm"][layer])).split(c.dim)
            self.keys[layer].index_copy_(0, position, self.rotate(k, cos, sin).view(1, -1))
            self.values[layer].index_copy_(0, position, v.view(1, -1))
            q = self.rotate(q, cos, sin).view(c.heads, 1, c.head_dim)
            keys = self.keys[layer].view(c.max_sequence, c.heads, c.head_dim).transpose(0, 1)
            values = self.values[layer].view(c.max_sequence, c.heads, c.head_dim).transpose(0, 1)
            scores = (q @ keys.transpose(1, 2)).view(c.heads, -1) * c.head_dim ** -0.5
            p = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
            x = x + w["wo"][layer] @ (p.view(c.heads, 1, -1) @ values).view(-1)
            h = self.rms(x, w["ffn_norm"][layer])
            x = x + w["w2"][layer] @ (torch.nn.functional.silu(w["w1"][layer] @ h) * (w["w3"][layer] @ h))
        following = position + 1
        chosen = torch.argmax(w["output"] @ self.rms(x, w["final_norm"])).view(1)
        self.tokens.index_copy_(0, following, torch.where(following < self.prompt_length, self.tokens[following],
                                                          chosen))
        self.position.add_(1)


def torch_rows(weights, steps: int, expected: list[int]) -> dict:
    try:
        import torch
    except ImportError:
        return {}
    if not torch.cuda.is_available():
        return {}
    model = TorchDecoder(weights, torch)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        model.reset(PROMPT)
        for _ in range(3):
            model.step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model.step()
    rows = {}
    for name, step in (("PyTorch eager", model.step), ("PyTorch CUDA graph", graph.replay)):
        for _ in range(2):
            model.reset(PROMPT)
            torch.cuda.synchronize()
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            start = time.perf_counter()
            for _ in range(steps):
                step()
            queued = time.perf_counter()
            end.record()
            tokens = model.tokens[:len(expected)].tolist()
            done = time.perf_counter()
            end.synchronize()
        rows[name] = Timing(steps, done - start, queued - start, begin.elapsed_time(end) / 1e3, tokens,
                            expected).row
    return rows


def run(tokens: int) -> dict:
    weights = random_weights()
    steps = len(PROMPT) - 1 + tokens
    expected, _ = reference_generate(weights, PROMPT, steps)
    rows, name = {}, "no GPU"
    for device in ("cuda", "vulkan"):
        try:
            found = hal_rows(device, weights, steps, expected)
        except hal.UnsupportedError:
            continue
        rows.update(found["rows"])
        name = found["name"] if device == "cuda" or name == "no GPU" else name
    rows.update(torch_rows(weights, steps, expected))
    meta = dict(device=name, date=time.strftime("%Y-%m-%d"), tokens=tokens, steps=steps)
    return dict(meta=meta, rows=rows)


def report(result: dict) -> str:
    meta, rows = result["meta"], result["rows"]
    lines = [f"## Decode on {meta['device']}, {meta['date']}", "",
             f"{meta['steps']} positions ({meta['tokens']} tokens after a {len(PROMPT)}-token prompt), the model of "
             f"examples/decode; GPU µs from CUDA events (Vulkan: none).", "",
             "| competitor | tokens/s | host µs/token | GPU µs/token | tokens match numpy |",
             "|---|---:|---:|---:|---|"]
    for name, r in rows.items():
        gpu = "-" if r["gpu_us"] is None else f"{r['gpu_us']:.1f}"
        lines.append(f"| {name} | {r['tokens_per_s']:.0f} | {r['host_us']:.2f} | {gpu} | "
                     f"{'yes' if r['match'] else 'NO'} |")
    best = rows.get("hal cuda one submission")
    graphs, eager = rows.get("PyTorch CUDA graph"), rows.get("PyTorch eager")
    if best and graphs and eager:
        lines += ["", f"Targets: hal CUDA tokens/s {best['tokens_per_s'] / graphs['tokens_per_s']:.2f}x PyTorch CUDA "
                  f"graphs (>= {TARGET_GRAPHS}: {'met' if best['tokens_per_s'] >= graphs['tokens_per_s'] else 'MISSED'}"
                  f"), {best['tokens_per_s'] / eager['tokens_per_s']:.2f}x PyTorch eager (>= {TARGET_EAGER}: "
                  f"{'met' if best['tokens_per_s'] >= TARGET_EAGER * eager['tokens_per_s'] else 'MISSED'}); host "
                  f"{best['host_us']:.2f} µs/token with k tokens per launch (<= {TARGET_HOST_US}: "
                  f"{'met' if best['host_us'] <= TARGET_HOST_US else 'MISSED'})."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=TOKENS)
    parser.add_argument("--json", default=None, help="also write the result as JSON here")
    args = parser.parse_args(argv)
    result = run(args.tokens)
    return emit(result, report(result), args.json)


if __name__ == "__main__":
    raise SystemExit(main())
