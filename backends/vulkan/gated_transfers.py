"""Fills and copies inside a region gated on the device (conditional rendering gates dispatches only): each runs as a
small compute dispatch of hal's own, which the region's predicate gates like the body's other dispatches. The copy
kernel also latches each gated region's flag into its predicate (backends.vulkan.command_buffer: Encoder.conditional).

A fill writes its 32-bit pattern word over the range; a copy moves 32-bit words; an update copies its data from a
host-visible buffer of its own (one per update command, kept until the command buffer is reset). They bind their
ranges from an offset aligned down to the device's storage_buffer_offset_alignment and skip the words before the
range's start (`first`). A copy whose offsets or length are not multiples of 4 bytes keeps its region on the host's
path (backends.vulkan.command_buffer: VulkanEmitter.gated).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from backends.vulkan.buffer import BufferDevice, HostVisibleBuffer
from hal.commands import Update
from hal.executable import Executable, ExecutableSource, Export

WORKGROUP = 64
TRANSFERS = ExecutableSource.glsl({
    "fill": """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) writeonly buffer Target { uint target[]; };
layout(push_constant) uniform Fill { uint first; uint count; uint word; uint base; } f;
void main() { uint i = gl_GlobalInvocationID.x + f.base; if (i < f.count) target[f.first + i] = f.word; }
""",
    "copy": """#version 450
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) readonly buffer Source { uint source[]; };
layout(set = 0, binding = 1) writeonly buffer Target { uint target[]; };
layout(push_constant) uniform Copy { uint source_first; uint target_first; uint count; uint base; } c;
void main() {
    uint i = gl_GlobalInvocationID.x + c.base;
    if (i < c.count) target[c.target_first + i] = source[c.source_first + i];
}
"""}, [Export("fill", bindings=1, constants=("uint32",) * 4, workgroup_size=WORKGROUP),
       Export("copy", bindings=2, constants=("uint32",) * 4, workgroup_size=WORKGROUP, readonly=(0,))])


class TransferDevice(BufferDevice, Protocol):
    """What gated transfers need of their Vulkan device."""

    def load_executable(self, source: ExecutableSource) -> Executable: ...


class GatedTransfers:
    """One command buffer's gated transfers: the device's fill and copy kernels, how a range is bound for them
    (`split(offset)`: the aligned base the binding starts at and the first word of the range in it; `groups(words)`:
    the dispatches, (base word, workgroups), that cover `words` within the device's workgroup count limit), and the
    data of its gated updates (`data_of`)."""

    def __init__(self, device: TransferDevice, alignment: int, max_groups: int) -> None:
        self.device = device
        self.staged: dict[Update, HostVisibleBuffer] = {}
        self.executable = device.load_executable(TRANSFERS)
        self.fill = self.executable.entries["fill"]
        self.copy = self.executable.entries["copy"]
        self.alignment = alignment
        self.max_groups = max_groups

    def split(self, offset: int) -> tuple[int, int]:
        base = offset - offset % self.alignment
        return base, (offset - base) // 4

    def groups(self, words: int) -> list[tuple[int, int]]:
        per = WORKGROUP * self.max_groups
        return [(start, -(-min(per, words - start) // WORKGROUP)) for start in range(0, words, per)]

    def data_of(self, update: Any) -> HostVisibleBuffer:
        """A buffer holding `update`'s data (made once per update command)."""
        found = self.staged.get(update)
        if found is None:
            data = update.data
            found = self.staged[update] = HostVisibleBuffer(self.device, len(data))
            found.words.view(np.uint8)[:len(data)] = np.frombuffer(data, np.uint8)
        return found

    def release(self) -> None:
        """Give the updates' buffers back (once the work submitted so far is done with them)."""
        for buffer in self.staged.values():
            buffer.release()
        self.staged.clear()
