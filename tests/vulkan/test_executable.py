"""Vulkan executables: GLSL and SPIR-V, checked against the device and the Export before the driver sees them."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import hal
from hal.disk_cache import CacheWarning
from tests.conftest import backend_or_skip
from tests.vulkan.conftest import assemble

backend_or_skip("vulkan")

from backends.vulkan import shaders, spirv

pytestmark = pytest.mark.vulkan

HEAD = "#version 450\nlayout(local_size_x = 64) in;\n"
DOUBLE = HEAD + """
layout(set = 0, binding = 0) buffer X { uint x[]; };
layout(push_constant) uniform P { uint n; } p;
void main() { uint i = gl_GlobalInvocationID.x; if (i < p.n) x[i] *= 2u; }
"""
DOUBLE_EXPORT = hal.Export("double", bindings=1, constants=1, workgroup_size=64)


def run_double(dev, exe, name="double", n=100):
    x = dev.upload(np.arange(n, dtype=np.uint32))
    cb = dev.create_command_buffer()
    with cb:
        cb.dispatch(exe, name, (2, 1, 1), (n,), (x,))
    dev.queue_execute(cb)
    return x.read(np.uint32)


def test_glsl_runs_and_loads_once(vk):
    source = hal.ExecutableSource.glsl(DOUBLE, [DOUBLE_EXPORT])
    exe = vk.load_executable(source)
    assert vk.load_executable(hal.ExecutableSource.glsl(DOUBLE, [DOUBLE_EXPORT])) is exe
    np.testing.assert_array_equal(run_double(vk, exe), np.arange(100, dtype=np.uint32) * 2)


def test_glsl_error_is_a_compile_error_with_glslc_message(vk):
    bad = HEAD + "void main() { undeclared = 1; }\n"
    with pytest.raises(hal.CompileError, match=r"glslc rejected the GLSL of export 'double'") as info:
        vk.load_executable(hal.ExecutableSource.glsl(bad, [DOUBLE_EXPORT]))
    assert "undeclared" in info.value.log and "double.comp:3" in info.value.log


def test_glsl_is_cached_on_disk(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("HAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(shaders, "_glsl_cache", shaders.DiskCache("glsl"))
    code = DOUBLE.replace("2u", "3u")
    fresh().load_executable(hal.ExecutableSource.glsl(code, [DOUBLE_EXPORT]))
    assert len(list((tmp_path / "glsl-v1").iterdir())) == 1
    monkeypatch.setattr(shaders, "tool", lambda name: pytest.fail(f"{name} ran although the cache holds the module")
                        if name == "glslc" else shutil.which(name))
    exe = fresh().load_executable(hal.ExecutableSource.glsl(code, [DOUBLE_EXPORT]))
    np.testing.assert_array_equal(run_double(exe.device, exe), np.arange(100, dtype=np.uint32) * 3)


def test_a_damaged_glsl_entry_is_compiled_again(fresh, tmp_path, monkeypatch):
    """Issue 51: random bytes, a truncated copy, an empty file or another kernel's valid entry under the key: each
    load evicts it with a warning naming the file, compiles again and runs right."""
    monkeypatch.setenv("HAL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(shaders, "_glsl_cache", shaders.DiskCache("glsl"))
    other = DOUBLE.replace("2u", "5u")
    fresh().load_executable(hal.ExecutableSource.glsl(other, [DOUBLE_EXPORT]))
    code = DOUBLE.replace("2u", "4u")
    fresh().load_executable(hal.ExecutableSource.glsl(code, [DOUBLE_EXPORT]))
    entries = {p.read_bytes(): p for p in (tmp_path / "glsl-v1").iterdir()}
    assert len(entries) == 2
    entry = max(entries.values(), key=lambda p: p.stat().st_mtime_ns)  # the second kernel's
    good, planted = entry.read_bytes(), next(d for d, p in entries.items() if p != entry)
    for damaged in (os.urandom(100), good[:len(good) // 2], b"", planted):
        entry.write_bytes(damaged)
        with pytest.warns(CacheWarning, match=f"evicted the cache entry {entry}"):
            exe = fresh().load_executable(hal.ExecutableSource.glsl(code, [DOUBLE_EXPORT]))
        np.testing.assert_array_equal(run_double(exe.device, exe), np.arange(100, dtype=np.uint32) * 4)
        assert entry.read_bytes() == good


def test_spirv_source_with_its_entry_point_name(vk):
    code = shaders.compile_glsl(DOUBLE, vk.target_env, "double")
    exe = vk.load_executable(hal.ExecutableSource.spirv(code, [hal.Export("main", bindings=1, constants=1,
                                                                          workgroup_size=64)]))
    np.testing.assert_array_equal(run_double(vk, exe, "main"), np.arange(100, dtype=np.uint32) * 2)


def test_not_spirv_is_refused(vk):
    with pytest.raises(hal.ValidationError, match=r"bad magic number"):
        vk.load_executable(hal.ExecutableSource.spirv(b"\x01\x02\x03\x04" * 8, [DOUBLE_EXPORT]))


def test_invalid_spirv_is_refused_by_spirv_val(vk):
    code = bytearray(shaders.compile_glsl(DOUBLE, vk.target_env, "double"))
    words = np.frombuffer(code, np.uint32).copy()
    words[3] = 2  # the id bound: every id is now out of range
    with pytest.raises(hal.CompileError, match=r"spirv-val rejected the SPIR-V module") as info:
        vk.load_executable(hal.ExecutableSource.spirv(words.tobytes(), [hal.Export("main", bindings=1, constants=1,
                                                                                   workgroup_size=64)]))
    assert info.value.log


def test_shader_validation_can_be_turned_off(fresh, monkeypatch):
    monkeypatch.setenv("HAL_VULKAN_DISABLE_SHADER_VALIDATION", "1")
    monkeypatch.setattr(shaders, "tool", lambda name: pytest.fail("spirv-val ran") if name == "spirv-val"
                        else shutil.which(name))
    dev = fresh()
    exe = dev.load_executable(hal.ExecutableSource.glsl(DOUBLE.replace("2u", "5u"), [DOUBLE_EXPORT]))
    np.testing.assert_array_equal(run_double(dev, exe), np.arange(100, dtype=np.uint32) * 5)


def test_float64_refused_when_the_device_lacks_it(fresh):
    code = HEAD + """
