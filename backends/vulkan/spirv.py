"""SPIR-V reflection: what a module asks of the device and what each entry point's ABI is.

Read straight from the binary (a few KB: one pass over the words), so that a module declaring a
capability the device lacks, or disagreeing with its Export on bindings, constants, LocalSize or which bindings it
only reads, is refused with a clear hal error before the driver sees it. A binding the module may write is one
without NonWritable (GLSL's `readonly`) that a store, an atomic or a memory copy reaches through a pointer derived
from it (access chains, copies, and the selects and phis of variable pointers).
"""

from __future__ import annotations

import dataclasses
import struct

from hal.errors import ValidationError

MAGIC = 0x07230203

# Opcodes.
OP_ENTRY_POINT, OP_EXECUTION_MODE, OP_CAPABILITY = 15, 16, 17
OP_TYPE_BOOL, OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_VECTOR, OP_TYPE_MATRIX = 20, 21, 22, 23, 24
OP_TYPE_ARRAY, OP_TYPE_RUNTIME_ARRAY, OP_TYPE_STRUCT, OP_TYPE_POINTER = 28, 29, 30, 32
OP_CONSTANT, OP_CONSTANT_COMPOSITE, OP_SPEC_CONSTANT, OP_SPEC_CONSTANT_COMPOSITE = 43, 44, 50, 51
OP_VARIABLE, OP_DECORATE, OP_MEMBER_DECORATE, OP_EXECUTION_MODE_ID = 59, 71, 72, 331
OP_STORE, OP_COPY_MEMORY, OP_COPY_MEMORY_SIZED = 62, 63, 64
# Instructions whose result is a pointer into what their operands (from the third word) point into.
POINTER_DERIVING = {65, 66, 67, 70, 83, 124, 169, 245}  # access chains, CopyObject, Bitcast, Select, Phi
# Atomics that write: their pointer is the third word (after result type and id), but for OpAtomicStore and
# OpAtomicFlagClear, which have no result: the first (OpAtomicLoad, 227, only reads).
ATOMICS = set(range(229, 243)) | {318, 5614, 5615, 6035}  # exchanges, arithmetic, flag test-and-set, float add/min/max
OP_ATOMIC_STORE, OP_ATOMIC_FLAG_CLEAR = 228, 319
# Enumerants.
GL_COMPUTE = 5
MODE_LOCAL_SIZE, MODE_LOCAL_SIZE_ID = 17, 38
DEC_BUFFER_BLOCK, DEC_ARRAY_STRIDE, DEC_BUILTIN, DEC_NON_WRITABLE, DEC_BINDING, DEC_SET, DEC_OFFSET = \
    3, 6, 11, 24, 33, 34, 35
BUILTIN_WORKGROUP_SIZE = 25
SC_UNIFORM_CONSTANT, SC_UNIFORM, SC_PUSH_CONSTANT, SC_STORAGE_BUFFER = 0, 2, 9, 12

# Capabilities, by the hal.Capabilities field that must allow them.
CAPABILITY_NAMES = {
    1: "Shader", 4: "Addresses", 5: "Linkage", 6: "Kernel", 9: "Float16", 10: "Float64", 11: "Int64",
    12: "Int64Atomics", 22: "Int16", 39: "Int8", 61: "GroupNonUniform", 62: "GroupNonUniformVote",
    63: "GroupNonUniformArithmetic",
    64: "GroupNonUniformBallot", 65: "GroupNonUniformShuffle", 66: "GroupNonUniformShuffleRelative",
    67: "GroupNonUniformClustered", 68: "GroupNonUniformQuad", 4433: "StorageBuffer16BitAccess",
    4434: "UniformAndStorageBuffer16BitAccess", 4448: "StorageBuffer8BitAccess",
    4449: "UniformAndStorageBuffer8BitAccess",
}
FEATURE_OF_CAPABILITY = {
    9: "supports_float16", 10: "supports_float64", 11: "supports_int64", 12: "supports_int64_atomics",
    22: "supports_int16", 39: "supports_int8",
    4433: "supports_storage_buffer_16bit_access", 4434: "supports_storage_buffer_16bit_access",
    4448: "supports_storage_buffer_8bit_access", 4449: "supports_storage_buffer_8bit_access",
}
# GroupNonUniform* -> the VkSubgroupFeatureFlagBits bit in supported_subgroup_operations.
SUBGROUP_BIT_OF_CAPABILITY = {61: 1, 62: 2, 63: 4, 64: 8, 65: 16, 66: 32, 67: 64, 68: 128}
NOT_FOR_VULKAN = {4: "Addresses", 6: "Kernel"}  # OpenCL capabilities: a Vulkan driver cannot run them


