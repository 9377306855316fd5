"""vkCmd* calls made by a worker thread while the Python thread records (compiled).

A single_pass command buffer encodes each command as it is recorded. On a driver whose vkCmd* calls cost
as much as hal's own recording (NVIDIA's do: bench/README.md), making them in the recording thread
adds the two; here `StreamedCalls` writes each call with copies of its arguments into a chunk, and the
device's `CallStream` worker thread makes the chunk's calls (without the GIL) while the recording thread
goes on, so record+end costs about the larger of the two. Chunks are replayed in the order they were
pushed, so the calls into each VkCommandBuffer keep their order.

A dispatch goes into the chunk as its arguments (hal.commands.DispatchArguments: copied from its record, which holds
them when its bindings are device buffers and its constants plain), and the worker decides which state-setting calls
it needs (backends.vulkan.calls.encode_dispatch, on the command pool's Bound): the recording thread neither walks the
record's Python objects again nor compares state. A device without push descriptors takes its descriptor sets from
Python: its single_pass command buffers make their calls in the recording thread.

Vulkan requires a command buffer's pool to be used by one thread at a time: while calls for a
VkCommandBuffer may wait in the stream, only the worker touches its pool. drain() waits until the worker
made every call pushed so far; whoever ends, resets or gives back such a pool drains first
(backends.vulkan.command_buffer.VulkanEmitter, backends.vulkan.recording.CommandPools). The worker calls
no Python code and takes no lock but the stream's own, so waiting for it cannot deadlock.
"""

import threading

from libc.stdint cimport uint32_t, uint64_t
from libc.string cimport memcpy
from libcpp.mutex cimport mutex, unique_lock
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

from backends.vulkan.bound cimport Bound
from backends.vulkan.calls cimport cmd_copy_buffer, cmd_pipeline_barrier, encode_dispatch, storage_buffer_write
from backends.vulkan.khronos cimport (
    VkBuffer, VkBufferCopy, VkDescriptorSet, VkDeviceSize, VkMemoryBarrier, VkPipeline, VkPipelineLayout,
    VkPipelineStageFlags
)
from backends.vulkan.recording cimport CommandPool
from hal.commands cimport DispatchArguments

from hal.errors import ValidationError

cdef extern from *:
    """
    #include <thread>
    /* A spinning thread's pause: kind to the other hyperthread of its core. */
    static inline void hal_cpu_relax(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #elif defined(__aarch64__)
        __asm__ __volatile__("yield");
    #else
        std::this_thread::yield();
    #endif
    }
    """
    void cpu_relax "hal_cpu_relax"() noexcept nogil
    void prefetch_write "__builtin_prefetch"(const void* address, int write) noexcept nogil
    void prefetch_read "__builtin_prefetch"(const void* address) noexcept nogil

cdef size_t CHUNK_CALLS = 64  # calls per chunk: a handoff (a lock, perhaps a wake-up) per 64 calls
cdef size_t DATA_WORDS = 1024  # a chunk's data before it is pushed: 8 KiB, about 80 dispatches' arguments
cdef uint64_t FORGET = 1, DISPATCH = 2  # an ENCODE_DISPATCH's flags (encode_dispatch's `forget` and `dispatch`)
cdef size_t SPARE = 16  # replayed chunks kept for reuse
cdef long SPIN_NS = 50000  # how long the worker looks for the next chunk before it sleeps
# Calls (a cache line each) fetched ahead: the other thread's core wrote (or read) each line last, and a line asked
# for ahead arrives while the calls before it are written or made, instead of stalling the thread that needs it.
cdef size_t AHEAD = 4


