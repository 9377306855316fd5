"""CUDA executables: NVRTC, PTX and cubin; microkernels linked with nvJitLink; checked against the Export."""

from __future__ import annotations

import os

import numpy as np
import pytest

import hal
from hal.disk_cache import CacheWarning
from tests import kernels
from tests.conftest import backend_or_skip

backend_or_skip("cuda")

from backends.cuda_graph import executable

pytestmark = pytest.mark.cuda

TWICE_EXPORT = hal.Export("apply", bindings=1, constants=1, workgroup_size=64)
CALLER = r"""
extern "C" __device__ unsigned twice(unsigned x);
extern "C" __global__ void apply(unsigned* x, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = twice(x[i]) + 1;
}
"""
PTX_HEAD = """
.version 7.0
.target sm_70
.address_size 64
"""
# A hand-written microkernel in PTX: what nvcc would emit for `unsigned twice(unsigned)`, with shl.
TWICE_PTX = PTX_HEAD + """
.visible .func (.param .b32 func_retval0) twice(.param .b32 twice_param_0)
{
    .reg .b32 %r<3>;
    ld.param.u32 %r1, [twice_param_0];
    shl.b32 %r2, %r1, 1;
    st.param.b32 [func_retval0+0], %r2;
    ret;
}
"""
# The same in CUDA C with inline assembly, compiled to LTO-IR.
TWICE_ASM = r"""
extern "C" __device__ unsigned twice(unsigned x) {
    unsigned y;
    asm("shl.b32 %0, %1, 1;" : "=r"(y) : "r"(x));
    return y;
}
"""


def run_apply(dev, exe, n=100):
    x = dev.upload(np.arange(n, dtype=np.uint32))
    cb = dev.create_command_buffer()
    with cb:
        cb.dispatch(exe, "apply", (2, 1, 1), (n,), (x,))
    dev.queue_execute(cb)
    return x.read(np.uint32)


def test_cuda_c_loads_once_per_device(gpu):
    exe = gpu.load_executable(kernels.SOURCE)
    assert gpu.load_executable(hal.ExecutableSource.multi(cuda=kernels.CUDA, host=kernels.HOST)) is exe


def test_nvrtc_errors_are_compile_errors_with_the_log(gpu):
    bad = hal.ExecutableSource.cuda('extern "C" __global__ void apply(unsigned* x, unsigned n) { undeclared(); }',
                                    [TWICE_EXPORT])
    with pytest.raises(hal.CompileError, match=r"NVRTC rejected the CUDA source") as info:
        gpu.load_executable(bad)
    assert "undeclared" in info.value.log


def test_missing_kernel_and_wrong_parameters_refused(gpu):
    code = 'extern "C" __global__ void apply(unsigned* x) { x[0] = 1; }'
    with pytest.raises(hal.ValidationError, match=r"no kernel of that name"):
        gpu.load_executable(hal.ExecutableSource.cuda(code, [hal.Export("other", bindings=1)]))
    with pytest.raises(hal.ValidationError, match=r"takes parameters of \[8\] bytes"):
        gpu.load_executable(hal.ExecutableSource.cuda(code, [TWICE_EXPORT]))


