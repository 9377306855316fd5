"""The decode demo (entry point `decode` of group `hal.demos`): `python -m hal demo decode [--device D] [--tokens
K] [--kernels native|triton] [--ranks N]` runs the decoder on a device with a kernel set (kernels.source), or split
over N devices of the driver joined by a communicator (runner.Decoder), its first use (build, first submission)
timed apart, then each way of submitting timed after that warm-up, every rank's tokens checked against the numpy
reference (exit status 1 on a mismatch); `python -m hal trace decode` traces one step."""

from __future__ import annotations

import contextlib
import time

import numpy as np

import hal
from examples.decode.kernels import bytes_moved
from examples.decode.model import random_weights, reference_generate
from examples.decode.runner import Decoder
from hal.tracing import Trace, trace_recording

PROMPT = [1, 2, 3, 4]
LOGIT_TOLERANCE = 1e-3  # the largest logit difference allowed, relative to the largest logit


def run(device: str | None, tokens: int, kernel_set: str = "native", ranks: int = 1) -> int:
    weights = random_weights()
    steps = len(PROMPT) - 1 + tokens
    if steps > weights.config.max_sequence - 1:
        raise hal.ValidationError(f"--tokens: at most {weights.config.max_sequence - len(PROMPT)} tokens fit after "
                                  f"the {len(PROMPT)}-token prompt")
    if ranks < 1:
        raise hal.ValidationError(f"--ranks: at least 1, got {ranks}")
    expected, expected_logits = reference_generate(weights, PROMPT, steps)
    with contextlib.ExitStack() as stack:
        devices = [stack.enter_context(hal.create_device(name)) for name in rank_devices(device, ranks)]
        comm = stack.enter_context(hal.create_communicator(devices)) if ranks > 1 else None
        dev = devices[0]
        print(f"device: {dev.driver}: {dev.name}{f' x {ranks} ranks' if comm else ''}, kernels: {kernel_set}")
        start = time.perf_counter()
        decoders = [Decoder(d, weights, kernel_set, comm) for d in devices]
        built = time.perf_counter()
        for decoder in decoders:
            decoder.reset(PROMPT)
            decoder.generate(steps)
        ok = all(decoder.tokens() == expected for decoder in decoders)
        first = time.perf_counter()
        print(f"first use (not in the timings below): build {built - start:.3f} s (load the kernels, upload the "
              f"weights, record), first submission of {steps} positions {first - built:.3f} s (the backend's "
              f"instantiation included)")
        for mode in ("k tokens per submission", "one submission per token"):
            for decoder in decoders:
                decoder.reset(PROMPT)
            for d in devices:
                d.synchronize()
            start = time.perf_counter()
            for decoder in decoders:  # each rank queues its own; none waits for another
                if mode.startswith("k"):
                    decoder.generate(steps)
                else:
                    for _ in range(steps):
                        decoder.step()
            queued = time.perf_counter()
            got = [decoder.tokens() for decoder in decoders]  # every rank's, read once
            done = time.perf_counter()
            error = max(float(np.max(np.abs(decoder.logits() - expected_logits))) for decoder in decoders)
            same = all(tokens == expected for tokens in got) and \
                error <= LOGIT_TOLERANCE * float(np.max(np.abs(expected_logits)))
            ok = ok and same
            print(f"{mode}: {steps / (done - start):.0f} tokens/s, host {(queued - start) / steps * 1e6:.1f} "
                  f"us/token; {len(got[0]) - len(PROMPT)} tokens {'match' if same else 'DIFFER FROM'} numpy "
                  f"(largest logit difference {error:.2g})")
        print(f"tokens: {got[0][len(PROMPT):]}")
    return 0 if ok else 1


def rank_devices(device: str | None, ranks: int) -> list[str | None]:
    """The devices of the ranks: `device` alone for one; for several, that many host devices, or CUDA's first GPUs."""
    if ranks == 1:
        return [device]
    driver = (device or "host").split(":")[0]
    if driver not in ("host", "cuda"):
        raise hal.ValidationError(f"--ranks: the decode splits over host or CUDA devices (collectives); got {device}")
    return ["host"] * ranks if driver == "host" else [f"cuda:{i}" for i in range(ranks)]


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