cdef class CallStream:
    """A device's worker thread making streamed vkCmd* calls, started at the first StreamedCalls. `drain()` waits
    until it made every call pushed so far; `close()` drains and stops it."""

    def __cinit__(self):
        self.spare.reserve(SPARE)  # given back without allocating, by the worker (which must not raise)
        self.current = NULL

    def __init__(self, DeviceCommands fn):
        self.fn = fn
        self.thread = None
        self.stopping = self.sleeping = False
        storage_buffer_write(&self.write)

    def __dealloc__(self):
        # The worker holds this object while it runs: by now it has stopped, or never started.
        cdef Chunk* chunk
        for chunk in self.pending:
            del chunk
        for chunk in self.spare:
            del chunk
        del self.current

    def start(self) -> None:
        """Start the worker, or wake it: a recording begins, its first chunk is coming (a sleeping thread is slow to
        run again)."""
        if self.thread is None:
            if self.stopping:
                raise RuntimeError("the call stream is closed")
            self.thread = threading.Thread(target=self.work, name="hal-vulkan-calls", daemon=True)
            self.thread.start()
        self.lock.lock()
        if self.sleeping:
            self.kicked = True
            self.wake.notify_one()
        self.lock.unlock()

    def work(self) -> None:
        with nogil:
            self.run()

    def drain(self) -> None:
        """Push what was written and wait until the worker made every call pushed so far (the GIL let go). Once
        closed, it returns at once: the device's command buffers are gone, their calls are dropped."""
        cdef uint64_t target
        cdef unique_lock[mutex] held
        if self.current != NULL and self.current.count:
            self.push()
        target = self.pushed.load()
        if self.stopping or self.done.load() >= target:
            return
        with nogil:
            held = unique_lock[mutex](self.lock)
            while self.done.load() < target:
                self.replayed.wait(held)
            held.unlock()  # before the GIL is taken again: the recording side takes the lock holding the GIL

    def close(self) -> None:
        """Drain, then stop the worker."""
        self.drain()
        self.lock.lock()
        self.stopping = True
        self.wake.notify_one()
        self.lock.unlock()
        if self.thread is not None:
            self.thread.join()

    # The recording side holds the GIL from the start to the end of each of these (they call no Python code and never
    # let it go), so Python threads recording at once cannot interleave within them; the lock is the worker's.

    cdef Chunk* chunk(self) except NULL:
        """The chunk being written: a spare one, or a new one, once the last was pushed."""
        cdef Chunk* made
        if self.current == NULL:
            self.lock.lock()
            if not self.spare.empty():
                self.current = self.spare.back()
                self.spare.pop_back()
            self.lock.unlock()
        if self.current == NULL:
            made = new Chunk()
            try:
                made.calls.resize(CHUNK_CALLS)
                made.data.resize(DATA_WORDS)
            except BaseException:
                del made
                raise
            self.current = made
        return self.current

    cdef int push(self) except -1:
        """Hand the chunk being written to the worker, waking it if it sleeps (closed: drop its calls)."""
        if self.stopping:
            self.current.count = self.current.used = 0
            return 0
        self.lock.lock()
        try:
            self.pending.push_back(self.current)
            self.current = NULL
            self.pushed.store(self.pushed.load() + 1)  # (only the recording side pushes)
            if self.sleeping:
                self.wake.notify_one()
        finally:
            self.lock.unlock()
        return 0

    cdef void run(self) noexcept nogil:
        """The worker: replay the chunks in order until stopped; look for the next a while before sleeping."""
        cdef unique_lock[mutex] held
        cdef Chunk* chunk
        while True:
            self.spin()
            held = unique_lock[mutex](self.lock)
            while self.pending.empty() and not self.stopping and not self.kicked:
                self.sleeping = True
                self.wake.wait(held)
                self.sleeping = False
            self.kicked = False
            if self.pending.empty():
                if self.stopping:  # and nothing left
                    return
                held.unlock()
                continue  # kicked: look for the first chunk a while
            chunk = self.pending.front()
            self.pending.pop_front()
            held.unlock()
            self.replay(chunk)
            chunk.count = chunk.used = 0
            held.lock()
            if self.spare.size() < SPARE:
                self.spare.push_back(chunk)  # (within the capacity reserved: cannot fail)
            else:
                del chunk
            self.done.store(self.done.load() + 1)  # only the worker counts
            self.replayed.notify_all()
            held.unlock()

    cdef void spin(self) noexcept nogil:
        """Wait up to SPIN_NS for a chunk, awake: a chunk pushed meanwhile costs no wake-up."""
        cdef timespec start, now
        cdef int i
        clock_gettime(CLOCK_MONOTONIC, &start)
        while self.done.load() == self.pushed.load():
            for i in range(64):
                cpu_relax()
            clock_gettime(CLOCK_MONOTONIC, &now)
            if (now.tv_sec - start.tv_sec) * 1000000000 + now.tv_nsec - start.tv_nsec > SPIN_NS:
                return

    cdef void replay(self, Chunk* chunk) noexcept nogil:
        """Make the chunk's calls, in order."""
        cdef Call* call
        cdef uint64_t* data = chunk.data.data()
        cdef VkBufferCopy region
        cdef size_t i
        for i in range(chunk.count):
            call = &chunk.calls[i]
            if i + AHEAD < chunk.count:
                prefetch_read(call + AHEAD)
            if call.kind == ENCODE_DISPATCH:
                if call.data + 8 * AHEAD < chunk.used:
                    prefetch_read(data + call.data + 8 * AHEAD)
                encode_dispatch(self.fn, call.cb, &self.write, <Bound*>call.second, <VkPipeline>call.first,
                                <VkPipelineLayout>call.a, call.b & FORGET, call.b & DISPATCH,
                                <const DispatchArguments*>(data + call.data))
            elif call.kind == DISPATCH_INDIRECT:
                self.fn.dispatch_indirect(call.cb, <VkBuffer>call.first, call.a)
            elif call.kind == FILL_BUFFER:
                self.fn.fill_buffer(call.cb, <VkBuffer>call.first, call.a, call.b, <uint32_t>call.c)
            elif call.kind == UPDATE_BUFFER:
                self.fn.update_buffer(call.cb, <VkBuffer>call.first, call.a, call.b, data + call.data)
            elif call.kind == COPY_BUFFER:
                region.srcOffset, region.dstOffset, region.size = call.a, call.b, call.c
                cmd_copy_buffer(self.fn, call.cb, <VkBuffer>call.first, <VkBuffer>call.second, &region)
            else:
                cmd_pipeline_barrier(self.fn, call.cb, <VkPipelineStageFlags>call.a, <VkPipelineStageFlags>call.b,
                                     <const VkMemoryBarrier*>call.second)


