"""What a call's function gets on Vulkan (CommandBuffer.call; hal.calls): the VkCommandBuffer being recorded, per
binding its VkBuffer, offset and size, as integers (the vulkan package takes a handle as ffi.cast("VkBuffer", h)),
and its constants' values."""

from __future__ import annotations

from hal.errors import ValidationError


class VulkanCallContext:
    """`command_buffer`: the VkCommandBuffer (recording: the function adds its vkCmd* calls); `buffer(i)`: binding
    i as (VkBuffer, offset, size); `constants`: the values of the call's constants for this encoding."""

    __slots__ = ("command_buffer", "_buffers", "constants")

    def __init__(self, command_buffer: int, buffers: tuple[tuple[int, int, int], ...], constants: tuple) -> None:
        self.command_buffer = command_buffer
        self._buffers = buffers
        self.constants = constants

    def buffer(self, index: int) -> tuple[int, int, int]:
        if not 0 <= index < len(self._buffers):
            raise ValidationError(f"buffer({index}): the call has {len(self._buffers)} bindings")
        return self._buffers[index]
