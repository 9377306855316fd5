"""CUDA collectives: NCCL's work is captured into child graph nodes of the command buffer's one graph."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import backend_or_skip

backend_or_skip("cuda")

import hal
from tests.conftest import open_communicator, open_device

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def rank():
    dev = open_device("cuda")
    comm = open_communicator([dev])
    yield dev, comm
    comm.close()
    dev.close()


def test_one_graph_with_a_child_graph_node(rank):
    dev, comm = rank
    x = dev.upload(np.arange(64, dtype=np.float32))
    y = dev.allocate(256)
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.all_reduce(comm, x, y, np.float32)
        cb.execution_barrier()
        cb.copy_buffer(y, x)
    dev.queue_execute(cb)
    dev.queue_execute(cb)
    dev.synchronize()
    np.testing.assert_array_equal(y.read(np.float32), np.arange(64, dtype=np.float32))
    emitted = cb.emitter.emitted_graph()
    assert dict(emitted.nodes(data="type")) == {0: "CU_GRAPH_NODE_TYPE_GRAPH", 1: "CU_GRAPH_NODE_TYPE_MEMCPY"}
    assert list(emitted.edges) == [(0, 1)]
    assert cb.emitter.instantiations == 1


def test_closed_communicator_refused_at_submit(rank):
    dev, _ = rank
    comm = hal.create_communicator([dev])
    x = dev.upload(np.ones(16, np.int32))
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.all_reduce(comm, x, x, np.int32)
    dev.queue_execute(cb)
    dev.synchronize()
    comm.close()
    with pytest.raises(hal.ValidationError, match="communicator that was closed"):
        dev.queue_execute(cb)
    np.testing.assert_array_equal(x.read(np.int32), np.ones(16, np.int32))


RANK_SCRIPT = """
import sys, numpy as np, hal
rank, world, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dev = hal.create_device(f"cuda:{rank}")
comm = hal.create_communicator([dev], rank=rank, world=world, rendezvous=path)
assert comm.rank(dev) == rank and comm.size == world
x = dev.upload(np.full(1000, rank + 1, np.float32))
cb = dev.create_command_buffer(mode="reusable")
with cb:
    cb.all_reduce(comm, x, x, np.float32)
dev.queue_execute(cb)
dev.queue_execute(cb)
dev.synchronize()
print(x.read(np.float32)[0])
comm.close()
dev.close()
"""


@pytest.mark.multi_gpu
def test_one_process_per_gpu_through_a_rendezvous_file(tmp_path):
    """The rank/world form: two processes, each with its GPU, meet through a file that rank 0 writes."""
    import os
    import subprocess
    import sys
    count = len(hal.drivers.get_driver("cuda").devices())
    if count < 2:
        pytest.skip(f"needs two GPUs; this machine has {count}")
    path = str(tmp_path / "rendezvous")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    workers = [subprocess.Popen([sys.executable, "-c", RANK_SCRIPT, str(r), "2", path], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env) for r in range(2)]
    outputs = [w.communicate(timeout=180) for w in workers]
    for w, (out, err) in zip(workers, outputs):
        assert w.returncode == 0, err
        assert float(out.split()[-1]) == 6.0  # in place, twice: 1 + 2 = 3 on both ranks, then 3 + 3
    assert not os.path.exists(path)  # rank 0 removed it once the group formed


def test_a_new_table_patches_the_collective_without_instantiating_again(rank):
    dev, comm = rank
    cb = dev.create_command_buffer(mode="reusable", binding_capacity=2)
    with cb:
        cb.fill_buffer(hal.slot(0, 0, 256), np.float32(2))
        cb.execution_barrier()
        cb.all_reduce(comm, hal.slot(0, 0, 256), hal.slot(1, 0, 256), np.float32)
    tables = [(dev.allocate(256), dev.allocate(256)) for _ in range(3)]
    for _ in range(2):
        for source, target in tables:
            dev.queue_execute(cb, binding_table=(source, target))
            dev.synchronize()
            np.testing.assert_array_equal(target.read(np.float32), np.full(64, 2, np.float32))
            target.write(np.zeros(64, np.float32))
    assert cb.emitter.instantiations == 1
    assert cb.emitter.patched == 2  # the fill's node and the all_reduce's child graph node