cdef class StreamedCalls(Calls):
    """The vkCmd* calls of one encoding into `pool`'s VkCommandBuffer, written to `stream` for its worker to make."""

    def __init__(self, CallStream stream, CommandPool pool):
        Calls.__init__(self, stream.fn, pool)
        self.stream = stream
        stream.start()

    cdef Call* add(self, Kind kind) except NULL:
        """A new call at the end of the stream's chunk (its arguments set by the caller, then added())."""
        cdef Chunk* chunk = self.stream.current
        if chunk == NULL:
            chunk = self.stream.chunk()
        cdef Call* call = &chunk.calls[chunk.count]
        if chunk.count + AHEAD < CHUNK_CALLS:
            prefetch_write(call + AHEAD, 1)
        chunk.count += 1
        call.kind = kind
        call.cb = self.cb
        return call

    cdef size_t copy(self, const void* source, size_t nbytes) except? 0:
        """Copy `nbytes` into the chunk's data (after add()); returns where they start."""
        cdef Chunk* chunk = self.stream.current
        cdef size_t at = chunk.used
        chunk.used += (nbytes + 7) // 8
        if chunk.used > chunk.data.size():  # (an update_buffer of more than DATA_WORDS words)
            chunk.data.resize(chunk.used)
        memcpy(chunk.data.data() + at, source, nbytes)
        if chunk.used + 8 * AHEAD < chunk.data.size():
            prefetch_write(chunk.data.data() + chunk.used + 8 * AHEAD, 1)
        return at

    cdef int added(self) except -1:
        """A call was written: push a full chunk (CHUNK_CALLS calls, or DATA_WORDS words of data)."""
        if self.stream.current.count == CHUNK_CALLS or self.stream.current.used >= DATA_WORDS:
            self.stream.push()
        return 0

    cdef int encode(self, VkPipeline pipeline, VkPipelineLayout layout, bint forget, bint dispatch,
                    const DispatchArguments* arguments) except -1:
        """A dispatch, encoded by the worker on the command pool's Bound (its arguments copied into the chunk)."""
        self.make_room(arguments)
        cdef Call* call = self.add(ENCODE_DISPATCH)
        call.first, call.second = pipeline, self.bound
        call.a = <uint64_t>layout
        call.b = (FORGET if forget else 0) | (DISPATCH if dispatch else 0)
        call.data = self.copy(arguments, arguments.size)
        return self.added()

    cdef int make_room(self, const DispatchArguments* arguments) except -1:
        """The Bound has room for the device's limits, which the recorder checks: it cannot grow while the worker
        uses it."""
        if arguments.bindings > self.most_bindings or arguments.words > self.most_words:
            raise ValidationError(f"a dispatch of {arguments.bindings} bindings and {arguments.words} constants "
                                  f"exceeds the {self.most_bindings} and {self.most_words} the device allows")
        return 0

    cdef int bind_descriptor_set(self, VkPipelineLayout layout, VkDescriptorSet chosen) except -1:
        raise RuntimeError("descriptor sets are not streamed: a device without push descriptors encodes single_pass "
                           "command buffers in the recording thread")

    cdef int dispatch_indirect(self, VkBuffer buffer, VkDeviceSize offset) except -1:
        cdef Call* call = self.add(DISPATCH_INDIRECT)
        call.first = buffer
        call.a = offset
        return self.added()

    cdef int fill_buffer(self, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size, uint32_t word) except -1:
        cdef Call* call = self.add(FILL_BUFFER)
        call.first = buffer
        call.a, call.b, call.c = offset, size, word
        return self.added()

    cdef int update_buffer(self, VkBuffer buffer, VkDeviceSize offset, VkDeviceSize size, const void* data) except -1:
        cdef Call* call = self.add(UPDATE_BUFFER)
        call.first = buffer
        call.a, call.b = offset, size
        call.data = self.copy(data, size)
        return self.added()

    cdef int copy_buffer(self, VkBuffer source, VkBuffer target, const VkBufferCopy* region) except -1:
        cdef Call* call = self.add(COPY_BUFFER)
        call.first, call.second = source, target
        call.a, call.b, call.c = region.srcOffset, region.dstOffset, region.size
        return self.added()

    cdef int begin_conditional(self, VkBuffer buffer, VkDeviceSize offset) except -1:
        raise RuntimeError("a region is encoded at end(), never streamed")  # (VulkanEmitter.command gives up first)

    cdef int end_conditional(self) except -1:
        raise RuntimeError("a region is encoded at end(), never streamed")

    cdef int pipeline_barrier(self, VkPipelineStageFlags source, VkPipelineStageFlags target,
                              const VkMemoryBarrier* barrier) except -1:
        cdef Call* call = self.add(PIPELINE_BARRIER)
        call.a, call.b = source, target
        call.second = <void*>barrier
        return self.added()