layout(set = 0, binding = 0) buffer X { double x[]; };
void main() { x[gl_GlobalInvocationID.x] *= 2.0; }
"""
    export = hal.Export("f64", bindings=1, workgroup_size=64)
    dev = fresh(supports_float64=False)
    assert dev.capabilities.supports_float64 is False
    with pytest.raises(hal.UnsupportedError, match=r"capability Float64, but the device's supports_float64 is False"):
        dev.load_executable(hal.ExecutableSource.glsl(code, [export]))
    if fresh().capabilities.supports_float64:  # the same shader loads where the device allows it
        fresh().load_executable(hal.ExecutableSource.glsl(code, [export]))


def test_64_bit_atomics_run_where_the_device_has_them_and_are_refused_where_not(fresh):
    code = """#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_atomic_int64 : require
layout(local_size_x = 64) in;
layout(set = 0, binding = 0) buffer X { uint64_t largest; };
void main() { atomicMax(largest, (uint64_t(gl_GlobalInvocationID.x) << 33) | 5ul); }
"""
    export = hal.Export("largest", bindings=1, workgroup_size=64)
    with pytest.raises(hal.UnsupportedError, match=r"capability Int64Atomics, but the device's supports_int64_atomics"):
        fresh(supports_int64_atomics=False).load_executable(hal.ExecutableSource.glsl(code, [export]))
    dev = fresh()
    if not dev.capabilities.supports_int64_atomics:
        pytest.skip(f"{dev} has no 64-bit atomics on buffers (shaderBufferInt64Atomics)")
    exe = dev.load_executable(hal.ExecutableSource.glsl(code, [export]))
    out = dev.upload(np.zeros(1, np.uint64))
    cb = dev.create_command_buffer()
    with cb:
        cb.dispatch(exe, "largest", (4, 1, 1), (), (out,))
    dev.queue_execute(cb)
    assert int(out.read(np.uint64)[0]) == (255 << 33) | 5


def test_subgroup_operations_checked(fresh):
    code = "#version 450\n#extension GL_KHR_shader_subgroup_arithmetic : require\n" + HEAD.split("\n", 1)[1] + """
