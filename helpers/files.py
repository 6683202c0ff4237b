"""Results files written whole or not at all, and read back with an error that names the file.

:func:`write_atomically` is how the course writes every results file (load-test runs, the
batching prediction, the scripts' JSON and executed notebooks): the text goes to a hidden
temporary file in the same folder (``.<name>.<random>.tmp``), is flushed and fsynced, and
only then renamed over the target. A rename within one file system is atomic, so a reader
sees either the previous file or the new one, never half of one; a process killed midway
leaves at most the hidden temporary file, which no loader looks at (its name does not end
in ``.json``). :func:`helpers.paths.written_whole` does the same for folders.

:func:`read_json` is the other half: a file that is empty or cut short raises
:class:`helpers.errors.ResultsFileError` (a ``ValueError``) naming the file and what to do.

Example::

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> path = write_atomically(folder / "run.json", '{"ok": true}')
    >>> read_json(path, remedy="run the load test again")
    {'ok': True}
    >>> sorted(p.name for p in folder.iterdir())
    ['run.json']
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from helpers.errors import ResultsFileError


def write_atomically(path: Path | str, data: str | bytes, *, encoding: str = "utf-8") -> Path:
    """Write ``data`` to ``path`` whole or not at all; return the path.

    Writes a temporary file beside ``path``, fsyncs it, renames it over ``path`` (atomic on
    POSIX and Windows within one file system) and fsyncs the folder, so the rename itself
    survives a power cut. If anything fails (a full disk, an exception), the temporary file
    is removed and ``path`` keeps its previous content; if the process is killed, ``path``
    is untouched and a hidden ``.<name>.*.tmp`` may remain. The new file gets the usual
    permissions (0o666 less the umask), not the 0o600 of a temporary file.
    """
    path = Path(path)
    payload = data.encode(encoding) if isinstance(data, str) else bytes(data)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    _fsync_folder(path.parent)
    return path


def _umask() -> int:
    """The process's umask: read from /proc on Linux (no change to it, so safe beside other
    threads), else set and put straight back (the only portable way to read it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable; best effort (not every platform can open a folder)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_json(path: Path | str, *, remedy: str) -> Any:
    """The JSON in ``path``; a clear :class:`~helpers.errors.ResultsFileError` when it is empty,
    cut short or not JSON, naming the file, its size and ``remedy`` (what the reader should do,
    e.g. "run the cell that saves it again"). A missing file raises ``FileNotFoundError`` as usual.

    >>> import tempfile, pathlib
    >>> empty = pathlib.Path(tempfile.mkdtemp()) / "run-b.json"
    >>> _ = empty.write_text("")
    >>> read_json(empty, remedy="delete it")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    helpers.errors.ResultsFileError: .../run-b.json is empty (0 bytes): it was probably being written when its process stopped. delete it.
    """
    path = Path(path)
    raw = path.read_bytes()
    if not raw.strip():
        raise ResultsFileError(f"{path} is empty ({len(raw)} bytes): it was probably being written when its "
                               f"process stopped. {_sentence(remedy)}")
    try:
        return json.loads(raw)
    except ValueError as error:  # JSONDecodeError, or bytes that are not UTF-8
        raise ResultsFileError(f"{path} is not readable JSON ({len(raw):,} bytes; {type(error).__name__}: {error}): "
                               f"it was probably cut short while being written. {_sentence(remedy)}") from error


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith(".") else text + "."