@dataclasses.dataclass
class Descriptor:
    variable: int
    set: int | None
    binding: int | None
    kind: str  # "storage buffer", "uniform buffer" or "other"


@dataclasses.dataclass
class EntryPoint:
    name: str
    model: int
    interface: tuple[int, ...]
    local_size: tuple[int, int, int] | None = None


@dataclasses.dataclass
class Module:
    """The facts of one module that hal checks."""

    version: tuple[int, int]
    capabilities: list[int]
    entry_points: dict[str, EntryPoint]
    descriptors: list[Descriptor]
    push_constant_bytes: dict[int, int]  # push-constant variable -> size of its block
    workgroup_size: tuple[int, int, int] | None  # the WorkgroupSize builtin, which overrides LocalSize
    uses_local_size_id: bool
    push_constant_scalars: dict[int, dict[int, str]]  # push-constant variable -> offset -> a scalar member's type
    written: frozenset[int]  # variables a store, atomic or memory copy may write through
    non_writable: frozenset[int]  # variables decorated NonWritable, or whose block's members all are

    def descriptors_of(self, entry: EntryPoint) -> list[Descriptor]:
        """The descriptors `entry` uses: its interface lists them from SPIR-V 1.4; before, every one counts."""
        if self.version >= (1, 4):
            used = set(entry.interface)
            return [d for d in self.descriptors if d.variable in used]
        return self.descriptors

    def push_constants_of(self, entry: EntryPoint) -> int:
        sizes = self.push_constant_bytes
        if self.version >= (1, 4):
            return max((sizes[v] for v in entry.interface if v in sizes), default=0)
        return max(sizes.values(), default=0)

    def push_constant_scalar(self, entry: EntryPoint, offset: int) -> str | None:
        """The type ("int32", "uint32", "float32", ...) of `entry`'s push-constant member at `offset`, if that is a
        scalar member of the block."""
        scalars = self.push_constant_scalars
        variables = [v for v in entry.interface if v in scalars] if self.version >= (1, 4) else list(scalars)
        return next((scalars[v][offset] for v in variables if offset in scalars[v]), None)

    def local_size(self, entry: EntryPoint) -> tuple[int, int, int] | None:
        return self.workgroup_size or entry.local_size


def words(data: bytes) -> tuple[int, ...]:
    """The module as 32-bit words in host order (a byte-swapped module is swapped back)."""
    if len(data) < 20 or len(data) % 4:
        raise ValidationError(f"spirv: {len(data)} bytes is not a SPIR-V module (a header of 5 words, whole words)")
    w = struct.unpack(f"<{len(data) // 4}I", data)
    if w[0] != MAGIC:
        w = struct.unpack(f">{len(data) // 4}I", data)
        if w[0] != MAGIC:
            raise ValidationError(f"spirv: bad magic number 0x{w[0]:08x}; expected 0x{MAGIC:08x}")
    return w


def _string(ws: tuple[int, ...], start: int, end: int) -> tuple[str, int]:
    """A nul-terminated literal string at word `start`; returns it and the word after it."""
    raw = b"".join(struct.pack("<I", x) for x in ws[start:end])
    text = raw.split(b"\0", 1)[0]
    return text.decode("utf-8", "replace"), start + len(text) // 4 + 1


