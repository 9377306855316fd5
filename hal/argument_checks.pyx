"""The checks of a command's arguments, at record time and, for slot references, at each submit (compiled).

Each refusal names the command, the argument and the limit. The recorder (hal.command_buffer) takes the common case
inline and calls these on the failing path to word the error, or for arguments that are not plain tuples.
"""

from libc.math cimport isinf, isnan
from libc.stdint cimport uint32_t

from collections.abc import Sequence

import numpy as np

from hal.buffer cimport (Buffer, ConstantSlot, USAGE_DISPATCH_STORAGE, USAGE_TRANSFER_SOURCE,
                         USAGE_TRANSFER_TARGET)
from hal.commands cimport checked_word

from hal.commands import constant_word
from hal.constant_types import convert
from hal.errors import ValidationError
from hal.executable import Executable
from hal.transients import Transient

cdef double FLOAT32_MAX = 3.4028234663852886e38
USAGE_NAMES = {USAGE_TRANSFER_SOURCE: "TRANSFER_SOURCE", USAGE_TRANSFER_TARGET: "TRANSFER_TARGET",
               USAGE_DISPATCH_STORAGE: "DISPATCH_STORAGE"}


cdef int plain_word(object c, uint32_t* word) except -1:
    """Is `c` a constant that is certainly a valid 32-bit word (an int in range, or a float within float32's range)?
    If so, `word` is set to it."""
    cdef long long n = 0
    cdef double v
    if type(c) is int:
        if not int_within(c, -2147483648, 4294967295, &n):
            return False
        word[0] = <uint32_t>n
        return True
    if type(c) is float:
        v = c
        if -FLOAT32_MAX <= v <= FLOAT32_MAX or isinf(v) or isnan(v):
            word[0] = checked_word(c)
            return True
    return False


def check_range(Py_ssize_t offset, Py_ssize_t nbytes, Buffer b, caps, index, command, what, usage) -> None:
    """Every check of a range of `b` used as `what` (words for the message), raising the first that fails (the
    recorder calls this only on its failing path, to word the error)."""
    if nbytes <= 0 or offset + nbytes > b.size:
        raise ValidationError(f"command {index} ({command}): {what} range [{offset}, {offset + nbytes}) "
                              f"is empty or outside the buffer's {b.size} bytes")
    if not b.usage_bits & usage:
        raise ValidationError(f"command {index} ({command}): {what} lacks BufferUsage.{USAGE_NAMES[usage]} "
                              f"(it was allocated with {b.usage!r})")
    if usage == USAGE_DISPATCH_STORAGE:
        if offset % caps.storage_buffer_offset_alignment:
            raise ValidationError(f"command {index} ({command}): {what} offset {offset} is not a multiple "
                                  f"of the device's storage_buffer_offset_alignment "
                                  f"{caps.storage_buffer_offset_alignment}")
        if nbytes > caps.max_storage_buffer_range:
            raise ValidationError(f"command {index} ({command}): {what} spans {nbytes} bytes, more than the "
                                  f"device's max_storage_buffer_range {caps.max_storage_buffer_range}")


def foreign(Buffer b, device) -> str:
    """What a buffer of another device than `device` (the command buffer's), or a transient used outside its
    command buffer, is called in refusals."""
    if isinstance(b, Transient):
        return (f"is a transient (cb.alloca) of {b.device!r}: only that command buffer's own commands use it, "
                f"directly (not through a binding table)")
    return f"is a buffer of another device ({b.device!r}), not of the command buffer's ({device!r})"


def binding_name(name, binding) -> str:
    return f"bindings[{binding}]" if name is None else name


def refuse(index, command, name, binding, what) -> None:
    """Refuse reference `name` (None: bindings[binding]) of command `index`: it `what`."""
    raise ValidationError(f"command {index} ({command}): {binding_name(name, binding)} {what}")


def bad_export(executable, name, device, index, command) -> None:
    if not isinstance(executable, Executable) or executable.device is not device:
        raise ValidationError(f"command {index} ({command}): executable must be a hal.Executable loaded "
                              f"on this device, got {executable!r}")
    if executable.released:
        raise ValidationError(f"command {index} ({command} {name}): the executable was released; load it again")
    raise ValidationError(f"command {index} ({command}): no export {name!r}; the executable has "
                          f"{', '.join(executable.entries)}")


