"""Colab's GPU image as published (googlecolab/backend-info): its Python packages, Debian packages, Python.

``load_image(folder)`` reads ``pip-freeze-gpu.txt``, ``apt-list-gpu.txt`` and ``os-info-gpu.txt``.
``OS_LIBRARIES`` says which Debian package of Ubuntu 22.04 ships each system library that
compiled wheels link to, and ``DRIVER_LIBRARIES`` what the NVIDIA driver brings.

Example::

    >>> image = load_image(DEFAULT_FOLDER)      # doctest: +SKIP
    >>> image.packages["torch"], image.python, image.glibc
    ('2.11.0+cu128', (3, 13, 15), (2, 35))
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# A copy of the published files (googlecolab/backend-info a724079) in the course; COLAB_IMAGE_DIR points elsewhere.
DEFAULT_FOLDER = Path(os.environ.get("COLAB_IMAGE_DIR") or Path(__file__).resolve().parents[2] / "tests" / "data" / "colab-image")
# What Colab warns must not be upgraded (its runtime can crash), by canonical name.
KERNEL_PACKAGES = ("ipykernel", "ipython", "jupyter-client", "tornado", "pyzmq", "notebook")
# Kept at Colab's version too: the course's helpers are made to work with these.
ALSO_KEPT = ("ipywidgets", "psutil")

# soname -> the Ubuntu 22.04 package that ships it (one of Colab's apt packages).
OS_LIBRARIES = {
    **{soname: "libc6" for soname in ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                                      "ld-linux-x86-64.so.2", "libutil.so.1", "libresolv.so.2", "libanl.so.1")},
    "libstdc++.so.6": "libstdc++6",
    "libgcc_s.so.1": "libgcc-s1",
    "libgomp.so.1": "libgomp1",
    "libnuma.so.1": "libnuma1",
    "libz.so.1": "zlib1g",
}
# Not in the image: Colab mounts the host's NVIDIA driver (580.x on the T4 since February 2026,
# CUDA 13.0, per the README of the published image).
DRIVER_LIBRARIES = ("libcuda.so.1", "libnvidia-ml.so.1")


def norm(name: str) -> str:
    """A package name as pip compares them (PEP 503): lower case, runs of -_. as one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class ColabImage:
    """The parts of the image a plan is checked against."""

    packages: dict[str, str]  # canonical name -> version, from pip freeze (URL installs left out)
    apt: dict[str, str]  # Debian package -> version
    python: tuple[int, ...]  # e.g. (3, 13, 15)
    glibc: tuple[int, int]  # from the libc6 package, e.g. (2, 35)
    source: str  # where the files say they come from

    def marker_environment(self) -> dict[str, str]:
        """PEP 508 marker values of Colab's Python (so requirements are read as Colab's pip reads them)."""
        return {
            "implementation_name": "cpython", "implementation_version": ".".join(map(str, self.python)),
            "os_name": "posix", "platform_machine": "x86_64", "platform_system": "Linux", "sys_platform": "linux",
            "platform_python_implementation": "CPython", "python_full_version": ".".join(map(str, self.python)),
            "python_version": f"{self.python[0]}.{self.python[1]}", "platform_release": "", "platform_version": "",
        }


def read_freeze(path: Path) -> dict[str, str]:
    """canonical name -> version for each ``name==version`` line, and each ``name @ URL`` line whose
    file name shows the version (``cucim_cu12-26.2.1-...whl``, ``google_colab-1.0.0.tar.gz``)."""
    pins = {}
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            continue
        if "==" in line:
            name, version = line.strip().split("==", 1)
            pins[norm(name)] = version
        elif " @ " in line:
            name, url = line.strip().split(" @ ", 1)
            stem = re.escape(re.sub(r"[-_.]+", "_", name))
            match = re.search(rf"/{stem}-([0-9][^-/]*?)(?:-|\.tar\.gz|\.zip)", url, re.IGNORECASE)
            if match:  # a git checkout (jupyter_kernel_gateway) names no version: left out
                pins[norm(name)] = match.group(1)
    return pins


def read_apt(path: Path) -> dict[str, str]:
    """Debian package -> version from ``apt list --installed`` (``name/suite,now VERSION arch [...]``)."""
    found = {}
    for line in path.read_text().splitlines():
        if match := re.match(r"([^/\s]+)/\S+ (\S+) \S+ \[installed", line):
            found[match.group(1)] = match.group(2)
    return found


def load_image(folder: Path = DEFAULT_FOLDER) -> ColabImage:
    """The image described by the three files in ``folder``."""
    packages = read_freeze(folder / "pip-freeze-gpu.txt")
    apt = read_apt(folder / "apt-list-gpu.txt")
    info = (folder / "os-info-gpu.txt").read_text()
    python = tuple(int(n) for n in re.search(r"^Python (\d+)\.(\d+)\.(\d+)", info, re.MULTILINE).groups())
    glibc = tuple(int(n) for n in re.match(r"(\d+)\.(\d+)", apt["libc6"]).groups())
    system = re.search(r"^(Ubuntu .*)$", info, re.MULTILINE).group(1)
    return ColabImage(packages, apt, python, glibc, f"{system}, Python {'.'.join(map(str, python))}")