layout(set = 0, binding = 0) buffer X { uint x[]; };
void main() { x[gl_GlobalInvocationID.x] = subgroupAdd(1u); }
"""
    export = hal.Export("sum", bindings=1, workgroup_size=64)
    dev = fresh(supported_subgroup_operations=1)  # basic only
    with pytest.raises(hal.UnsupportedError, match=r"GroupNonUniformArithmetic"):
        dev.load_executable(hal.ExecutableSource.glsl(code, [export]))


@pytest.mark.parametrize("export, message", [
    (hal.Export("double", bindings=1, constants=1, workgroup_size=32),
     r"LocalSize is \(64, 1, 1\) but the Export's workgroup_size is \(32, 1, 1\)"),
    (hal.Export("double", bindings=0, constants=1, workgroup_size=64),
     r"storage buffer at set 0, binding 0; the Export has 0 bindings"),
    (hal.Export("double", bindings=1, constants=0, workgroup_size=64),
     r"push-constant block is 4 bytes but the Export has 0 constants"),
])
def test_shader_and_export_must_agree(vk, export, message):
    with pytest.raises(hal.ValidationError, match=message):
        vk.load_executable(hal.ExecutableSource.glsl(DOUBLE, [export]))


@pytest.mark.parametrize("declaration, message", [
    ("layout(set = 0, binding = 0) uniform X { uint x[4]; };", r"a uniform buffer at set 0, binding 0"),
    ("layout(set = 1, binding = 0) buffer X { uint x[]; };", r"a storage buffer at set 1, binding 0"),
])
def test_uniform_buffers_and_other_sets_are_refused(vk, declaration, message):
    code = HEAD + declaration + "\nlayout(set = 0, binding = 1) buffer Y { uint y[]; };\nvoid main() { y[0] = x[0]; }\n"
    with pytest.raises(hal.ValidationError, match=message):
        vk.load_executable(hal.ExecutableSource.glsl(code, [hal.Export("k", bindings=2, workgroup_size=64)]))


def test_unsupported_formats(vk):
    with pytest.raises(hal.UnsupportedError, match=r"runs SPIR-V or GLSL, not 'cuda'"):
        vk.load_executable(hal.ExecutableSource.cuda("extern \"C\" __global__ void k() {}", [hal.Export("k",
                                                                                                          bindings=0)]))


LIBRARY = """
               OpCapability Shader
               OpCapability Linkage
               OpMemoryModel Logical GLSL450
               OpDecorate %twice LinkageAttributes "twice" Export
       %uint = OpTypeInt 32 0
     %uint_2 = OpConstant %uint 2
    %fn_uint = OpTypeFunction %uint %uint
      %twice = OpFunction %uint None %fn_uint
          %x = OpFunctionParameter %uint
      %entry = OpLabel
          %r = OpIMul %uint %x %uint_2
               OpReturnValue %r
               OpFunctionEnd
