"""Decompress the END of a deflate stream without the bytes before it.

A shared library keeps its dynamic section (the list of libraries it needs) near the end of
the file: 86-99 % of the way in for vLLM 0.26's big CUDA extensions (``_vllm_fa2_C.abi3.so`` is
305 MB, 130 MB compressed). Inflating from the start would download the whole wheel. Deflate
cannot be entered at an arbitrary byte, but it can at any *block* boundary if the 32 KiB window
of earlier output is stood in for: this module searches the last stretch of the compressed
bytes, bit by bit, for a dynamic-Huffman block header that inflates cleanly to the exact end of
the stream. The output's length, against the member's known size, places it in the file.
Back-references into the unknown window (and copies of copies of them, however far on) are
found by inflating twice, with a window of 0x00 and one of 0xFF: bytes that differ came from
the unknown; a range that is the same in both is exact.

Example::

    >>> import zlib
    >>> data = " ".join(str(i * i) for i in range(400_000)).encode() + b" the end"
    >>> packed = zlib.compressobj(9, zlib.DEFLATED, -15)
    >>> stream = packed.compress(data) + packed.flush()
    >>> inflate_tail(lambda at, n: stream[at:at + n], len(stream), len(data), (len(data) - 7, len(data)))
    b'the end'
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator

import numpy as np

WINDOW = 32 * 1024  # deflate's back-references reach at most this far
# Two stand-ins for the window that precedes the first block read: a byte that comes out the
# same under both was not copied from the unknown window, so it is exact.
_ZEROS, _ONES = bytes(WINDOW), b"\xff" * WINDOW
_PROBE = 4096  # compressed bytes inflated to weed out a false start before a full try


def _bits(raw: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The ``width``-bit field (at most 9 bits) starting at each bit position in ``at``."""
    byte, shift = at >> 3, at & 7
    pair = raw[byte] | (raw[byte + 1] << np.uint64(8))
    return (pair >> shift.astype(np.uint64)) & np.uint64((1 << width) - 1)


def _candidates(buf: bytes, chunk: int = 64 * 1024) -> Iterator[int]:
    """Bit positions in ``buf``, in order, where a non-final dynamic-Huffman block could begin.

    Checked with numpy, one chunk at a time (the first true block is usually within ~100 KB,
    so most of a large buffer is never scanned): BFINAL=0, BTYPE=2, HLIT<=29, HDIST<=29, and
    the code-length code must be a complete prefix code, as zlib demands (RFC 1951, 3.2.7).
    """
    for base in range(0, max(len(buf) - 16, 0), chunk):
        piece = buf[base:base + chunk + 16]
        raw = np.frombuffer(piece + bytes(16), dtype=np.uint8).astype(np.uint64)
        at = np.arange(min(chunk, len(piece) - 16) * 8, dtype=np.int64)
        keep = (_bits(raw, at, 3) == 4) & (_bits(raw, at + 3, 5) <= 29) & (_bits(raw, at + 8, 5) <= 29)
        at = at[keep]
        count = _bits(raw, at + 13, 4) + np.uint64(4)
        kraft = np.zeros(len(at), dtype=np.uint64)
        for i in range(19):
            length = _bits(raw, at + 17 + 3 * i, 3)
            used = (length > 0) & (np.uint64(i) < count)
            kraft += np.where(used, np.uint64(1) << (np.uint64(7) - np.minimum(length, np.uint64(7))), np.uint64(0))
        yield from (at[kraft == 128] + base * 8).tolist()


def _aligned(buf: bytes, bit: int, length: int) -> bytes:
    """``length`` bytes of ``buf`` read from bit ``bit`` on, as if the stream started there."""
    k, shift = divmod(bit, 8)
    chunk = buf[k:k + length + 1]
    return (int.from_bytes(chunk, "little") >> shift).to_bytes(len(chunk), "little")[:length]


def _inflate_from(buf: bytes, bit: int, window: bytes) -> bytes | None:
    """Everything from the block at ``bit`` to the stream's end, or None if that is no block start."""
    probe = zlib.decompressobj(-15, zdict=window)
    try:
        probe.decompress(_aligned(buf, bit, min(_PROBE, len(buf) - bit // 8)))
        whole = zlib.decompressobj(-15, zdict=window)
        out = whole.decompress(_aligned(buf, bit, len(buf) - bit // 8)) + whole.flush()
    except zlib.error:
        return None
    # A true block start inflates to the stream's final block and stops at its last byte.
    return out if whole.eof and not whole.unused_data else None


def inflate_tail(read: Callable[[int, int], bytes], compressed_size: int, size: int, want: tuple[int, int],
                 valid: Callable[[bytes], bool] = lambda data: True) -> bytes:
    """The exact decompressed bytes ``want[0]:want[1]`` of a raw deflate stream, read from its end.

    ``read(at, n)`` gives compressed bytes; ``size`` is the decompressed length. ``valid(bytes)``
    may reject what a false block start produced (callers check the structure they expect).
    Falls back to inflating from the start when no block start close enough to the end works.
    """
    start, end = want
    ratio = compressed_size / max(size, 1)
    window = min(compressed_size, int((size - start + WINDOW) * ratio * 1.5) + 256 * 1024)
    while window < compressed_size:
        buf = read(compressed_size - window, window)
        for bit in _candidates(buf):
            zeros = _inflate_from(buf, bit, _ZEROS)
            if zeros is None:
                continue
            offset = size - len(zeros)
            if offset > start:
                break  # the first true block start is too late: look further back
            ones = _inflate_from(buf, bit, _ONES)
            here, there = zeros[start - offset:end - offset], ones[start - offset:end - offset]
            # Equal under both stand-in windows means no byte of it came from the unknown window.
            if here == there and valid(here):
                return here
            if here != there:
                break  # references reach back past this block: start further back
        window = min(compressed_size, window * 4)
    # No usable block start near the end: inflate from the start, only as far as needed.
    inflater, out, taken = zlib.decompressobj(-15), bytearray(), 0
    while len(out) < end and taken < compressed_size:
        chunk = read(taken, min(4 << 20, compressed_size - taken))
        taken += len(chunk)
        out += inflater.decompress(chunk)
    return bytes(out[start:end])
