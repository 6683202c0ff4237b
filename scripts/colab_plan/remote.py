"""Read wheels on PyPI without downloading them: a seekable file over HTTP Range requests.

``RemoteFile(url)`` behaves like an open binary file, so ``zipfile.ZipFile`` reads a wheel's
central directory (its file list) with two or three small requests, and a member's first bytes
without the rest. ``find_wheel`` asks PyPI's simple index (PEP 691 JSON) for the file of one
exact release that Colab's Python would install.

Example::

    >>> wheel = find_wheel("nvidia-cuda-runtime", "13.0.96", colab_tags())   # doctest: +SKIP
    >>> sorted(n for n in wheel_listing(wheel.url) if "libcudart" in n)       # doctest: +SKIP
    ['nvidia/cu13/lib/libcudart.so.13']
"""

from __future__ import annotations

import gzip
import io
import json
import threading
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from functools import wraps
from typing import TypeVar

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

SIMPLE_INDEX = "https://pypi.org/simple"
# One request fetches at least this much: zipfile and the ELF reader ask for a few bytes at a
# time, and each round trip costs far more than the bytes.
MIN_REQUEST = 256 * 1024
TIMEOUT_S = 120
# A network that drops a DNS lookup or a connection for a moment (seen in a CI run, 2026-12-02) should cost a retry,
# not the test: a few attempts, a few seconds apart. An answer from PyPI (404, 403) is final.
ATTEMPTS = 4
RETRY_S = 3.0
T = TypeVar("T")


def once(function: Callable[..., T]) -> Callable[..., T]:
    """Like ``functools.cache``, but threads asking for the same key wait for one computation."""
    results: dict = {}
    locks: dict = {}
    guard = threading.Lock()

    @wraps(function)
    def wrapper(*args):
        with guard:
            lock = locks.setdefault(args, threading.Lock())
        with lock:
            if args not in results:
                results[args] = function(*args)
            return results[args]

    return wrapper


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[bytes, Message]:
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip", **(headers or {})})
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                body = response.read()
                # The simple index is JSON that shrinks ten-fold with gzip; Range answers come as they are.
                if response.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                return body, response.headers  # an email.message.Message: its lookups ignore case
        except urllib.error.HTTPError as error:
            if error.code < 500 or attempt == ATTEMPTS:
                raise
        except (urllib.error.URLError, TimeoutError, ConnectionError):
            if attempt == ATTEMPTS:
                raise
        time.sleep(RETRY_S * attempt)
    raise AssertionError("unreachable: the last attempt returns or raises")


