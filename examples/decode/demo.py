"""The decode demo (entry point `decode` of group `hal.demos`): `python -m hal demo decode [--device D] [--tokens
K] [--kernels native|triton]` runs the decoder on a device with a kernel set (kernels.source), its first use (build,
first submission) timed apart, then each way of submitting timed after that warm-up, its tokens checked against the
numpy reference (exit status 1 on a mismatch); `python -m hal trace decode` traces one step."""

from __future__ import annotations

import time

import numpy as np

import hal
from examples.decode.kernels import bytes_moved
from examples.decode.model import random_weights, reference_generate
from examples.decode.runner import Decoder
from hal.tracing import Trace, trace_recording

PROMPT = [1, 2, 3, 4]
LOGIT_TOLERANCE = 1e-3  # the largest logit difference allowed, relative to the largest logit


def run(device: str | None, tokens: int, kernel_set: str = "native") -> int:
    weights = random_weights()
    steps = len(PROMPT) - 1 + tokens
    if steps > weights.config.max_sequence - 1:
        raise hal.ValidationError(f"--tokens: at most {weights.config.max_sequence - len(PROMPT)} tokens fit after "
                                  f"the {len(PROMPT)}-token prompt")
    expected, expected_logits = reference_generate(weights, PROMPT, steps)
    with hal.create_device(device) as dev:
        print(f"device: {dev.driver}: {dev.name}, kernels: {kernel_set}")
        start = time.perf_counter()
        decoder = Decoder(dev, weights, kernel_set)
        built = time.perf_counter()
        decoder.reset(PROMPT)
        decoder.generate(steps)
        ok = decoder.tokens() == expected
        first = time.perf_counter()
        print(f"first use (not in the timings below): build {built - start:.3f} s (load the kernels, upload the "
              f"weights, record), first submission of {steps} positions {first - built:.3f} s (the backend's "
              f"instantiation included)")
        for mode in ("k tokens per submission", "one submission per token"):
            decoder.reset(PROMPT)
            dev.synchronize()
            start = time.perf_counter()
            if mode.startswith("k"):
                decoder.generate(steps)
            else:
                for _ in range(steps):
                    decoder.step()
            queued = time.perf_counter()
            got = decoder.tokens()
            done = time.perf_counter()
            error = float(np.max(np.abs(decoder.logits() - expected_logits)))
            same = got == expected and error <= LOGIT_TOLERANCE * float(np.max(np.abs(expected_logits)))
            ok = ok and same
            print(f"{mode}: {steps / (done - start):.0f} tokens/s, host {(queued - start) / steps * 1e6:.1f} "
                  f"us/token; {len(got) - len(PROMPT)} tokens {'match' if same else 'DIFFER FROM'} numpy "
                  f"(largest logit difference {error:.2g})")
        print(f"tokens: {got[len(PROMPT):]}")
    return 0 if ok else 1


def kernel_table(decoder: Decoder, commands: list, command_us: list[float], position: int) -> str:
    """The traced step's dispatches: each one's time run alone beside the fewest bytes it moves at `position` and
    the bandwidth that is (a time run alone includes what running alone adds: see hal.tracing)."""
    lines = ["| command | µs alone | bytes | GB/s |", "|---|---:|---:|---:|"]
    for command, us in zip(commands, command_us):
        name = command.export.name
        moved = bytes_moved(decoder.config, name, position)
        lines.append(f"| #{command.index} {name} | {us:.1f} | {moved / 1e3:.0f} KB | {moved / us / 1e3:.0f} |")
    return "\n".join(lines)


def trace(dev: hal.Device) -> tuple[str, str, Trace, hal.CommandBuffer, str]:
    """One step at position 64, recorded without the loops and traced command by command (hal.tracing): its name,
    title, trace, command buffer, and the table of each dispatch's time beside the bytes it moves."""
    decoder = Decoder(dev, random_weights())
    decoder.reset(PROMPT)
    decoder.generate(64)
    result, cb = trace_recording(dev, lambda cb: decoder.record(cb, loop=False), constants=(1,), constant_capacity=1)
    table = kernel_table(decoder, cb.commands, result.command_us, decoder.position + 1)
    return "decode-step", "one decode step (examples/decode), 4 layers", result, cb, table
