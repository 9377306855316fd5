"""Foreign work in command buffers: `CommandBuffer.call(fn, bindings, reads, writes, constants)` records a library's
work (cuBLAS, VkFFT, numpy, ...) beside hal's own commands, its bindings in dependency and race analysis as a
dispatch's are.

`fn(ctx)` is called with the backend's own recording context when the backend takes the command; on every backend
`ctx.constants` holds the call's constants as given, constant slots replaced by the submission's values:

- host: each time the command runs, on the queue's thread, with `ctx.binding(i, dtype)`: a numpy view of binding
  i's range (read-only for the bindings given in `reads`), as a host kernel's (backends.host.executable);
- Vulkan: each time the command buffer is encoded (at end(), a single_pass one's too once it holds a call; at
  submit where slots or constant slots make the encoding per binding table and constant values, so a new value
  reaches `fn` by encoding again), with
  `ctx.command_buffer`, the VkCommandBuffer being recorded, and `ctx.buffer(i)`: binding i as (VkBuffer, offset,
  size) (backends.vulkan.call_context). hal's barriers around the command order its work as a dispatch's (compute
  and transfer work); hal sets its own state again after it;
- CUDA: when its work is captured, with `ctx.stream`, the CUstream to queue it on (captured into a child graph node
  of the command buffer's graph), `ctx.pointer(i)` and `ctx.size(i)`: binding i's device address and length, and
  `ctx.binding(i, dtype)`: binding i as an array any CUDA library takes (`__cuda_array_interface__`: torch.as_tensor,
  cupy.asarray) (backends.cuda_graph.call_context). It is captured once per set of buffer addresses and constant
  values, at end() (at the first submit with slots or constant slots), and the capture is kept (16 per call, the
  least recently used dropped first): a new table or new values set the graph's node to the capture for them,
  calling `fn` only for a set not kept; an unchanged resubmission is one graph launch. A command buffer's calls run
  in their recording order, each after the one before, as work queued on one stream would (a library reuses what
  it keeps per stream, cuBLAS's workspace, from call to call); hal's own commands run beside them as their
  dependencies allow. Its work must be asynchronous on `ctx.stream` and write only into the bindings: synchronizing
  the stream, its events or the device, a blocking copy or a query fail the capture, with a message saying so. The
  capture is relaxed, so a library may allocate and initialise itself meanwhile (cuBLAS handles are made at their
  first use); but work it queues on another stream is not captured and runs once, then (torch outside
  `with torch.cuda.stream(torch.cuda.ExternalStream(ctx.stream))`), and memory it allocates during the capture and
  frees is not the graph's to keep.

A function that raises fails where the backend called it: the submission (host: DeviceError at the next
synchronize or read), or the encoding or capture (Vulkan, CUDA: end() or queue_execute raise DeviceError, and the
command buffer stays as it was before that call; CUDA names what a capture forbade).
"""