def check_constants(tuple constants, index, name, Py_ssize_t capacity, command) -> bool:
    """Check every constant (a 32-bit value or a constant slot below `capacity`); does one use a slot?"""
    slots = False
    for i, c in enumerate(constants):
        if type(c) is ConstantSlot:
            if (<ConstantSlot>c).index >= capacity:
                raise ValidationError(f"command {index} ({command} {name}): constants[{i}] uses constant slot "
                                      f"{(<ConstantSlot>c).index}, but the command buffer's constant_capacity is "
                                      f"{capacity}")
            slots = True
            continue
        try:
            constant_word(c)
        except (TypeError, OverflowError) as e:
            raise ValidationError(f"command {index} ({command} {name}): constants[{i}] = {c!r}: {e}") from None
    return slots


def fill_pattern(pattern, index) -> bytes:
    if isinstance(pattern, (bytes, bytearray, memoryview)):
        p = bytes(pattern)
    elif isinstance(pattern, np.generic):
        p = pattern.tobytes()
    else:
        raise ValidationError(f"command {index} (fill_buffer): pattern must be bytes or a numpy scalar "
                              f"(e.g. np.uint32(7), np.float32(1.0)), got {type(pattern).__name__}")
    if len(p) not in (1, 2, 4):
        raise ValidationError(f"command {index} (fill_buffer): pattern has {len(p)} bytes; it must have 1, 2 or 4")
    return p


def workgroup_counts(workgroups, index, name, limit) -> tuple:
    """The slow path: normalise 1 to 3 integers (numpy ones too) and check them against the limit."""
    if isinstance(workgroups, (int, np.integer)) and not isinstance(workgroups, bool):
        workgroups = (workgroups,)
    try:
        items = tuple(workgroups)
    except TypeError:
        items = ()
    if not 1 <= len(items) <= 3:
        raise ValidationError(f"command {index} (dispatch {name}): workgroups must be 1 to 3 integers, "
                              f"got {workgroups!r}")
    items += (1,) * (3 - len(items))
    for axis, w in enumerate(items):
        if not isinstance(w, (int, np.integer)) or isinstance(w, bool) or not 0 < w <= limit[axis]:
            raise ValidationError(f"command {index} (dispatch {name}): workgroups[{axis}] = {w!r} must be "
                                  f"an integer from 1 to the device's max_workgroup_count {limit[axis]}")
    return (int(items[0]), int(items[1]), int(items[2]))


def as_sequence(items, index, name, what, command) -> tuple:
    if isinstance(items, (str, bytes)):
        raise ValidationError(f"command {index} ({command} {name}): {what} must be a sequence, "
                              f"got {type(items).__name__}")
    try:
        return tuple(items)
    except TypeError:
        raise ValidationError(f"command {index} ({command} {name}): {what} must be a sequence, "
                              f"got {type(items).__name__}") from None


def constant_values(constants) -> tuple:
    """queue_execute's constants as a tuple: from a list, another sequence or a 1-d numpy array; not from a string,
    a mapping, a set or a lone value, whose order or meaning would be a guess."""
    if isinstance(constants, Sequence) and not isinstance(constants, (str, bytes, bytearray)) or \
            isinstance(constants, np.ndarray) and constants.ndim == 1:
        return tuple(constants)
    raise ValidationError(f"queue_execute: constants must be a sequence of 32-bit values (a tuple, list or 1-d "
                          f"numpy array), got {type(constants).__name__}")


def table_of(binding_table) -> tuple:
    if isinstance(binding_table, Buffer):
        raise ValidationError("queue_execute: binding_table must be a sequence of buffers, got one buffer")
    try:
        return tuple(binding_table)
    except TypeError:
        raise ValidationError(f"queue_execute: binding_table must be a sequence of buffers, "
                              f"got {type(binding_table).__name__}") from None


def typed_constants(tuple constants, tuple types, index, name, command, dict slot_types) -> tuple:
    """A typed export's constants converted as its kernel reads them (hal.constant_types); each constant slot's type
    noted in `slot_types` (slot -> (type, command, constant)), and a slot read as two types refused."""
    converted = []
    for i, (value, type_name) in enumerate(zip(constants, types)):
        if type(value) is ConstantSlot:
            seen = slot_types.setdefault((<ConstantSlot>value).index, (type_name, index, i))
            if seen[0] != type_name:
                raise ValidationError(f"command {index} ({command} {name}): constants[{i}] reads constant slot "
                                      f"{(<ConstantSlot>value).index} as {type_name}, but command {seen[1]} reads it "
                                      f"as {seen[0]} (constants[{seen[2]}]); give each type its own slot")
            converted.append(value)
            continue
        try:
            converted.append(convert(value, type_name))
        except (TypeError, OverflowError) as e:
            raise ValidationError(f"command {index} ({command} {name}): constants[{i}] = {value!r} for a {type_name} "
                                  f"constant: {e}") from None
    return tuple(converted)
