"""Where the course is and where it writes what it generates: ``build/`` in the course folder (git-ignored).

``$VLLM_COURSE_BUILD`` moves it, e.g. when the course folder is read-only. :func:`course_pythonpath` puts the course
(:func:`pythonpath_with`, any folder) on a child process's ``PYTHONPATH``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parent.parent


def pythonpath_with(folder: str | Path, env: Mapping[str, str]) -> str:
    """``PYTHONPATH`` for a child process: ``folder`` first, then what ``env`` had there.

    Added to, not replaced: on a machine whose packages come through ``PYTHONPATH`` (the staged GPU device of
    ``scripts/device_job.sh``), a child given the folder alone loses them.

    >>> pythonpath_with("/first", {"PYTHONPATH": "/site"}) == os.pathsep.join(["/first", "/site"])
    True
    >>> pythonpath_with("/first", {"PYTHONPATH": ""})
    '/first'
    """
    return os.pathsep.join(p for p in (str(folder), env.get("PYTHONPATH")) if p)


def course_pythonpath(env: Mapping[str, str]) -> str:
    """``PYTHONPATH`` for a child process that imports the course: the course first, then what ``env`` had there.

    >>> course_pythonpath({"PYTHONPATH": "/site"}) == os.pathsep.join([str(COURSE_ROOT), "/site"])
    True
    >>> course_pythonpath({}) == str(COURSE_ROOT)
    True
    """
    return pythonpath_with(COURSE_ROOT, env)


def build_dir(*parts: str) -> Path:
    """A folder under the build folder, created on first use: ``build_dir("lab")``."""
    base = Path(os.environ.get("VLLM_COURSE_BUILD") or COURSE_ROOT / "build")
    folder = base.joinpath(*parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def written_whole(target: Path) -> Iterator[Path]:
    """Yield an empty sibling folder to fill; when the block ends without error it replaces ``target``.

    An interrupted or failed write never leaves a half-written ``target`` that a later run
    would mistake for a finished one; the partial folder is removed.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-writing-", dir=target.parent))
    try:
        yield staging
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
