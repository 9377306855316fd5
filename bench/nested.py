"""Nested command buffers against the same commands recorded flat (issue 19), side by side on one device.

A piece of k dispatches (a barrier between each) is recorded once into a reusable command buffer through slots;
an outer command buffer, itself bound through two slots, then either calls execute_commands(piece, (slot 0,
slot 1)) or records the k dispatches itself. Per command: host µs to record and end the outer command buffer
(execute_commands records the piece's commands twice: once into a scratch command buffer, so that a refusal leaves
the outer one as it was, then for real), and host µs of its first submission (CUDA builds and instantiates the
graph there: a nested piece is one child graph node). Per submission: wall µs of an unchanged one, and host µs of
one that swaps the two buffers (CUDA patches every node: flat, one exec node each; nested, hal's copy of the child
graph, then the exec's child node once).

On a Vulkan device with push descriptors, also the alternative to encoding nested commands inline that hal did not
take, measured with the compiled reference (bench/native/vulkan_reference.pyx): the k dispatches encoded into the
outer primary command buffer each time it is recorded, against encoded once into a secondary command buffer that
the primary executes (vkCmdExecuteCommands): host µs to record the primary, and wall µs per submission of it.

    python -m bench.nested [--device host] [--json PATH]
"""

from __future__ import annotations

import time
from array import array

import numpy as np

import hal
from bench import device_main, wall_us
from bench.native import reference
from tests.kernels import SOURCE

LENGTHS = (10, 100)
REPEATS, SUBMITS = 20, 50
ELEMENTS = 64


def record(cb: hal.CommandBuffer, exe: hal.Executable, bufs: list, length: int) -> None:
    for i in range(length):
        if i:
            cb.execution_barrier()
        cb.dispatch(exe, "add", (1, 1, 1), (ELEMENTS,), (bufs[i % 2], bufs[i % 2], bufs[(i + 1) % 2]))


def through_slots(cb: hal.CommandBuffer, exe: hal.Executable, piece, length: int) -> None:
    """The outer recording: the piece nested, or its commands recorded flat (None), on the outer slots 0 and 1."""
    slots = (hal.slot(0, 0, 4 * ELEMENTS), hal.slot(1, 0, 4 * ELEMENTS))
    if piece is None:
        record(cb, exe, list(slots), length)
    else:
        cb.execute_commands(piece, slots)


def measure(dev: hal.Device, exe: hal.Executable, piece, tables: tuple, length: int) -> dict:
    """Best host µs per command to record and end, and to submit first; wall µs per unchanged submission; host µs
    per submission that swaps the table."""
    record_best = first_best = float("inf")
    for _ in range(REPEATS):
        cb = dev.create_command_buffer(mode="reusable", binding_capacity=2)
        t0 = time.perf_counter()
        with cb:
            through_slots(cb, exe, piece, length)
        t1 = time.perf_counter()
        dev.queue_execute(cb, binding_table=tables[0])
        t2 = time.perf_counter()
        dev.synchronize()
        record_best, first_best = min(record_best, t1 - t0), min(first_best, t2 - t1)
    dev.synchronize()
    t0 = time.perf_counter()
    for i in range(SUBMITS):
        dev.queue_execute(cb, binding_table=tables[i % 2])
    swap = (time.perf_counter() - t0) / SUBMITS * 1e6
    dev.queue_execute(cb, binding_table=tables[0])
    return dict(record=record_best / length * 1e6, first=first_best / length * 1e6,
                wall=wall_us(dev, cb, SUBMITS, tables[0]), swap=swap)


def run(device: str | None) -> dict:
    with hal.create_device(device) as dev:
        exe = dev.load_executable(SOURCE)
        a, b = (dev.upload(np.arange(ELEMENTS, dtype=np.uint32)) for _ in range(2))
        tables = ((a, b), (b, a))
        rows = []
        for length in LENGTHS:
            piece = dev.create_command_buffer(mode="reusable", binding_capacity=2)
            with piece:
                record(piece, exe, [hal.slot(0, 0, 4 * ELEMENTS), hal.slot(1, 0, 4 * ELEMENTS)], length)
            rows.append(dict(commands=length, flat=measure(dev, exe, None, tables, length),
                             nested=measure(dev, exe, piece, tables, length)))
        secondary = secondary_rows(dev, exe, a, b)
        meta = dict(device=dev.name, driver=dev.driver, date=time.strftime("%Y-%m-%d"))
    return dict(meta=meta, rows=rows, secondary=secondary)


