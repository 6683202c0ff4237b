"""DT_NEEDED of every shared library inside a wheel on PyPI, reading only a few MB of it.

For each ``.so`` member: its first bytes (ELF and program headers) are inflated from the start
of the member; its dynamic section and dynamic string table are too when they lie in the first
half (the string table usually does), and are read from the end of the compressed member
(``inflate_tail``) when they lie deep in a large one (the dynamic section of every big CUDA
library; the string table too once patchelf has moved it). vLLM 0.26.0's wheel (304 MB, 16
shared libraries holding 271 MB compressed) costs about 15 MB of requests this way.

Example::

    >>> needs = shared_library_needs("https://files.pythonhosted.org/.../vllm-0.26.0-cp38-abi3-manylinux_2_28_x86_64.whl")  # doctest: +SKIP
    >>> needs["vllm/cumem_allocator.abi3.so"].needed                                        # doctest: +SKIP
    ('libcuda.so.1', 'libc.so.6')
"""

from __future__ import annotations

import re
import struct
import zipfile
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from colab_plan.elf import DynamicInfo, dynamic_info
from colab_plan.inflate_tail import inflate_tail
from colab_plan.remote import once, open_remote_zip

SHARED_LIBRARY = re.compile(r"\.so(\.[0-9]+)*$")
# Inflating from the start is simplest and exact; past this many compressed bytes the
# dynamic section is read from the end of the member instead.
STREAM_LIMIT = 4 * 1024 * 1024


class _Member:
    """Reads decompressed byte ranges of one zip member, from its start or its end."""

    def __init__(self, read_at: Callable[[int, int], bytes], info: zipfile.ZipInfo, stream_limit: int):
        self.read_at, self.info, self.stream_limit = read_at, info, stream_limit
        local = read_at(info.header_offset, 30)
        name_len, extra_len = struct.unpack_from("<HH", local, 26)
        self.data_start = info.header_offset + 30 + name_len + extra_len
        self._head, self._taken = bytearray(), 0
        self._inflater = zlib.decompressobj(-15)

    def _compressed(self, at: int, n: int) -> bytes:
        return self.read_at(self.data_start + at, min(n, self.info.compress_size - at))

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``start:end`` of the member, inflated from its start (kept for the next read)."""
        if self.info.compress_type == zipfile.ZIP_STORED:
            return self._compressed(start, end - start)
        while len(self._head) < end and self._taken < self.info.compress_size:
            chunk = self._compressed(self._taken, 256 * 1024)
            self._taken += len(chunk)
            self._head += self._inflater.decompress(chunk)
        return bytes(self._head[start:end])

    def read_far(self, start: int, end: int, valid: Callable[[bytes], bool]) -> bytes:
        """A range that may lie deep in the file: from the end of the member when it is large."""
        deep = start > self.info.file_size // 2
        if self.info.compress_type != zipfile.ZIP_DEFLATED or self.info.compress_size <= self.stream_limit or not deep:
            return self.read(start, end)
        return inflate_tail(self._compressed, self.info.compress_size, self.info.file_size, (start, end), valid)


def member_needs(archive: zipfile.ZipFile, read_at: Callable[[int, int], bytes], name: str,
                 stream_limit: int = STREAM_LIMIT) -> DynamicInfo:
    """What the shared library ``name`` in ``archive`` needs; ``read_at(at, n)`` reads the zip's raw bytes.

    A member larger than ``stream_limit`` compressed has a dynamic section in its second half read
    from the end.
    """
    member = _Member(read_at, archive.getinfo(name), stream_limit)
    return dynamic_info(member.read, member.read_far)


@once
def shared_library_needs(url: str) -> dict[str, DynamicInfo]:
    """For every shared library in the wheel at ``url``: what its dynamic section says it needs."""
    archive, remote = open_remote_zip(url)
    names = [n for n in archive.namelist() if SHARED_LIBRARY.search(n)]
    # Largest first, so the slowest reads start at once; they share the wheel's byte cache.
    names.sort(key=lambda n: -archive.getinfo(n).compress_size)
    with ThreadPoolExecutor(8) as pool:
        found = dict(zip(names, pool.map(lambda n: member_needs(archive, remote.read_at, n), names)))
    return dict(sorted(found.items()))
