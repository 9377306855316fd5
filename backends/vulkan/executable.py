"""Vulkan executables: one compute pipeline per export, created once when the executable loads.

SPIR-V is linked with its imports (spirv-link), checked against the device and the exports (its
capabilities, descriptor bindings, push-constant block and LocalSize, read from the binary), and
validated with spirv-val, all before the driver sees it. GLSL is compiled by glslc first (cached on
disk). The ABI: binding i is the storage buffer at set 0, binding i; the constants are a push-constant
block of 32-bit words at offset 0.
"""

from __future__ import annotations

from typing import Any, Protocol

from backends.vulkan import shaders, spirv
from backends.vulkan.api import check, ffi, lib, vk
from hal.capabilities import Capabilities
from hal.errors import CompileError, UnsupportedError, ValidationError
from hal.executable import Executable, ExecutableSource, Export
from hal.lifetime import Lifetime

COMPUTE = vk.VK_SHADER_STAGE_COMPUTE_BIT
_LAYOUT_KINDS: dict[tuple[int, int], tuple[int, int]] = {}


class PipelineDevice(Protocol):
    """What executables need of their Vulkan device."""

    handle: Any
    capabilities: Capabilities
    features: Any  # backends.vulkan.capabilities' query
    lifetime: Lifetime
    pipeline_cache: Any
    push_descriptors: bool
    target_env: str
    driver: str

    def address(self, cdata: Any) -> int: ...

    def count_objects(self, kind: str, delta: int) -> None: ...

    def executable_released(self, executable: Any) -> None: ...


class VulkanExecutable(Executable):
    __slots__ = ("pipelines", "layouts", "set_layouts", "pipeline_handles", "layout_handles", "compatible",
                 "_finalizer")

    def __init__(self, device: PipelineDevice, source: ExecutableSource) -> None:
        super().__init__(device, source)
        modules = _modules(device, source)  # export name -> (SPIR-V, entry point name)
        for export in source.exports:
            code, entry = modules[export.name]
            _check(device, spirv.parse(code), export, entry)
        self.pipelines, self.layouts, self.set_layouts = [], [], []
        self._finalizer = device.lifetime.track(self, destroy_pipelines, device, self.pipelines, self.layouts,
                                        self.set_layouts)
        try:
            for export in source.exports:
                code, entry = modules[export.name]
                self._create_pipeline(device, export, code, entry)
        except BaseException:
            self._finalizer()
            device.lifetime.collect()
            raise
        self.pipeline_handles = tuple(map(device.address, self.pipelines))  # for the encoder's stream
        self.layout_handles = tuple(map(device.address, self.layouts))
        # Per export, its layout's kind: pipeline layouts of one kind are compatible for set 0 and push
        # constants (Vulkan's rule: identical set layouts and push ranges), so state set under one holds for
        # the others. One object per kind, so the encoder compares them with `is`.
        self.compatible = tuple(_LAYOUT_KINDS.setdefault((e.bindings, e.constants), (e.bindings, e.constants))
                                for e in source.exports)

    def _create_pipeline(self, device: PipelineDevice, export: Export, code: bytes, entry: str) -> None:
        handle = device.handle
        bindings = ffi.new("VkDescriptorSetLayoutBinding[]", [
            {"binding": i, "descriptorType": vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, "descriptorCount": 1,
             "stageFlags": COMPUTE} for i in range(export.bindings)] or 1)
        flags = vk.VK_DESCRIPTOR_SET_LAYOUT_CREATE_PUSH_DESCRIPTOR_BIT_KHR if device.push_descriptors else 0
        info = ffi.new("VkDescriptorSetLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO, "flags": flags,
            "bindingCount": export.bindings, "pBindings": bindings})
        set_layout = ffi.new("VkDescriptorSetLayout*")
        check(lib.vkCreateDescriptorSetLayout(handle, info, ffi.NULL, set_layout), "vkCreateDescriptorSetLayout")
        self.set_layouts.append(set_layout[0])
        device.count_objects("VkDescriptorSetLayout", 1)
        push = ffi.new("VkPushConstantRange*", {"stageFlags": COMPUTE, "offset": 0, "size": 4 * export.constants})
        layout_info = ffi.new("VkPipelineLayoutCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, "setLayoutCount": 1, "pSetLayouts": set_layout,
            "pushConstantRangeCount": 1 if export.constants else 0, "pPushConstantRanges": push})
        layout = ffi.new("VkPipelineLayout*")
        check(lib.vkCreatePipelineLayout(handle, layout_info, ffi.NULL, layout), "vkCreatePipelineLayout")
        self.layouts.append(layout[0])
        device.count_objects("VkPipelineLayout", 1)
        words = ffi.from_buffer("uint32_t[]", code)
        module_info = ffi.new("VkShaderModuleCreateInfo*", {
            "sType": vk.VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, "codeSize": len(code), "pCode": words})
        module = ffi.new("VkShaderModule*")
        check(lib.vkCreateShaderModule(handle, module_info, ffi.NULL, module), "vkCreateShaderModule")
        try:
            name = ffi.new("char[]", entry.encode())
            pipeline_info = ffi.new("VkComputePipelineCreateInfo*", {
                "sType": vk.VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, "layout": layout[0],
                "stage": {"sType": vk.VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, "stage": COMPUTE,
                          "module": module[0], "pName": name}})
            pipeline = ffi.new("VkPipeline*")
            check(lib.vkCreateComputePipelines(handle, device.pipeline_cache, 1, pipeline_info, ffi.NULL, pipeline),
                  f"vkCreateComputePipelines for export {export.name!r}")
        finally:
            lib.vkDestroyShaderModule(handle, module[0], ffi.NULL)
        self.pipelines.append(pipeline[0])
        device.count_objects("VkPipeline", 1)

    def _free(self) -> None:
        self._finalizer()
        self.device.lifetime.collect()


