"""dispatch_indirect on Vulkan: a guard shader before each vkCmdDispatchIndirect (see hal.indirect).

The guard (one invocation) reads the three counts where the command's parameters are, writes them, or zeros
when one exceeds max_workgroup_count, to the 12 bytes hal keeps for that command, and notes the fault; a
barrier (shader write -> indirect command read) follows, then vkCmdDispatchIndirect reads hal's 12 bytes. So
the cost of an indirect dispatch is one extra one-invocation dispatch and one barrier (bench/indirect.py). A
dynamic command's guard sits just before its dispatch, after the command's own barrier, so it reads what the
commands before wrote. Static counts, which no command of the recording may write (the recorder checks; inside
regions counts must be dynamic), are the counts the submission starts with: a deferred recording without regions
runs all their guards at its start, with one barrier after them (Encoder.guard_static), instead of a guard, a
pipeline switch and a barrier before each; single_pass recordings, encoded as commands come, and region Steps
guard each in place. A recording with guards ends with a barrier that makes the fault record visible to the host.
"""

from __future__ import annotations

from typing import Protocol

from backends.vulkan.buffer import HostVisibleBuffer, VulkanBuffer
from hal.buffer import Buffer, BufferUsage
from hal.capabilities import Capabilities
from hal.commands import Dispatch
from hal.executable import Executable, ExecutableSource, Export

GUARD = ExecutableSource.glsl({"guard": """#version 450
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) readonly buffer Parameters { uint parameters[]; };
layout(set = 0, binding = 1) writeonly buffer Arguments { uint arguments[]; };
layout(set = 0, binding = 2) buffer Fault { uint fault[]; };
layout(push_constant) uniform Guard { uint word; uint slot; uint limit_x; uint limit_y; uint limit_z; uint command; } g;
void main() {
    uvec3 n = uvec3(parameters[g.word], parameters[g.word + 1u], parameters[g.word + 2u]);
    if (any(greaterThan(n, uvec3(g.limit_x, g.limit_y, g.limit_z)))) {
        if (atomicCompSwap(fault[0], 0u, 1u) == 0u) {
            fault[1] = g.command; fault[2] = n.x; fault[3] = n.y; fault[4] = n.z;
        }
        n = uvec3(0u);
    }
    arguments[3u * g.slot] = n.x; arguments[3u * g.slot + 1u] = n.y; arguments[3u * g.slot + 2u] = n.z;
}
"""}, [Export("guard", bindings=3, constants=6, readonly=(0,))])
PER_CHUNK = 256  # dispatch_indirect commands whose counts one arguments buffer holds


class GuardDevice(Protocol):
    """What the guards of dynamic indirect dispatches need of their Vulkan device."""

    capabilities: Capabilities

    def load_executable(self, source: ExecutableSource) -> Executable: ...

    def indirect_faults(self) -> HostVisibleBuffer: ...


class IndirectGuard:
    """One command buffer's side of dispatch_indirect: the guard executable, the device's fault record (hal.indirect,
    a HostVisibleBuffer), and the
    arguments buffers (12 bytes per dispatch_indirect, PER_CHUNK to a buffer, added as commands come)."""

    def __init__(self, device: GuardDevice) -> None:
        self.device = device
        self.executable = device.load_executable(GUARD)
        self.entry = self.executable.entries["guard"]
        self.fault = device.indirect_faults()
        self.limits = tuple(device.capabilities.max_workgroup_count)
        self.alignment = device.capabilities.storage_buffer_offset_alignment
        self.chunks: list[Buffer] = []
        self.place_of: dict[Dispatch, tuple[Buffer, int]] = {}  # by record: a region's body numbers from 0 again

    def place(self, command: Dispatch) -> tuple[Buffer, int]:
        """The arguments buffer and the entry in it that dispatch_indirect `command` reads its counts from."""
        found = self.place_of.get(command)
        if found is None:
            slot = len(self.place_of) % PER_CHUNK
            if slot == 0:
                chunk = VulkanBuffer(self.device, 12 * PER_CHUNK, BufferUsage.DISPATCH_STORAGE, indirect=True)
                self.chunks.append(chunk)
            found = self.place_of[command] = (self.chunks[-1], slot)
        return found

    def constants(self, command: int, offset: int, slot: int) -> tuple[int, ...]:
        """The guard's constants for the command whose parameters are at byte `offset` of the bound range."""
        return (offset // 4, slot, *self.limits, command)

    def release(self) -> None:
        """Free the arguments buffers once the work submitted so far is done."""
        for chunk in self.chunks:
            chunk.release()
        self.chunks, self.place_of = [], {}