"""
MAIN = """
               OpCapability Shader
               OpCapability Linkage
               OpMemoryModel Logical GLSL450
               OpEntryPoint GLCompute %main "apply" %gid %buf
               OpExecutionMode %main LocalSize 64 1 1
               OpDecorate %gid BuiltIn GlobalInvocationId
               OpDecorate %rta ArrayStride 4
               OpMemberDecorate %blk 0 Offset 0
               OpDecorate %blk Block
               OpDecorate %buf DescriptorSet 0
               OpDecorate %buf Binding 0
               OpDecorate %twice LinkageAttributes "twice" Import
       %void = OpTypeVoid
       %uint = OpTypeInt 32 0
     %uint_0 = OpConstant %uint 0
     %v3uint = OpTypeVector %uint 3
    %ptr_in3 = OpTypePointer Input %v3uint
        %gid = OpVariable %ptr_in3 Input
        %rta = OpTypeRuntimeArray %uint
        %blk = OpTypeStruct %rta
    %ptr_blk = OpTypePointer StorageBuffer %blk
        %buf = OpVariable %ptr_blk StorageBuffer
   %ptr_uint = OpTypePointer StorageBuffer %uint
    %fn_void = OpTypeFunction %void
    %fn_uint = OpTypeFunction %uint %uint
      %twice = OpFunction %uint None %fn_uint
          %p = OpFunctionParameter %uint
               OpFunctionEnd
       %main = OpFunction %void None %fn_void
      %entry = OpLabel
          %g = OpLoad %v3uint %gid
          %i = OpCompositeExtract %uint %g 0
        %ptr = OpAccessChain %ptr_uint %buf %uint_0 %i
          %v = OpLoad %uint %ptr
          %r = OpFunctionCall %uint %twice %v
               OpStore %ptr %r
               OpReturn
               OpFunctionEnd