def test_ptx_and_cubin_sources(gpu):
    arch = "sm_{}{}".format(*gpu.compute_capability)
    code = CALLER.replace('extern "C" __device__ unsigned twice(unsigned x);',
                          'extern "C" __device__ unsigned twice(unsigned x) { return x << 1; }')
    cubin = executable.compile_cuda(hal.ExecutableSource.cuda(code, [TWICE_EXPORT]), arch)
    assert cubin[:4] == b"\x7fELF"
    got = run_apply(gpu, gpu.load_executable(hal.ExecutableSource.cubin(cubin, [TWICE_EXPORT])))
    np.testing.assert_array_equal(got, np.arange(100, dtype=np.uint32) * 2 + 1)
    ptx = PTX_HEAD + """
.visible .entry apply(.param .u64 apply_param_0, .param .u32 apply_param_1)
{
    .reg .pred %p<2>;
    .reg .b32 %r<9>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [apply_param_0];
    ld.param.u32 %r2, [apply_param_1];
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %tid.x;
    mad.lo.s32 %r1, %r3, %r4, %r5;
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd2, %rd1;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd4, %rd2, %rd3;
    ld.global.u32 %r6, [%rd4];
    shl.b32 %r7, %r6, 1;
    add.s32 %r8, %r7, 1;
    st.global.u32 [%rd4], %r8;
DONE:
    ret;
}
"""
    got = run_apply(gpu, gpu.load_executable(hal.ExecutableSource.ptx(ptx, [TWICE_EXPORT])))
    np.testing.assert_array_equal(got, np.arange(100, dtype=np.uint32) * 2 + 1)


def test_ptx_microkernel_is_linked_in(gpu):
    exe = gpu.load_executable(hal.ExecutableSource.cuda(CALLER, [TWICE_EXPORT], imports=[TWICE_PTX]))
    np.testing.assert_array_equal(run_apply(gpu, exe), np.arange(100, dtype=np.uint32) * 2 + 1)


def test_lto_ir_microkernel_with_inline_assembly_is_linked_in(gpu):
    from cuda.bindings import nvrtc
    arch = "sm_{}{}".format(*gpu.compute_capability)
    err, program = nvrtc.nvrtcCreateProgram(TWICE_ASM.encode(), b"twice.cu", 0, [], [])
    options = [f"--gpu-architecture={arch}".encode(), b"--relocatable-device-code=true", b"-dlto"]
    assert nvrtc.nvrtcCompileProgram(program, len(options), options)[0] == nvrtc.nvrtcResult.NVRTC_SUCCESS
    size = nvrtc.nvrtcGetLTOIRSize(program)[1]
    ltoir = b" " * size
    nvrtc.nvrtcGetLTOIR(program, ltoir)
    nvrtc.nvrtcDestroyProgram(program)
    exe = gpu.load_executable(hal.ExecutableSource.cuda(CALLER, [TWICE_EXPORT], imports=[ltoir]))
    np.testing.assert_array_equal(run_apply(gpu, exe), np.arange(100, dtype=np.uint32) * 2 + 1)


def test_unresolved_import_is_a_compile_error(gpu):
    with pytest.raises(hal.CompileError, match=r"nvJitLink could not link"):
        gpu.load_executable(hal.ExecutableSource.cuda(CALLER, [TWICE_EXPORT],
                                                      imports=[TWICE_PTX.replace("twice", "thrice")]))


