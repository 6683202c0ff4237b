"""The libraries a shared object needs: DT_NEEDED from an ELF64 file, read piece by piece.

Only what the dynamic loader reads is parsed: the ELF header, the program headers, the
dynamic section (found through PT_DYNAMIC, not the section headers) and the strings of the
dynamic string table. ``read(start, end)`` supplies the file's bytes, so a caller can fetch
only those pieces (see ``links.py``: from a wheel on PyPI, over HTTP Range requests).

Example::

    >>> import sys
    >>> data = open(sys.executable, "rb").read()
    >>> "libc.so.6" in dynamic_info(lambda start, end: data[start:end]).needed
    True
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ, DT_SONAME, DT_RPATH, DT_RUNPATH = 0, 1, 5, 10, 14, 15, 29
_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")  # Elf64_Ehdr
_PHDR = struct.Struct("<IIQQQQQQ")  # Elf64_Phdr
_DYN = struct.Struct("<qQ")  # Elf64_Dyn


class NotElf64(ValueError):
    """The bytes are not a little-endian ELF64 shared object (or it has no dynamic section)."""


@dataclass(frozen=True)
class Segment:
    """One program header: what part of the file is mapped where."""

    kind: int
    offset: int
    vaddr: int
    filesz: int


@dataclass(frozen=True)
class DynamicInfo:
    """What the loader learns from one shared object's dynamic section."""

    needed: tuple[str, ...]  # DT_NEEDED, in the file's order
    soname: str | None
    runpath: tuple[str, ...]  # DT_RUNPATH (or the older DT_RPATH), split at ':'


def program_headers(head: bytes) -> list[Segment]:
    """The program headers, from the file's first bytes (they follow the 64-byte ELF header)."""
    if len(head) < _HEADER.size or head[:4] != b"\x7fELF":
        raise NotElf64("no ELF magic")
    ident, _, _, _, _, phoff, _, _, _, phentsize, phnum, *_ = _HEADER.unpack_from(head)
    if ident[4] != 2 or ident[5] != 1:
        raise NotElf64("not a little-endian 64-bit ELF file")
    if len(head) < phoff + phentsize * phnum:
        raise NotElf64("program headers lie beyond the bytes given")
    segments = []
    for i in range(phnum):
        kind, _, offset, vaddr, _, filesz, _, _ = _PHDR.unpack_from(head, phoff + i * phentsize)
        segments.append(Segment(kind, offset, vaddr, filesz))
    return segments


def header_span(head: bytes) -> int:
    """How many leading bytes hold the ELF header and all program headers."""
    _, _, _, _, _, phoff, _, _, _, phentsize, phnum, *_ = _HEADER.unpack_from(head)
    return phoff + phentsize * phnum


def dynamic_entries(data: bytes) -> list[tuple[int, int]]:
    """(tag, value) pairs of a dynamic section, up to DT_NULL; NotElf64 if it has none."""
    entries = []
    for at in range(0, len(data) - _DYN.size + 1, _DYN.size):
        tag, value = _DYN.unpack_from(data, at)
        if tag == DT_NULL:
            return entries
        entries.append((tag, value))
    raise NotElf64("dynamic section without DT_NULL")


def looks_dynamic(data: bytes) -> bool:
    """Whether ``data`` parses as a dynamic section that names a string table (a sanity check)."""
    try:
        tags = {tag for tag, _ in dynamic_entries(data)}
    except NotElf64:
        return False
    return DT_STRTAB in tags and DT_STRSZ in tags


def file_offset(segments: list[Segment], vaddr: int) -> int:
    """Where in the file the byte mapped at ``vaddr`` lies."""
    for seg in segments:
        if seg.kind == PT_LOAD and seg.vaddr <= vaddr < seg.vaddr + seg.filesz:
            return seg.offset + vaddr - seg.vaddr
    raise NotElf64(f"address {vaddr:#x} is in no loaded segment")


def dynamic_info(read: Callable[[int, int], bytes],
                 read_far: Callable[[int, int, Callable[[bytes], bool]], bytes] | None = None,
                 head_size: int = 4096) -> DynamicInfo:
    """DT_NEEDED, DT_SONAME and DT_RUNPATH of the file that ``read(start, end)`` reads.

    ``read_far(start, end, valid)`` (defaults to ``read``) fetches the dynamic section and the
    string table, which may lie near the end of a large file (patchelf moves the string table
    there): a caller can read those differently, and ``valid(bytes)`` tells it what to expect.
    """
    far = read_far or (lambda start, end, valid: read(start, end))
    head = read(0, head_size)
    if len(head) >= _HEADER.size and head[:4] == b"\x7fELF" and header_span(head) > len(head):
        head = read(0, header_span(head))
    segments = program_headers(head)
    dynamic = next((s for s in segments if s.kind == PT_DYNAMIC), None)
    if dynamic is None:
        raise NotElf64("no PT_DYNAMIC: a static file")
    entries = dynamic_entries(far(dynamic.offset, dynamic.offset + dynamic.filesz, looks_dynamic))
    values = dict(entries)
    strtab = file_offset(segments, values[DT_STRTAB])
    # A string table starts with an empty string.
    strings = far(strtab, strtab + values[DT_STRSZ], lambda data: data[:1] == b"\0")

    def string(offset: int) -> str:
        return strings[offset:strings.index(b"\0", offset)].decode()

    paths = [string(v) for t, v in entries if t in (DT_RUNPATH, DT_RPATH)]
    return DynamicInfo(
        needed=tuple(string(v) for t, v in entries if t == DT_NEEDED),
        soname=string(values[DT_SONAME]) if DT_SONAME in values else None,
        runpath=tuple(p for path in paths for p in path.split(":") if p),
    )
