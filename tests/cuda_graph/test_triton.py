"""Triton kernels on CUDA (ExecutableSource.triton): compiled for a named architecture without a device, checked
against their Exports, then (on a GPU) dispatched like any kernel: binding tables, constant slots, dispatch_indirect,
regions, transients, hazards, and more than 48 KiB of dynamic shared memory."""

from __future__ import annotations

import pytest

import hal
from tests.conftest import backend_or_skip, open_device

backend_or_skip("cuda")
pytest.importorskip("triton", reason="Triton is not installed: pip install 'hal-command-buffers[triton]'")

from backends.cuda_graph import triton as cuda_triton  # noqa: E402
from tests import triton_kernels as tk  # noqa: E402


def test_a_kernel_compiles_to_a_cubin_for_a_named_architecture_without_a_device():
    source = tk.scale_source()
    compiled = cuda_triton.compile_kernel(source.payload["scale"], tk.SCALE, (9, 0))
    assert compiled.cubin[:4] == b"\x7fELF" and compiled.name == "scale"
    assert cuda_triton.Compiled.from_bytes(compiled.to_bytes()) == compiled
    matmul = cuda_triton.compile_kernel(tk.matmul_source().payload["matmul"], tk.MATMUL, (9, 0))
    assert matmul.shared > cuda_triton.STATIC_SHARED_LIMIT


def test_a_kernel_that_needs_global_scratch_is_refused_at_compile():
    export = hal.Export("described", bindings=2, workgroup_size=128)
    source = hal.ExecutableSource.triton({"described": tk.described}, [export], constexprs={"described": {"BLOCK": 64}})
    with pytest.raises(hal.UnsupportedError, match="needs 128 bytes of global scratch .* hal passes no scratch"):
        cuda_triton.compile_kernel(source.payload["described"], export, (9, 0))


def test_a_readonly_binding_the_kernel_stores_through_is_refused_at_compile():
    export = hal.Export("scale", bindings=2, constants=("uint32", "float32"), workgroup_size=128, readonly=(0, 1))
    source = hal.ExecutableSource.triton({"scale": tk.scale}, [export], constexprs={"scale": {"BLOCK": 64}})
    with pytest.raises(hal.ValidationError, match="binding 1 is declared readonly"):
        cuda_triton.compile_kernel(source.payload["scale"], export, (9, 0))


@pytest.fixture(scope="module")
def gpu():
    dev = open_device("cuda")
    yield dev
    dev.close()


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["reusable", "one_shot"])
def test_binding_tables_and_constant_slots(gpu, mode):
    tk.check_tables_and_constant_slots(gpu, mode)


@pytest.mark.cuda
def test_indirect_dispatch_and_a_loop_with_transients_under_hazards(gpu):
    tk.check_indirect_loop_transients_hazards(gpu)


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["reusable", "one_shot"])
def test_more_than_48_kib_of_shared_memory(gpu, mode):
    assert gpu.load_executable(tk.matmul_source()).shared_memory[0] > cuda_triton.STATIC_SHARED_LIMIT
    tk.check_matmul(gpu, mode)