def test_compiled_cubins_are_cached_on_disk(gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("HAL_CACHE_DIR", str(tmp_path))
    code = CALLER.replace('extern "C" __device__ unsigned twice(unsigned x);',
                          'extern "C" __device__ unsigned twice(unsigned x) { return x + x; }')
    source = hal.ExecutableSource.cuda(code, [TWICE_EXPORT])
    gpu.load_executable(source).release()
    assert len(list((tmp_path / "cuda-v1").iterdir())) == 1
    monkeypatch.setattr(executable, "compile_cuda", lambda *a: pytest.fail("compiled again despite the cache"))
    np.testing.assert_array_equal(run_apply(gpu, gpu.load_executable(source)), np.arange(100, dtype=np.uint32) * 2 + 1)


def test_a_damaged_cubin_entry_is_compiled_again(gpu, tmp_path, monkeypatch):
    """Issue 51: random bytes, a truncated copy, an empty file or another kernel's valid cubin under the key: each
    load evicts it with a warning naming the file, compiles again and runs right."""
    monkeypatch.setenv("HAL_CACHE_DIR", str(tmp_path))
    def twice_plus(k):
        return CALLER.replace('extern "C" __device__ unsigned twice(unsigned x);',
                              f'extern "C" __device__ unsigned twice(unsigned x) {{ return x + x + {k}u; }}')
    gpu.load_executable(hal.ExecutableSource.cuda(twice_plus(7), [TWICE_EXPORT])).release()
    source = hal.ExecutableSource.cuda(twice_plus(3), [TWICE_EXPORT])
    gpu.load_executable(source).release()
    folder = tmp_path / "cuda-v1"
    entries = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime_ns)
    planted, entry = entries[0].read_bytes(), entries[1]
    good = entry.read_bytes()
    for damaged in (os.urandom(100), good[:len(good) // 2], b"", planted):
        entry.write_bytes(damaged)
        with pytest.warns(CacheWarning, match=f"evicted the cache entry {entry}"):
            exe = gpu.load_executable(source)
        np.testing.assert_array_equal(run_apply(gpu, exe), np.arange(100, dtype=np.uint32) * 2 + 4)
        exe.release()
        assert entry.read_bytes() == good


SCALE = r"""
extern "C" __global__ void scale(const float* a, float* out, float s, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] * s;
}
extern "C" __global__ void bump(float* a, unsigned n) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(a + i, 1.0f);
}
"""


def _scale(constants=("float32", "uint32"), readonly=(0,)):
    return hal.Export("scale", bindings=2, constants=constants, workgroup_size=64, readonly=readonly)


def test_nvrtc_kernels_are_checked_against_their_ptx(gpu):
    """Issue 44: typed constants against the parameters' PTX types, readonly against the PTX's stores and atomics."""
    exe = gpu.load_executable(hal.ExecutableSource.cuda(SCALE, [_scale()]))
    a, out = gpu.upload(np.arange(100, dtype=np.float32)), gpu.allocate(400)
    cb = gpu.create_command_buffer()
    with cb:
        cb.dispatch(exe, "scale", (2, 1, 1), (2, 100), (a, out))  # 2 for a float32: converted
    gpu.queue_execute(cb)
    np.testing.assert_array_equal(out.read(np.float32), np.arange(100, dtype=np.float32) * 2)
    cases = [
        ([_scale(constants=("uint32", "uint32"))], r"constants\[0\] is declared uint32, but the kernel's parameter 2 "
                                                   r"is f32 in its PTX \(a float\)"),
        ([_scale(constants=("float32", "float32"))], r"constants\[1\] is declared float32, .* parameter 3 is u32"),
        ([_scale(readonly=(0, 1))], "binding 1 is declared readonly, but the kernel stores or atomically writes "
                                    "through its pointer parameter 1"),
        ([hal.Export("bump", bindings=1, constants=1, workgroup_size=64, readonly=(0,))],
         "export 'bump': binding 0 is declared readonly, but the kernel stores or atomically writes"),
    ]
    for exports, message in cases:
        with pytest.raises(hal.ValidationError, match=message):
            gpu.load_executable(hal.ExecutableSource.cuda(SCALE, exports))


def test_ptx_sources_are_checked_against_their_exports(gpu):
    from tests.cuda_graph.test_ptx import ADD
    good = hal.Export("add", bindings=3, constants=("float32", "uint32"), workgroup_size=64, readonly=(0, 1))
    exe = gpu.load_executable(hal.ExecutableSource.ptx(ADD, [good]))
    a, b, out = gpu.upload(np.arange(64, dtype=np.float32)), gpu.upload(np.ones(64, np.float32)), gpu.allocate(256)
    cb = gpu.create_command_buffer()
    with cb:
        cb.dispatch(exe, "add", (1, 1, 1), (0.5, 64), (a, b, out))
    gpu.queue_execute(cb)
    np.testing.assert_array_equal(out.read(np.float32), (np.arange(64, dtype=np.float32) + 1) * 0.5)
    wrong = hal.Export("add", bindings=3, constants=("float32", "uint32"), workgroup_size=64, readonly=(2,))
    with pytest.raises(hal.ValidationError, match="binding 2 is declared readonly"):
        gpu.load_executable(hal.ExecutableSource.ptx(ADD, [wrong]))