"""


def test_imports_are_linked_with_spirv_link(vk):
    export = hal.Export("apply", bindings=1, workgroup_size=64)
    exe = vk.load_executable(hal.ExecutableSource.spirv(assemble(MAIN), [export], imports=[assemble(LIBRARY)]))
    x = vk.upload(np.arange(64, dtype=np.uint32) + 7)
    cb = vk.create_command_buffer()
    with cb:
        cb.dispatch(exe, "apply", (1, 1, 1), (), (x,))
    vk.queue_execute(cb)
    np.testing.assert_array_equal(x.read(np.uint32), (np.arange(64, dtype=np.uint32) + 7) * 2)


def test_unresolved_import_is_a_compile_error(vk):
    export = hal.Export("apply", bindings=1, workgroup_size=64)
    with pytest.raises(hal.CompileError):
        vk.load_executable(hal.ExecutableSource.spirv(assemble(MAIN), [export]))
    with pytest.raises(hal.CompileError, match=r"spirv-link could not link"):
        vk.load_executable(hal.ExecutableSource.spirv(assemble(MAIN), [export], imports=[assemble(MAIN)]))


def test_debug_save_path_gets_binary_and_disassembly(fresh, tmp_path, monkeypatch):
    monkeypatch.setenv("HAL_VULKAN_DEBUG_SHADER_SAVEPATH", str(tmp_path))
    fresh().load_executable(hal.ExecutableSource.glsl(DOUBLE.replace("2u", "7u"), [DOUBLE_EXPORT]))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert [n.rsplit(".", 1)[1] for n in names] == ["spv", "spvasm"]
    assert "OpEntryPoint GLCompute" in (tmp_path / names[1]).read_text()
    assert spirv.parse((tmp_path / names[0]).read_bytes()).entry_points["main"].model == spirv.GL_COMPUTE


def test_release_frees_the_pipelines_and_refuses_later_use(fresh):
    dev = fresh()
    before = dev.live_objects()
    exe = dev.load_executable(hal.ExecutableSource.glsl(DOUBLE, [DOUBLE_EXPORT]))
    assert dev.live_objects().get("VkPipeline", 0) == before.get("VkPipeline", 0) + 1
    x = dev.allocate(400)
    cb = dev.create_command_buffer(mode="reusable")
    with cb:
        cb.dispatch(exe, "double", (2, 1, 1), (100,), (x,))
    dev.queue_execute(cb)
    exe.release()
    exe.release()
    with pytest.raises(hal.ValidationError, match=r"dispatches an executable that was released"):
        dev.queue_execute(cb)
    other = dev.create_command_buffer()
    other.begin()
    with pytest.raises(hal.ValidationError, match=r"the executable was released; load it again"):
        other.dispatch(exe, "double", (2, 1, 1), (100,), (x,))
    dev.synchronize()
    assert dev.live_objects().get("VkPipeline", 0) == before.get("VkPipeline", 0)
    again = dev.load_executable(hal.ExecutableSource.glsl(DOUBLE, [DOUBLE_EXPORT]))
    assert again is not exe
    np.testing.assert_array_equal(run_double(dev, again), np.arange(100, dtype=np.uint32) * 2)


READONLY_HEAD = HEAD + "layout(set = 0, binding = 1) buffer Y { uint y[]; };\n"


@pytest.mark.parametrize("qualifier, body, refused", [
    ("", "x[0] = 1u; y[0] = x[1];", True),  # a store through binding 0
    ("", "atomicAdd(x[0], 1u); y[0] = 1u;", True),  # an atomic
    ("", "uint t = x[0]; y[t] = x[1];", False),  # reads only, though the block is not readonly
    ("readonly", "y[0] = x[0];", False),
    ("coherent", "x[gl_GlobalInvocationID.x] += 1u;", True),  # a read-modify-write
], ids=["store", "atomic", "reads-only", "readonly-block", "read-modify-write"])
def test_readonly_bindings_are_checked_against_the_shader(vk, qualifier, body, refused):
    """issue 44, item 2: a binding declared readonly that the SPIR-V may write is refused at load_executable (its
    hazard analysis and race checks would otherwise trust a false promise)."""
    code = READONLY_HEAD + f"layout(set = 0, binding = 0) {qualifier} buffer X {{ uint x[]; }};\n"
    code += f"void main() {{ {body} }}\n"
    source = hal.ExecutableSource.glsl({"k": code}, [hal.Export("k", bindings=2, workgroup_size=64, readonly=(0,))])
    if refused:
        with pytest.raises(hal.ValidationError, match=r"export 'k': binding 0 is declared readonly, but the shader "
                                                      r"may write it"):
            vk.load_executable(source)
    else:
        vk.load_executable(source)
    unchecked = hal.ExecutableSource.glsl({"k": code}, [hal.Export("k", bindings=2, workgroup_size=64)])
    vk.load_executable(unchecked)  # without the promise, any shader loads


def test_readonly_check_follows_pointers_through_access_chains_and_copies(vk):
    """A store through a pointer the module copies (OpCopyObject) after an access chain still counts."""
    code = assemble("""
               OpCapability Shader
               OpMemoryModel Logical GLSL450
               OpEntryPoint GLCompute %main "main" %x
               OpExecutionMode %main LocalSize 64 1 1
               OpDecorate %arr ArrayStride 4
               OpMemberDecorate %block 0 Offset 0
               OpDecorate %block Block
               OpDecorate %x DescriptorSet 0
               OpDecorate %x Binding 0
       %void = OpTypeVoid
         %fn = OpTypeFunction %void
       %uint = OpTypeInt 32 0
        %arr = OpTypeRuntimeArray %uint
      %block = OpTypeStruct %arr
        %ptr = OpTypePointer StorageBuffer %block
       %uptr = OpTypePointer StorageBuffer %uint
          %x = OpVariable %ptr StorageBuffer
      %zero = OpConstant %uint 0
       %one = OpConstant %uint 1
       %main = OpFunction %void None %fn
      %entry = OpLabel
         %el = OpAccessChain %uptr %x %zero %zero
       %copy = OpCopyObject %uptr %el
               OpStore %copy %one
               OpReturn
               OpFunctionEnd
""")
    module = spirv.parse(code)
    x = module.descriptors[0].variable
    assert x in module.written and x not in module.non_writable
    source = hal.ExecutableSource.spirv(code, [hal.Export("main", bindings=1, workgroup_size=64, readonly=(0,))])
    with pytest.raises(hal.ValidationError, match="binding 0 is declared readonly"):
        vk.load_executable(source)
