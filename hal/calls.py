"""Foreign work in command buffers: `CommandBuffer.call(fn, bindings, reads, writes, constants)` records a library's
work (cuBLAS, VkFFT, numpy, ...) beside hal's own commands, its bindings in dependency and race analysis as a
dispatch's are.

`fn(ctx)` is called with the backend's own recording context when the backend takes the command; on every backend
`ctx.constants` holds the call's constants as given, constant slots replaced by the submission's values:

- host: each time the command runs, on the queue's thread, with `ctx.binding(i, dtype)`: a numpy view of binding
  i's range (read-only for the bindings given in `reads`), as a host kernel's (backends.host.executable);
- Vulkan: each time the command buffer is encoded (at end(); at submit where slots or constant slots make the
  encoding per binding table and constant values, so a new value reaches `fn` by encoding again), with
  `ctx.command_buffer`, the VkCommandBuffer being recorded, and `ctx.buffer(i)`: binding i as (VkBuffer, offset,
  size) (backends.vulkan.call_context). hal's barriers around the command order its work as a dispatch's (compute
  and transfer work); hal sets its own state again after it;
- CUDA: not yet (capabilities.supports_foreign_calls is False there: the command is refused when recorded).

A function that raises fails where the backend called it: the submission (host: DeviceError at the next
synchronize or read), or the encoding (Vulkan: end() or queue_execute raise it, and the command buffer stays as it
was before that call).
"""
