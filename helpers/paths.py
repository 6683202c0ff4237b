"""Where the course writes what it generates: ``build/`` in the course folder (git-ignored).

``$VLLM_COURSE_BUILD`` moves it, e.g. when the course folder is read-only.
"""

from __future__ import annotations

import os
from pathlib import Path

COURSE_ROOT = Path(__file__).resolve().parent.parent


def build_dir(*parts: str) -> Path:
    """A folder under the build folder, created on first use: ``build_dir("lab")``."""
    base = Path(os.environ.get("VLLM_COURSE_BUILD") or COURSE_ROOT / "build")
    folder = base.joinpath(*parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
