"""What a command accesses: the references it reads and writes, and a reference's byte range (compiled).

The planner (hal.dependencies), the hazard tracker (hal.hazards), the race detector (hal.races) and the recorder all
read a command's accesses through these; at end() the recorder finds here which commands use each slot and each
constant slot."""

from hal.buffer cimport Buffer, BufferRef, ConstantSlot
from hal.commands cimport Call, Collective, Command, Copy, Dispatch, Fill, Region, Update


cpdef tuple access_range(BufferRef ref, tuple table=None):
    """(key, start, end) of a reference: key is the Buffer, or the slot index for slot references
    (the bound Buffer when a binding table is given)."""
    cdef Buffer b = ref.buffer
    if b is None:
        if table is None:
            return ref.slot, ref.offset, ref.offset + ref.nbytes if ref.bounded else OPEN_END
        b = table[ref.slot]
        return b, ref.offset, ref.offset + ref.nbytes if ref.bounded else b.size
    return b, ref.offset, ref.offset + ref.nbytes


cpdef tuple refs_and_writes(Command command):
    """The references `command` accesses and, for each, whether it writes it."""
    cdef type kind = type(command)
    cdef Dispatch d
    if kind is Dispatch:
        d = <Dispatch>command
        if d.parameters is None:
            return d.bindings, d.writes
        return d.bindings + (d.parameters,), d.writes + (False,)  # the workgroup counts are read
    if kind is Copy:
        return ((<Copy>command).source, (<Copy>command).target), (False, True)
    if kind is Fill:
        return ((<Fill>command).target,), (True,)
    if kind is Region:
        return (<Region>command).refs, (<Region>command).writes
    if kind is Collective:
        return collective_accesses(<Collective>command)
    if kind is Call:
        return (<Call>command).bindings, (<Call>command).writes
    return ((<Update>command).target,), (True,)


cdef tuple collective_accesses(Collective c):
    """A collective reads its source, writes its target and its communicator's order token."""
    if c.source is None:
        return (c.target, c.order), (True, True)
    if c.target is None:
        return (c.source, c.order), (False, True)
    return (c.source, c.target, c.order), (False, True, True)


cdef tuple slot_users(list slot_commands, list constant_commands):
    """slot -> the commands using it and constant slot -> the commands reading it (see _by_slot); a region
    uses the slots its body (or its condition) uses."""
    if not slot_commands and not constant_commands:
        return {}, {}
    slot_uses, constant_uses = [], []
    for c in slot_commands:
        for r in refs_and_writes(c)[0]:
            if (<BufferRef>r).buffer is None:
                slot_uses.append(((<BufferRef>r).slot, (<Command>c).index))
    for c in constant_commands:
        if type(c) is Region:
            constant_uses.extend([(slot, (<Command>c).index) for slot in sorted((<Region>c).body.constant_users)])
        else:
            values = (<Call>c).constants if type(c) is Call else (<Dispatch>c).constants
            constant_uses.extend([((<ConstantSlot>v).index, (<Command>c).index) for v in values
                                  if type(v) is ConstantSlot])
    return _by_slot(slot_uses), _by_slot(constant_uses)


cdef dict _by_slot(list uses):
    """slot -> the commands using it, in recording order and each once, from (slot, command index) pairs in
    recording order."""
    users = {}
    for slot, index in uses:
        user = users.setdefault(slot, [])
        if not user or user[-1] != index:
            user.append(index)
    return {slot: tuple(user) for slot, user in users.items()}