class RemoteFile(io.RawIOBase):
    """A read-only, seekable file whose bytes come from HTTP Range requests, kept once fetched.

    ``requests`` and ``fetched`` count what it cost, so a caller can show it read little.
    """

    def __init__(self, url: str):
        super().__init__()
        self.url, self.pos, self.requests, self.fetched = url, 0, 0, 0
        self._spans: list[tuple[int, bytes]] = []  # (start, bytes), sorted by start
        self._lock = threading.Lock()  # guards the cache and the counters, not the requests
        # The last 64 KiB (a ZIP's end record and usually its whole central directory) and the
        # file's size, in one request.
        body, headers = self._range(f"bytes=-{64 * 1024}")
        self.size = int(headers["Content-Range"].rsplit("/", 1)[1])
        self._spans.append((self.size - len(body), body))

    def _range(self, spec: str) -> tuple[bytes, Message]:
        body, headers = _get(self.url, {"Range": spec, "Accept-Encoding": "identity"})
        if "Content-Range" not in headers:  # a server that ignores Range would send the whole file
            raise OSError(f"{self.url} does not answer Range requests")
        with self._lock:
            self.requests += 1
            self.fetched += len(body)
        return body, headers

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = base + offset
        return self.pos

    def _cached(self, here: int) -> tuple[int, bytes] | None:
        with self._lock:
            return next(((s, b) for s, b in self._spans if s <= here < s + len(b)), None)

    def read_at(self, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` (fewer at the end of the file), fetching what is missing.

        Safe from several threads: the lock guards only the cache, so their requests overlap.
        """
        end = min(self.size, start + length)
        out = bytearray()
        while start + len(out) < end:
            here = start + len(out)
            span = self._cached(here)
            if span is None:
                with self._lock:
                    following = [s for s, _ in self._spans if s > here]
                stop = min([end + MIN_REQUEST, self.size] + following)
                body, _ = self._range(f"bytes={here}-{stop - 1}")
                with self._lock:
                    self._spans.append((here, body))
                    self._spans.sort(key=lambda item: item[0])
                continue
            s, b = span
            out += b[here - s:end - s]
        return bytes(out)

    def readinto(self, buffer) -> int:
        data = self.read_at(self.pos, len(buffer))
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)


@once
def open_remote_zip(url: str) -> tuple[zipfile.ZipFile, RemoteFile]:
    """A ZipFile over the wheel at ``url`` (only its central directory is read now), and its file.

    Kept per URL, so the listing, the metadata and the libraries of one wheel share what was fetched.
    """
    remote = RemoteFile(url)
    return zipfile.ZipFile(remote), remote


@once
def wheel_listing(url: str) -> tuple[str, ...]:
    """Every file name inside the wheel at ``url``, read from its central directory only."""
    archive, _ = open_remote_zip(url)
    return tuple(archive.namelist())


def colab_tags(python: tuple[int, int] = (3, 13), glibc_minor: int = 35) -> list[Tag]:
    """The wheel tags Colab's CPython accepts, best first (manylinux up to its glibc)."""
    platforms = [f"manylinux_2_{minor}_x86_64" for minor in range(glibc_minor, 4, -1)]
    platforms += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    abi = f"cp{python[0]}{python[1]}"
    return list(cpython_tags(python, [abi, "abi3", "none"], platforms)) + list(
        compatible_tags(python, abi, platforms))


@dataclass(frozen=True)
class WheelFile:
    """One file of a release on the index: its name, its URL and its core metadata's URL (or None)."""

    filename: str
    url: str
    metadata_url: str | None

    @property
    def is_binary(self) -> bool:
        """False for a ``none-any`` wheel, which by the wheel spec holds no compiled code."""
        return not self.filename.endswith("-any.whl")


@once
def _project_files(name: str) -> tuple[dict, ...]:
    body, _ = _get(f"{SIMPLE_INDEX}/{canonicalize_name(name)}/",
                   {"Accept": "application/vnd.pypi.simple.v1+json"})
    return tuple(json.loads(body)["files"])


def find_wheel(name: str, version: str, tags: list[Tag]) -> WheelFile | None:
    """The wheel of ``name==version`` that the best of ``tags`` picks, or None if the index has none."""
    rank = {tag: i for i, tag in enumerate(tags)}
    best: tuple[int, dict] | None = None
    for entry in _project_files(name):
        # Cheap string tests first: a project such as grpcio has thousands of files. A yanked
        # file still counts: the image has that release installed whatever its state on the index.
        if f"-{version}-" not in entry["filename"] or not entry["filename"].endswith(".whl"):
            continue
        try:
            _, wheel_version, _, wheel_tags = parse_wheel_filename(entry["filename"])
        except InvalidWheelFilename:  # old uploads with names pip itself would skip
            continue
        if str(wheel_version) != version:
            continue
        score = min((rank[t] for t in wheel_tags if t in rank), default=None)
        if score is not None and (best is None or score < best[0]):
            best = (score, entry)
    if best is None:
        return None
    entry = best[1]
    has_metadata = entry.get("core-metadata") or entry.get("dist-info-metadata")
    return WheelFile(entry["filename"], entry["url"], entry["url"] + ".metadata" if has_metadata else None)


@once
def core_metadata(wheel: WheelFile) -> str:
    """The wheel's METADATA text: PEP 658's separate file when the index has one, else from the wheel."""
    if wheel.metadata_url:
        return _get(wheel.metadata_url)[0].decode()
    archive, _ = open_remote_zip(wheel.url)
    name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
    return archive.read(name).decode()
