"""hal: record work once in a Vulkan-style command buffer; run it as a CUDA graph, a Vulkan command buffer or on numpy.

Start with `hal.create_device()`, `Device.create_command_buffer()` and `Device.queue_execute()`. The documentation
(`docs/` in the source tree, built with Sphinx: getting started, the concepts, writing kernels, one page per backend,
the API reference) explains each; `python -m hal info` says what this machine can run."""

from hal.buffer import Buffer, BufferRef, BufferUsage, ConstantSlot, constant_slot, ref, slot
from hal.capabilities import Capabilities
from hal.command_buffer import CommandBuffer
from hal.commands import CommandKind
from hal.communicator import Communicator, create_communicator
from hal.device import Device
from hal.drivers import DeviceInfo, Driver, available_drivers, create_device, register_driver
from hal.errors import (
                        CompileError,
                        DeviceError,
                        DeviceLostError,
                        HalError,
                        OutOfMemoryError,
                        TimeoutError,
                        UnsupportedError,
                        ValidationError,
)
from hal.executable import Executable, ExecutableSource, Export
from hal.semaphore import Semaphore

__all__ = [
    "Buffer", "BufferRef", "BufferUsage", "Capabilities", "CommandBuffer", "CommandKind", "Communicator",
    "CompileError", "ConstantSlot", "Device",
    "DeviceError", "DeviceInfo", "DeviceLostError", "Driver", "Executable", "ExecutableSource", "Export",
    "HalError", "OutOfMemoryError", "Semaphore", "TimeoutError", "UnsupportedError", "ValidationError",
    "available_drivers", "constant_slot", "create_communicator", "create_device", "ref", "register_driver", "slot",
]
