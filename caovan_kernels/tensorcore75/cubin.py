"""Registers and local memory per function, read from a CUDA binary (cubin) itself.

ptxas prints these with -v, but Triton prints that log to the process's stdout, which cannot be captured safely in an
engine (process-wide, not thread-safe). The binary carries the same facts: a cubin is an ELF64 file whose `.nv.info`
section holds EIATTR records, one per (attribute, function). Each record is a format byte, an attribute byte, then
either a 2-byte value (EIFMT_NVAL/BVAL/HVAL) or a 2-byte size and that many payload bytes (EIFMT_SVAL). The three
read here are SVAL records whose payload is (function symbol index: u32, value: u32); their ids are checked against
cuobjdump's reading of ptxas's output in tests/caovan_kernels/tensorcore75/test_cubin.py.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from caovan_kernels.errors import CubinError

_EIFMT_SVAL = 0x04
_EIATTR_FRAME_SIZE = 0x11  # bytes of local memory the function's own frame takes, per thread (spills, local arrays)
_EIATTR_MIN_STACK_SIZE = 0x12  # the same with its callees' frames (ptxas -v: "cumulative stack size")
_EIATTR_REGCOUNT = 0x2F
_READ = {_EIATTR_REGCOUNT: "registers", _EIATTR_FRAME_SIZE: "frame_bytes", _EIATTR_MIN_STACK_SIZE: "stack_bytes"}

_SECTION = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr: name, type, flags, addr, offset, size, link, info, align, entsize
_SYMBOL = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, shndx, value, size


@dataclass(frozen=True)
class Resources:
    """What one function of a cubin uses per thread."""

    registers: int
    frame_bytes: int
    stack_bytes: int

    @property
    def local_bytes(self) -> int:
        """Local memory per thread: register spills and local arrays, its callees' included."""
        return max(self.frame_bytes, self.stack_bytes)


@dataclass(frozen=True)
class _Section:
    name: str
    offset: int
    size: int
    link: int


def _c_string(table: bytes, at: int) -> str:
    end = table.find(b"\0", at)
    return table[at : end if end >= 0 else len(table)].decode("ascii", "replace")


def _sections(data: bytes) -> list[_Section]:
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise CubinError("not a little-endian ELF64 file (a cubin is one)")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    if shentsize != _SECTION.size or shoff + shnum * shentsize > len(data) or shstrndx >= shnum:
        raise CubinError("its section header table is cut short or malformed")
    headers = [_SECTION.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    names_at, names_size = headers[shstrndx][4], headers[shstrndx][5]
    names = data[names_at : names_at + names_size]
    return [_Section(_c_string(names, h[0]), h[4], h[5], h[6]) for h in headers]


def _symbol_names(data: bytes, sections: list[_Section]) -> list[str]:
    symtab = next((s for s in sections if s.name == ".symtab"), None)
    if symtab is None or symtab.link >= len(sections):
        raise CubinError("it has no symbol table")
    strings = sections[symtab.link]
    table = data[strings.offset : strings.offset + strings.size]
    count = symtab.size // _SYMBOL.size
    return [_c_string(table, _SYMBOL.unpack_from(data, symtab.offset + i * _SYMBOL.size)[0]) for i in range(count)]


def read_resources(data: bytes) -> dict[str, Resources]:
    """{function name: Resources} for every function of the cubin that has a register count."""
    try:
        sections = _sections(data)
        symbols = _symbol_names(data, sections)
        found: dict[str, dict[str, int]] = {}
        for info in (s for s in sections if s.name == ".nv.info" or s.name.startswith(".nv.info.")):
            at, end = info.offset, info.offset + info.size
            while at + 4 <= end:
                fmt, attribute, size = struct.unpack_from("<BBH", data, at)
                at += 4
                if fmt != _EIFMT_SVAL:  # the other formats hold their value in those 2 bytes: no payload follows
                    continue
                if attribute in _READ and size == 8:
                    symbol, value = struct.unpack_from("<II", data, at)
                    if symbol >= len(symbols):
                        raise CubinError(f"an EIATTR record names symbol {symbol}, the table has {len(symbols)}")
                    found.setdefault(symbols[symbol], {})[_READ[attribute]] = value
                at += size
    except struct.error as exc:
        raise CubinError(f"it ends inside a structure ({exc})") from exc
    return {name: Resources(v["registers"], v.get("frame_bytes", 0), v.get("stack_bytes", 0))
            for name, v in found.items() if "registers" in v}


def kernel_resources(data: bytes, kernel: str) -> Resources:
    """The Resources of the entry function `kernel`; CubinError names what the cubin holds when it is absent."""
    functions = read_resources(data)
    if kernel not in functions:
        raise CubinError(f"no register count for {kernel} in the cubin (functions with one: "
                         f"{', '.join(sorted(functions)) or 'none'})")
    return functions[kernel]
