"""PTX reflection: each entry's parameter types, and the pointer parameters its stores and atomics may write through.

Read from PTX text (NVRTC's, beside the cubin it loads, or a PTX source itself), so that a kernel that disagrees with
its Export on the constants' types or on which bindings it only reads is refused before the driver sees it. An
address is followed from `ld.param` of a 64-bit parameter through the arithmetic that derives other registers from
it (loads end the trail: what they return is data). Where PTX hides the answer hal trusts the Export: a cubin or
LTO-IR source, a pointer stored to memory and loaded back, a store inside a called `.func`, an address derived from
several pointer parameters.
"""

from __future__ import annotations

import dataclasses
import re

from hal.errors import ValidationError
from hal.executable import Export

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(([^)]*)\)")
_PARAMETER = re.compile(r"\.param\b(.*?)([\w$]+)\s*(?:\[\d*\])?\s*$", re.S)
_TYPE = re.compile(r"\.([usbf](?:8|16|32|64)|pred)\b")
_REGISTER = re.compile(r"%[\w$]+")
_LABEL = re.compile(r"^[\w$]+:\s*")
_GUARD = re.compile(r"^@!?%[\w$]+\s+")
# Instructions with no destination register (their operands are all read).
_NO_DESTINATION = {"bra", "ret", "exit", "bar", "barrier", "membar", "fence", "griddepcontrol", "call", "trap",
                   "brkpt", "pmevent", "prefetch", "prefetchu", "discard", "applypriority", "createpolicy",
                   "nanosleep", "elect", "cp", "st", "red", "stmatrix", "mbarrier"}
# State spaces a kernel parameter's pointer can never address.
_LOCAL_SPACES = (".shared", ".local", ".param", ".const")


@dataclasses.dataclass(frozen=True)
class Entry:
    """One kernel: its parameters' PTX types (".u64", ".f32", ...; "" for an untyped byte array) and, for each store
    or atomic to memory a parameter can point into, the 64-bit parameters its address derives from."""

    name: str
    parameter_types: tuple[str, ...]
    write_origins: tuple[frozenset[int], ...]

    def written(self, among: set[int]) -> set[int]:
        """The parameters in `among` that a store or atomic writes through: one whose address derives from those
        parameters only (an address that may also point into a parameter outside `among` proves nothing)."""
        found: set[int] = set()
        for origins in self.write_origins:
            if origins and origins <= among:
                found |= origins
        return found


def entries(ptx: str) -> dict[str, Entry]:
    """Every `.entry` of the module, by name."""
    text = _COMMENTS.sub("", ptx)
    found = {}
    for match in _ENTRY.finditer(text):
        name, parameters = match.group(1), [p for p in match.group(2).split(",") if p.strip()]
        names, types = [], []
        for declaration in parameters:
            parsed = _PARAMETER.search(declaration.strip())
            if parsed is None:
                break
            kind = _TYPE.search(parsed.group(1))
            names.append(parsed.group(2))
            types.append("." + kind.group(1) if kind else "")
        body = _body(text, match.end())
        found[name] = Entry(name, tuple(types), _write_origins(body, names, types))
    return found


def check_exports(text: str, exports: tuple[Export, ...]) -> None:
    """Refuse an Export whose typed constants or readonly bindings the kernel's PTX contradicts."""
    found = entries(text)
    for export in exports:
        entry = found.get(export.name)
        if entry is not None:  # (cuModuleGetFunction names a missing kernel)
            check_entry(entry, export)


def check_entry(entry: Entry, export: Export) -> None:
    """Refuse `export` if kernel `entry` contradicts its typed constants or readonly bindings."""
    types = entry.parameter_types
    for i, declared in enumerate(export.constant_types):
        index = export.bindings + i
        ptx_type = types[index] if index < len(types) else ""  # (a wrong count: the parameter sizes' check)
        if ptx_type in (".f32", ".u32", ".s32") and (ptx_type == ".f32") != (declared == "float32"):
            kind = "a float" if ptx_type == ".f32" else "an integer"
            raise ValidationError(f"export {export.name!r}: constants[{i}] is declared {declared}, but the "
                                  f"kernel's parameter {index} is {ptx_type[1:]} in its PTX ({kind}); make them "
                                  f"agree")
    written = entry.written(set(export.readonly))
    if written:
        binding = min(written)
        raise ValidationError(f"export {export.name!r}: binding {binding} is declared readonly, but the kernel "
                              f"stores or atomically writes through its pointer parameter {binding}; make the "
                              f"kernel only read it, or leave {binding} out of readonly=")


def _body(text: str, start: int) -> str:
    """The braces-delimited body that follows an entry's parameter list."""
    open_at = text.find("{", start)
    if open_at < 0:
        return ""
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1:i]
    return text[open_at + 1:]


def _write_origins(body: str, names: list[str], types: list[str]) -> tuple[frozenset[int], ...]:
    """For each store or atomic to memory, the 64-bit parameters its address register derives from."""
    symbols = {n: i for i, (n, t) in enumerate(zip(names, types, strict=True)) if t in (".u64", ".s64", ".b64")}
    instructions = [_instruction(s) for s in body.split(";")]
    instructions = [i for i in instructions if i is not None]
    origins: dict[str, frozenset[int]] = {}

    def of(operand: str) -> frozenset[int]:
        found = frozenset(symbols[s] for s in re.findall(r"[\w$]+", operand) if s in symbols)
        for register in _REGISTER.findall(operand):
            found |= origins.get(register, frozenset())
        return found

    changed = True
    while changed:  # to a fixed point: a loop carries a register from its end back to its start
        changed = False
        for opcode, operands in instructions:
            base = opcode.split(".")[0]
            if base in _NO_DESTINATION or not operands:
                continue
            if base in ("ld", "ldu", "atom", "tex", "tld4", "suld"):
                derived = of(operands[1]) if opcode.startswith("ld.param") and len(operands) > 1 else frozenset()
            else:
                derived = frozenset().union(*(of(o) for o in operands[1:]))
            for register in _REGISTER.findall(operands[0]):
                if not derived <= origins.get(register, frozenset()):
                    origins[register] = origins.get(register, frozenset()) | derived
                    changed = True
    writes = []
    for opcode, operands in instructions:
        base = opcode.split(".")[0]
        if base not in ("st", "atom", "red", "cp") or any(space in opcode for space in _LOCAL_SPACES):
            continue
        if base == "cp" and not opcode.startswith(("cp.async.bulk.global", "cp.reduce.async.bulk.global")):
            continue
        address = next((o for o in operands if o.startswith("[")), None)
        if address is not None:
            writes.append(of(address))
    return tuple(writes)


def _instruction(statement: str) -> tuple[str, list[str]] | None:
    """(opcode, operands) of one statement; None for directives and empty statements."""
    statement = statement.strip()
    while True:  # the braces of scopes, labels, then a guard predicate
        stripped = _GUARD.sub("", _LABEL.sub("", statement.lstrip("{} \t\n"))).strip()
        if stripped == statement:
            break
        statement = stripped
    if not statement or statement.startswith("."):
        return None
    opcode, *rest = statement.split(None, 1)
    return opcode, _split_operands(rest[0] if rest else "")


def _split_operands(text: str) -> list[str]:
    """Comma-separated operands, keeping vector braces `{%r1, %r2}` and brackets together."""
    operands, depth, current = [], 0, []
    for ch in text:
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if ch == "," and depth == 0:
            operands.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        operands.append("".join(current).strip())
    return operands
