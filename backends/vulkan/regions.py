"""Regions on Vulkan that run through the host, which checks each region's flag between submissions.

Where the device has VK_EXT_conditional_rendering, an if_nonzero whose body holds dispatches, fills, updates and
copies of whole words runs on the device instead, in the command buffer (backends.vulkan.command_buffer:
Encoder.conditional), and such a while_nonzero runs as "chunks": Recordings of growing numbers of its iterations,
each gated on the flag, which the host checks once a chunk. For the other regions (nested ones, and those holding a
copy of other than whole words) a command buffer with regions is kept as Steps: the runs of commands between
regions, each a VkCommandBuffer, and per region a VkCommandBuffer that copies its flag to host-visible memory. The
device's QueueDriver, a thread, submits the steps in order; before each iteration it submits the copy, waits for it
and reads the flag. So each check costs one submission and one wait of the GPU for the host (tens of µs on a GPU;
bench.regions measures it), and a k-iteration loop is about 2k submissions.

queue_execute never blocks: a submission of a command buffer with regions becomes a job of the QueueDriver, and
while any job is queued every later submission of the device goes through it too, so the queue keeps submission
order (a submission that waits for a value only a later step signals would otherwise block the queue ahead of that
step). Host access (reads, writes, synchronize) waits for the QueueDriver first.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from backends.vulkan.recording import Recording

IDLE_EXIT_S = 1.0
WAIT_SLICE_S = 0.05


class QueueDevice(Protocol):
    """What the steps of regions need of their Vulkan device: its submissions on one timeline."""

    @property
    def submitted(self) -> int: ...

    def submit_recording(self, vkcb: int, waits: tuple = (), signals: tuple = ()) -> int: ...

    def wait_for_submission(self, value: int) -> None: ...

    def empty_recording(self) -> Recording: ...


class Steps:
    """What a command buffer with regions submits: ("run", Recording), ("region", loop, readback Recording, flag
    word, Steps of the body) and ("chunks", readback Recording, flag word, Recordings of iterations), in order.
    `words`: where the readbacks put the flags."""

    __slots__ = ("items", "words", "__weakref__")

    def __init__(self, words: np.ndarray) -> None:
        self.items: list[tuple] = []
        self.words = words

    def run(self, recording: Any) -> None:
        self.items.append(("run", recording))

    def region(self, loop: bool, readback: Any, word: int) -> Steps:
        body = Steps(self.words)
        self.items.append(("region", loop, readback, word, body))
        return body

    def chunks(self, readback: Any, word: int, chunks: list[Any]) -> None:
        """A loop gated on the device: Recordings of growing numbers of its iterations, the flag checked after
        each (see backends.vulkan.command_buffer's CHUNK_ITERATIONS)."""
        self.items.append(("chunks", readback, word, chunks))

    def release(self) -> None:
        """Retire every VkCommandBuffer of the steps (once the work submitted so far is done)."""
        for item in self.items:
            if item[0] == "run":
                item[1].release()
            elif item[0] == "chunks":
                item[1].release()
                for chunk in item[3]:
                    chunk.release()
            else:
                item[2].release()
                item[4].release()


def run_steps(device: QueueDevice, steps: Steps, waits: tuple, signals: tuple) -> None:
    """Submit `steps` on the QueueDriver's thread: the first submission carries `waits`, a last, empty one
    `signals` (also when a step failed, so that nothing waits forever; the failure is raised at synchronize())."""
    pending_waits = waits

    def submit(handle: int) -> int:
        nonlocal pending_waits
        value = device.submit_recording(handle, pending_waits)
        pending_waits = ()
        return value

    def walk(items: list[tuple]) -> None:
        for item in items:
            if item[0] == "run":
                submit(item[1].handle)
                continue
            if item[0] == "chunks":
                _, readback, word, chunks = item
                k = 0
                while True:
                    device.wait_for_submission(submit(readback.handle))
                    if not steps.words[word]:
                        break
                    submit(chunks[k].handle)
                    k = min(k + 1, len(chunks) - 1)
                continue
            _, loop, readback, word, body = item
            while True:
                device.wait_for_submission(submit(readback.handle))
                if not steps.words[word]:
                    break
                walk(body.items)
                if not loop:
                    break

    try:
        walk(steps.items)
    finally:
        device.submit_recording(device.empty_recording().handle, pending_waits, signals)


class QueueDriver:
    """A thread that makes a device's submissions, in order, while a command buffer with regions is among them
    (see the module docstring). `busy()`: jobs are queued or running; `entries()`: their (None, waits, signals),
    in order, for the device's checks of host signals and of waits only the host can end."""

    def __init__(self, device: QueueDevice) -> None:
        self.device = device
        self.condition = threading.Condition()
        self.jobs: collections.deque[tuple[Callable[[], None], tuple, tuple]] = collections.deque()
        self.current: tuple[Callable[[], None], tuple, tuple] | None = None  # the job running
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.idle_value = 0  # the device's last submitted timeline value when the driver last fell idle

    def busy(self) -> bool:
        return bool(self.jobs) or self.current is not None

    def finished_with(self, completed: int) -> bool:
        """Idle, and the GPU has reached what the jobs submitted (`completed`: the timeline value it has)."""
        with self.condition:
            return not self.busy() and self.idle_value <= completed

    def entries(self) -> list[tuple[None, tuple, tuple]]:
        with self.condition:
            jobs = ([self.current] if self.current is not None else []) + list(self.jobs)
        return [(None, waits, signals) for _, waits, signals in jobs]

    def put(self, job: Callable[[], None], waits: tuple, signals: tuple) -> None:
        with self.condition:
            self.jobs.append((job, waits, signals))
            if self.thread is None:
                self.thread = threading.Thread(target=self._serve, name="hal-vulkan-regions", daemon=True)
                self.thread.start()
            self.condition.notify_all()

    def wait_idle(self, check: Callable[[], None] = lambda: None) -> None:
        """Block until no job is queued or running; `check()` runs every WAIT_SLICE_S meanwhile (the device's
        test for a wait that only this thread could end: it raises instead of waiting forever)."""
        if threading.current_thread() is self.thread:
            return
        with self.condition:
            while self.busy():
                if not self.condition.wait(WAIT_SLICE_S):
                    check()

    def take_error(self) -> BaseException | None:
        with self.condition:
            error, self.error = self.error, None
        return error

    def _serve(self) -> None:
        while True:
            with self.condition:
                while not self.jobs:
                    if not self.condition.wait(IDLE_EXIT_S) and not self.jobs:
                        self.thread = None
                        return
                self.current = self.jobs.popleft()
            try:
                self.current[0]()
            except BaseException as e:  # noted for synchronize(); the job's signals were given already
                with self.condition:
                    self.error = self.error or e
            finally:
                with self.condition:
                    if not self.jobs:  # before `current` clears: a reader that sees idle sees this value
                        self.idle_value = self.device.submitted
                    self.current = None
                    self.condition.notify_all()
