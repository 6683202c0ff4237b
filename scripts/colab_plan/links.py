"""Is every library vLLM's compiled extensions link to loadable after the install, and from where?

vLLM 0.26's extensions carry no RUNPATH (one that did would be searched too): the dynamic loader
finds a library they need only among the system's libraries (Ubuntu 22.04's packages in Colab's
apt list, the NVIDIA driver) or among those already loaded, which for torch's and CUDA's is what
``import torch`` loaded: torch's own ``torch/lib`` and the directories on torch's RUNPATH
(``$ORIGIN/../../nvidia/cu13/lib``, ...).
So a soname counts as provided when a wheel of the environment after the install (the plan's
packages and the image packages they lean on, each listed from its central directory only)
has a file of that name in one of those directories, or the system or driver has it. A file
elsewhere is listed too, as "not on torch's path": it exists but nothing loads it first.

Example::

    >>> index = provider_index(packages, image)                 # doctest: +SKIP
    >>> index["libcudart.so.13"]                                 # doctest: +SKIP
    [Provider(by='nvidia-cuda-runtime 13.0.96 (plan)', folder='nvidia/cu13/lib')]
"""

from __future__ import annotations

import posixpath
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from colab_plan.closure import Package
from colab_plan.elf import DynamicInfo
from colab_plan.image import DRIVER_LIBRARIES, OS_LIBRARIES, ColabImage
from colab_plan.remote import open_remote_zip, wheel_listing
from colab_plan.wheel_elf import SHARED_LIBRARY, member_needs

_ORIGIN = {"install": "plan", "image": "kept from the image"}
SYSTEM = None  # a Provider's folder for the system's and the driver's libraries: always searched


@dataclass(frozen=True)
class Provider:
    """Who ships a library: a package (and the folder of site-packages it lands in), Ubuntu or the driver."""

    by: str
    folder: str | None  # e.g. "nvidia/cu13/lib"; SYSTEM for Ubuntu's and the driver's


def provider_index(packages: list[Package], image: ColabImage, workers: int = 16) -> dict[str, list[Provider]]:
    """soname -> who provides it: binary wheels of ``packages``, Ubuntu's packages, the driver."""
    index: dict[str, list[Provider]] = {}
    binary = [p for p in packages if p.wheel is not None and p.wheel.is_binary]
    with ThreadPoolExecutor(workers) as pool:
        listings = list(pool.map(lambda p: wheel_listing(p.wheel.url), binary))
    for package, names in zip(binary, listings):
        for path in sorted(n for n in names if SHARED_LIBRARY.search(n)):
            folder, soname = posixpath.split(path)
            index.setdefault(soname, []).append(
                Provider(f"{package.name} {package.version} ({_ORIGIN[package.origin]})", folder))
    for soname, deb in OS_LIBRARIES.items():
        if deb in image.apt:
            index.setdefault(soname, []).append(Provider(f"{deb} {image.apt[deb]} (Ubuntu, in the image)", SYSTEM))
    for soname in DRIVER_LIBRARIES:
        index.setdefault(soname, []).append(Provider("NVIDIA driver (the host's, mounted by Colab)", SYSTEM))
    return index


def torch_library_path(torch: Package | None) -> list[str]:
    """Folders (relative to site-packages) ``import torch`` loads libraries from; [] if unreadable.

    ``torch/lib`` and its libraries' RUNPATH, read from ``torch/lib/libtorch.so`` (0.1 MB
    compressed; every library of torch/lib carries the same RUNPATH).
    """
    if torch is None or torch.wheel is None:
        return []
    archive, remote = open_remote_zip(torch.wheel.url)
    info = member_needs(archive, remote.read_at, "torch/lib/libtorch.so")
    folders = ["torch/lib"] + [posixpath.normpath(p.replace("$ORIGIN", "torch/lib")) for p in info.runpath]
    return list(dict.fromkeys(folders))


def for_this_python(member: str, python: tuple[int, ...]) -> bool:
    """False for an extension module built for another CPython (``_C.cpython-310-...so``): never loaded."""
    match = re.search(r"\.cpython-(\d)(\d+)-", member)
    return match is None or (int(match.group(1)), int(match.group(2))) == tuple(python[:2])


@dataclass(frozen=True)
class LinkReport:
    """Each soname vLLM's extensions need, who needs it, and who provides it where."""

    needed_by: dict[str, list[str]]  # soname -> the extensions (wheel paths) that list it
    providers: dict[str, list[Provider]]  # soname -> every file of that name (may be off the path)
    search_path: list[str]  # site-packages folders searched: torch/lib and torch's RUNPATH
    own_path: dict[str, list[str]]  # extension -> folders on its own RUNPATH ($ORIGIN resolved)
    skipped: list[str]  # extensions for another Python, not loaded on Colab
    unreadable: list[str]  # kept packages not on PyPI, e.g. "torch 2.11.0+cu128": their files unknown

    def _found_by(self, soname: str, member: str) -> list[Provider]:
        folders = self.search_path + self.own_path.get(member, [])
        return [p for p in self.providers[soname] if p.folder is SYSTEM or p.folder in folders]

    def loadable(self, soname: str) -> list[Provider]:
        """The providers the loader would find for the extensions that need ``soname``."""
        found = [p for member in self.needed_by[soname] for p in self._found_by(soname, member)]
        return list(dict.fromkeys(found))

    @property
    def missing(self) -> list[str]:
        """The sonames that some extension needing them would not find."""
        return sorted(s for s, members in self.needed_by.items() if not all(self._found_by(s, m) for m in members))

    def cuda_majors(self) -> set[int]:
        """The CUDA runtime majors the extensions link to (libcudart.so.NN), e.g. {13}."""
        return {int(m.group(1)) for s in self.needed_by if (m := re.fullmatch(r"libcudart\.so\.(\d+)", s))}

    def table(self) -> str:
        """One line per soname, missing ones first: where it is found (or MISSING, and why)."""
        width = max((len(s) for s in self.needed_by), default=0)
        lines = []
        for soname in sorted(self.needed_by, key=lambda s: (s not in self.missing, s)):
            found = "; ".join(f"{p.by}" + (f" in {p.folder}/" if p.folder else "") for p in self.loadable(soname))
            if soname in self.missing:
                elsewhere = [f"{p.by} in {p.folder}/" for p in self.providers[soname]]
                found = "MISSING: " + (f"not in a folder torch is known to load from ({'; '.join(elsewhere)})"
                                       if elsewhere else "no package read has it")
                if self.unreadable:
                    found += f" (unread, not on PyPI: {', '.join(self.unreadable)})"
            lines.append(f"  {soname:<{width}}  {found}   [needed by {len(self.needed_by[soname])}]")
        return "\n".join(lines)


def link_report(needs: dict[str, DynamicInfo], index: dict[str, list[Provider]], search_path: list[str],
                python: tuple[int, ...], unreadable: list[str] = ()) -> LinkReport:
    """Match the DT_NEEDED of every extension loadable on ``python`` against ``index``."""
    needed_by: dict[str, list[str]] = {}
    own_path: dict[str, list[str]] = {}
    skipped = []
    for member, info in needs.items():
        if not for_this_python(member, python):
            skipped.append(member)
            continue
        origin = posixpath.dirname(member)
        own_path[member] = [posixpath.normpath(p.replace("$ORIGIN", origin)) for p in info.runpath]
        for soname in info.needed:
            needed_by.setdefault(soname, []).append(member)
    return LinkReport(needed_by, {s: index.get(s, []) for s in needed_by}, search_path, own_path, skipped,
                      list(unreadable))