def destroy_pipelines(device: PipelineDevice, pipelines: list, layouts: list, set_layouts: list) -> None:
    handle = device.handle
    for kind, items, destroy in (("VkPipeline", pipelines, lib.vkDestroyPipeline),
                                 ("VkPipelineLayout", layouts, lib.vkDestroyPipelineLayout),
                                 ("VkDescriptorSetLayout", set_layouts, lib.vkDestroyDescriptorSetLayout)):
        for item in items:
            destroy(handle, item, ffi.NULL)
        device.count_objects(kind, -len(items))


def _modules(device: PipelineDevice, source: ExecutableSource) -> dict[str, tuple[bytes, str]]:
    """SPIR-V and entry point per export, linked, validated and saved for debugging as configured."""
    env = device.target_env
    if source.format == "glsl":
        result = {}
        for export in source.exports:
            code = shaders.compile_glsl(source.payload[export.name], env, export.name)  # (validated)
            shaders.save_for_debugging(f"{source.key[:16]}-{export.name}", code)
            result[export.name] = (code, "main")
        return result
    if source.format != "spirv":
        raise UnsupportedError(f"the Vulkan device runs SPIR-V or GLSL, not {source.format!r}; give "
                               f"ExecutableSource.spirv(...)/.glsl(...) or .multi(vulkan=...)")
    code = source.payload
    spirv.words(code)  # a clear error for something that is no SPIR-V at all
    if source.imports:
        for item in source.imports:
            if not isinstance(item, (bytes, bytearray)):
                raise ValidationError("spirv imports must be SPIR-V modules (bytes)")
            spirv.words(bytes(item))
        code = shaders.link([code] + [bytes(m) for m in source.imports], env, "spirv")
    shaders.validate(code, env, "spirv")
    shaders.save_for_debugging(source.key[:16], code)
    return {e.name: (code, e.name) for e in source.exports}


def _check(device: PipelineDevice, module: spirv.Module, export: Export, entry_name: str) -> None:
    """Refuse a module the device cannot run, or whose ABI disagrees with `export`."""
    what = f"export {export.name!r}"
    caps, real = device.capabilities, device.features.capabilities
    for cap in module.capabilities:
        name = spirv.CAPABILITY_NAMES.get(cap, f"capability {cap}")
        if cap in spirv.NOT_FOR_VULKAN:
            raise UnsupportedError(f"{what}: the SPIR-V declares {name}, an OpenCL capability no Vulkan device runs")
        if cap == 5:
            raise CompileError(f"{what}: the SPIR-V still declares Linkage: it imports functions nobody provided; "
                               f"pass the modules that define them as imports=")
        field = spirv.FEATURE_OF_CAPABILITY.get(cap)
        if field is not None and not (getattr(caps, field) and getattr(real, field)):
            raise UnsupportedError(f"{what}: the SPIR-V declares capability {name}, but the device's {field} is False")
        bit = spirv.SUBGROUP_BIT_OF_CAPABILITY.get(cap)
        if bit is not None and not caps.supported_subgroup_operations & real.supported_subgroup_operations & bit:
            raise UnsupportedError(f"{what}: the SPIR-V declares capability {name}, which the device's "
                                   f"supported_subgroup_operations (0x{caps.supported_subgroup_operations:x}) lack")
    entry = module.entry_points.get(entry_name)
    if entry is None or entry.model != spirv.GL_COMPUTE:
        found = ", ".join(n for n, e in module.entry_points.items() if e.model == spirv.GL_COMPUTE) or "none"
        raise ValidationError(f"{what}: the SPIR-V has no GLCompute entry point {entry_name!r} (it has: {found})")
    if module.uses_local_size_id and not device.features.maintenance4:
        raise UnsupportedError(f"{what}: the SPIR-V sets its LocalSize with LocalSizeId, which needs the "
                               f"maintenance4 feature this device lacks; use LocalSize")
    size = module.local_size(entry)
    if size is None:
        raise ValidationError(f"{what}: the SPIR-V sets no LocalSize; it must be {export.workgroup_size}")
    if tuple(size) != export.workgroup_size:
        raise ValidationError(f"{what}: the shader's LocalSize is {tuple(size)} but the Export's workgroup_size is "
                              f"{export.workgroup_size}; make them agree")
    for d in module.descriptors_of(entry):
        if d.kind != "storage buffer" or d.set != 0 or d.binding is None or d.binding >= export.bindings:
            raise ValidationError(f"{what}: the shader declares a {d.kind} at set {d.set}, binding {d.binding}; the "
                                  f"Export has {export.bindings} bindings: storage buffers at set 0, bindings 0 to "
                                  f"{export.bindings - 1}")
    for d in module.descriptors_of(entry):
        if d.binding in export.readonly and d.variable in module.written and d.variable not in module.non_writable:
            raise ValidationError(f"{what}: binding {d.binding} is declared readonly, but the shader may write it (a "
                                  f"store or atomic through it, and no `readonly` on its block); mark the buffer "
                                  f"readonly in the shader, or leave {d.binding} out of readonly=")
    for i, declared in enumerate(export.constant_types):
        found = module.push_constant_scalar(entry, 4 * i)
        if found is not None and found != declared:
            raise ValidationError(f"{what}: constants[{i}] is declared {declared}, but the shader's push-constant "
                                  f"member at offset {4 * i} is a {found}; make them agree")
    push = module.push_constants_of(entry)
    if push > 4 * export.constants:
        raise ValidationError(f"{what}: the shader's push-constant block is {push} bytes but the Export has "
                              f"{export.constants} constants ({4 * export.constants} bytes)")