def parse(data: bytes) -> Module:
    ws = words(data)
    version = (ws[1] >> 16 & 0xFF, ws[1] >> 8 & 0xFF)
    capabilities: list[int] = []
    entries: dict[int, EntryPoint] = {}
    decorations: dict[int, dict[int, int]] = {}
    member_offsets: dict[int, dict[int, int]] = {}
    types: dict[int, tuple] = {}
    constants: dict[int, int] = {}
    composites: dict[int, tuple[int, ...]] = {}
    variables: list[tuple[int, int, int]] = []  # (id, pointer type, storage class)
    derived: dict[int, tuple[int, ...]] = {}  # pointer id -> the ids it derives from
    stored: list[int] = []  # the pointers written through
    non_writable_members: dict[int, set[int]] = {}  # struct -> its members decorated NonWritable
    local_size_ids: dict[int, tuple[int, int, int]] = {}
    i = 5
    n = len(ws)
    while i < n:
        count, op = ws[i] >> 16, ws[i] & 0xFFFF
        if count == 0 or i + count > n:
            raise ValidationError(f"spirv: malformed instruction at word {i} (opcode {op}, {count} words)")
        a = ws[i + 1:i + count]
        if op == OP_CAPABILITY:
            capabilities.append(a[0])
        elif op == OP_ENTRY_POINT:
            name, after = _string(ws, i + 3, i + count)
            entries[a[1]] = EntryPoint(name, a[0], tuple(ws[after:i + count]))
        elif op == OP_EXECUTION_MODE and a[1] == MODE_LOCAL_SIZE and a[0] in entries:
            entries[a[0]].local_size = (a[2], a[3], a[4])
        elif op == OP_EXECUTION_MODE_ID and a[1] == MODE_LOCAL_SIZE_ID:
            local_size_ids[a[0]] = (a[2], a[3], a[4])
        elif op == OP_DECORATE:
            decorations.setdefault(a[0], {})[a[1]] = a[2] if len(a) > 2 else 1
        elif op == OP_MEMBER_DECORATE and a[2] == DEC_OFFSET:
            member_offsets.setdefault(a[0], {})[a[1]] = a[3]
        elif op == OP_MEMBER_DECORATE and a[2] == DEC_NON_WRITABLE:
            non_writable_members.setdefault(a[0], set()).add(a[1])
        elif op in POINTER_DERIVING and len(a) > 2:
            derived[a[1]] = tuple(a[2:]) if op in (169, 245) else (a[2],)  # Select: condition too (harmless)
        elif op in (OP_STORE, OP_COPY_MEMORY, OP_COPY_MEMORY_SIZED, OP_ATOMIC_STORE, OP_ATOMIC_FLAG_CLEAR):
            stored.append(a[0])
        elif op in ATOMICS and len(a) > 2:
            stored.append(a[2])
        elif op == OP_TYPE_INT:
            types[a[0]] = ("scalar", a[1] // 8, f"{'int' if a[2] else 'uint'}{a[1]}")
        elif op == OP_TYPE_FLOAT:
            types[a[0]] = ("scalar", a[1] // 8, f"float{a[1]}")
        elif op == OP_TYPE_BOOL:
            types[a[0]] = ("scalar", 4, "bool")
        elif op in (OP_TYPE_VECTOR, OP_TYPE_MATRIX):
            types[a[0]] = ("vector", a[1], a[2])
        elif op == OP_TYPE_ARRAY:
            types[a[0]] = ("array", a[1], a[2])
        elif op == OP_TYPE_RUNTIME_ARRAY:
            types[a[0]] = ("runtime", a[1])
        elif op == OP_TYPE_STRUCT:
            types[a[0]] = ("struct",) + tuple(a[1:])
        elif op == OP_TYPE_POINTER:
            types[a[0]] = ("pointer", a[1], a[2])
        elif op in (OP_CONSTANT, OP_SPEC_CONSTANT):
            constants[a[1]] = a[2]
        elif op in (OP_CONSTANT_COMPOSITE, OP_SPEC_CONSTANT_COMPOSITE):
            composites[a[1]] = tuple(a[2:])
        elif op == OP_VARIABLE:
            variables.append((a[1], a[0], a[2]))
        i += count
    for entry_id, ids in local_size_ids.items():
        if entry_id in entries and all(x in constants for x in ids):
            entries[entry_id].local_size = tuple(constants[x] for x in ids)
    workgroup_size = None
    for target, decs in decorations.items():
        if decs.get(DEC_BUILTIN) == BUILTIN_WORKGROUP_SIZE and target in composites:
            parts = composites[target]
            if all(p in constants for p in parts):
                workgroup_size = tuple(constants[p] for p in parts)
    descriptors, push, push_scalars, non_writable = [], {}, {}, set()
    for var, ptr, storage in variables:
        t = types.get(ptr)
        pointee = t[2] if t and t[0] == "pointer" else None
        while pointee is not None and types.get(pointee, ("?",))[0] in ("array", "runtime"):
            pointee = types[pointee][1]  # arrays of blocks: look at the block
        decs = decorations.get(pointee, {})
        block = types.get(pointee, ("?",))
        if DEC_NON_WRITABLE in decorations.get(var, {}) or block[0] == "struct" and len(block) > 1 and \
                non_writable_members.get(pointee, set()) >= set(range(len(block) - 1)):
            non_writable.add(var)  # the variable, or every member of its block
        if storage == SC_PUSH_CONSTANT:
            push[var] = _size(pointee, types, constants, decorations, member_offsets)
            if block[0] == "struct":
                where = member_offsets.get(pointee, {})
                push_scalars[var] = {where[m]: types[member][2] for m, member in enumerate(block[1:])
                                     if m in where and types.get(member, ("?",))[0] == "scalar"}
        elif storage in (SC_STORAGE_BUFFER, SC_UNIFORM, SC_UNIFORM_CONSTANT):
            if storage == SC_STORAGE_BUFFER or (storage == SC_UNIFORM and DEC_BUFFER_BLOCK in decs):
                kind = "storage buffer"
            elif storage == SC_UNIFORM:
                kind = "uniform buffer"
            else:
                kind = "other"
            vdecs = decorations.get(var, {})
            descriptors.append(Descriptor(var, vdecs.get(DEC_SET), vdecs.get(DEC_BINDING), kind))
    return Module(version, capabilities, {e.name: e for e in entries.values()}, descriptors, push, workgroup_size,
                  bool(local_size_ids), push_scalars, _written(stored, derived), frozenset(non_writable))


def _written(stored: list[int], derived: dict[int, tuple[int, ...]]) -> frozenset[int]:
    """Every id a written pointer derives from, the variables among them."""
    seen: set[int] = set()
    todo = list(stored)
    while todo:
        x = todo.pop()
        if x not in seen:
            seen.add(x)
            todo.extend(derived.get(x, ()))
    return frozenset(seen)


def _size(type_id: int | None, types: dict, constants: dict, decorations: dict, offsets: dict) -> int:
    """Bytes a type occupies in a push-constant block (its members' offsets decide a struct's size)."""
    t = types.get(type_id)
    if t is None:
        return 0
    kind = t[0]
    if kind == "scalar":
        return t[1]
    if kind == "vector":
        return t[2] * _size(t[1], types, constants, decorations, offsets)
    if kind == "array":
        stride = decorations.get(type_id, {}).get(DEC_ARRAY_STRIDE) or _size(t[1], types, constants, decorations,
                                                                               offsets)
        return stride * constants.get(t[2], 1)
    if kind == "struct":
        members = t[1:]
        where = offsets.get(type_id, {})
        return max((where.get(m, 0) + _size(member, types, constants, decorations, offsets)
                    for m, member in enumerate(members)), default=0)
    return 0