def secondary_rows(dev: hal.Device, exe: hal.Executable, a: hal.Buffer, b: hal.Buffer) -> list[dict] | None:
    """Vulkan with push descriptors and the compiled reference only (else None): per k, the inline and the
    secondary command buffer ways (see the module docstring)."""
    native = reference("vulkan_reference")
    if native is None or dev.driver != "vulkan" or not dev.push_descriptors:
        return None
    import vulkan as vk

    from bench.vulkan import Reference
    ref = Reference(native, dev)
    primary, secondary = (vk.vkAllocateCommandBuffers(dev.handle, vk.VkCommandBufferAllocateInfo(
        commandPool=ref.pool, level=level, commandBufferCount=1))[0]
        for level in (vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, vk.VK_COMMAND_BUFFER_LEVEL_SECONDARY))
    rows = []
    try:
        for length in LENGTHS:
            piece = dev.create_command_buffer(mode="reusable")
            with piece:
                record(piece, exe, [a, b], length)
            program, first = piece.program, piece.program.commands[0]
            infos = array("Q", [x for c in program.commands for r in c.bindings
                                for x in (r.buffer.handle, r.offset, r.nbytes)])
            barriers = bytes(1 if i in program.barriers else 0 for i in range(len(program.commands)))
            arguments = (first.executable.pipeline_handles[first.ordinal], first.executable.layout_handles[
                first.ordinal], infos, 3, barriers, first.constants[0], first.workgroups)
            handles = {name: dev.address(cb) for name, cb in (("inline", ref.cb), ("primary", primary),
                                                                ("secondary", secondary))}
            ref.native.record(handles["secondary"], *arguments, secondary=True)
            executed = array("Q", [handles["secondary"]])
            inline_us, secondary_us = float("inf"), float("inf")
            for _ in range(REPEATS):
                vk.vkResetCommandBuffer(ref.cb, 0)
                vk.vkResetCommandBuffer(primary, 0)
                t0 = time.perf_counter()
                ref.native.record(handles["inline"], *arguments)
                t1 = time.perf_counter()
                ref.native.execute(handles["primary"], executed)
                t2 = time.perf_counter()
                inline_us, secondary_us = min(inline_us, t1 - t0), min(secondary_us, t2 - t1)
            rows.append(dict(commands=length, inline_record=inline_us * 1e6, secondary_record=secondary_us * 1e6,
                             inline_wall=submissions_wall_us(dev, ref, handles["inline"]),
                             secondary_wall=submissions_wall_us(dev, ref, handles["primary"])))
    finally:
        dev.synchronize()
        ref.close()
    return rows


def submissions_wall_us(dev: hal.Device, ref, handle: int) -> float:
    """Wall µs per vkQueueSubmit of the VkCommandBuffer `handle`, SUBMITS back to back, ordered by the reference's
    timeline, to the end of the last."""
    queue = dev.address(dev.queue)
    t0 = time.perf_counter()
    for _ in range(SUBMITS):
        ref.value += 1
        ref.native.submit(queue, handle, ref.timeline.address, ref.value)
    ref.timeline.wait(ref.value)
    return (time.perf_counter() - t0) / SUBMITS * 1e6


def report(result: dict) -> str:
    meta = result["meta"]
    lines = [f"## Nested command buffers on {meta['device']} ({meta['driver']}), {meta['date']}", "",
             f"k dispatches, flat / nested (ratio nested/flat): host µs per command to record and end the outer "
             f"command buffer and to submit it first (best of {REPEATS}); wall µs per unchanged submission and host "
             f"µs per submission swapping the table ({SUBMITS} back to back).", "",
             "| k | record+end | first submit | unchanged wall | swapped table |",
             "|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        cells = [f"{r['flat'][key]:.2f} / {r['nested'][key]:.2f} ({r['nested'][key] / r['flat'][key]:.2f}x)"
                 for key in ("record", "first", "wall", "swap")]
        lines.append(f"| {r['commands']} | " + " | ".join(cells) + " |")
    if result.get("secondary"):
        lines += ["", "The compiled reference: k dispatches encoded inline into the primary command buffer against "
                  "once into a secondary one that the primary executes; host µs to record the primary, wall µs per "
                  f"submission ({SUBMITS} back to back).", "",
                  "| k | inline record | secondary record | inline wall | secondary wall | secondary/inline wall |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for r in result["secondary"]:
            lines.append(f"| {r['commands']} | {r['inline_record']:.2f} | {r['secondary_record']:.2f} | "
                         f"{r['inline_wall']:.1f} | {r['secondary_wall']:.1f} | "
                         f"{r['secondary_wall'] / r['inline_wall']:.2f}x |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return device_main(argv, __doc__, run, report)


if __name__ == "__main__":
    raise SystemExit(main())
