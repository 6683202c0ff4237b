"""Which of Colab's own packages a plan leans on, and whether they are still satisfied after it.

pip installs only what a plan lacks; the rest of what vLLM needs is whatever the image already
has (torch itself, when a plan keeps Colab's). ``kept_closure`` follows Requires-Dist from the
packages the plan installs into the image's packages, through their own requirements (their
metadata is read from PyPI, PEP 658), as Colab's Python reads the markers. The packages found
are where the libraries check looks besides the plan's own wheels; a requirement of theirs that
the environment after the install does not meet is reported (the resolver saw the image as
empty stubs, so it could not see those).

Example::

    >>> closure = kept_closure(installs, image)                 # doctest: +SKIP
    >>> closure.kept["numpy"].version, closure.unreadable       # doctest: +SKIP
    ('2.1.3', {'torch': '2.11.0+cu128'})
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from email.parser import HeaderParser

from packaging.requirements import InvalidRequirement, Requirement

from colab_plan.image import ColabImage, norm
from colab_plan.remote import WheelFile, colab_tags, core_metadata, find_wheel


@dataclass(frozen=True)
class Package:
    """One distribution of the environment after the install: from the plan or kept from the image."""

    name: str
    version: str
    wheel: WheelFile | None  # None: not on PyPI (a local build such as torch 2.11.0+cu128)
    requires: tuple[str, ...]
    origin: str  # "install" or "image"


@dataclass
class Closure:
    """The image packages the plan's packages lean on, and requirements the final environment breaks."""

    installed: dict[str, Package] = field(default_factory=dict)  # what the plan installs
    kept: dict[str, Package] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)  # kept, but no wheel of it on PyPI
    unmet: list[str] = field(default_factory=list)  # "pkg version requires X: environment has Y"


def _requirements(lines: tuple[str, ...], extras: set[str], env: dict[str, str]) -> list[Requirement]:
    """The requirements that apply on Colab's Python with these extras requested."""
    chosen = []
    for line in lines:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in extras | {""}):
            chosen.append(req)
    return chosen


def _image_package(name: str, version: str, image: ColabImage) -> Package:
    wheel = find_wheel(name, version, colab_tags(image.python[:2], image.glibc[1]))
    if wheel is None:
        return Package(name, version, None, (), "image")
    metadata = HeaderParser().parsestr(core_metadata(wheel))
    return Package(name, version, wheel, tuple(metadata.get_all("Requires-Dist") or ()), "image")


def kept_closure(installs: list[dict], image: ColabImage, workers: int = 16) -> Closure:
    """Follow requirements from pip's ``install`` report items into the packages the image keeps."""
    env = image.marker_environment()
    final = {**image.packages}
    packages: dict[str, Package] = {}
    extras: dict[str, set[str]] = {}
    for item in installs:
        meta, url = item["metadata"], item["download_info"]["url"]
        name = norm(meta["name"])
        final[name] = meta["version"]
        wheel = WheelFile(url.rsplit("/", 1)[-1], url, None)
        packages[name] = Package(name, meta["version"], wheel, tuple(meta.get("requires_dist", ())), "install")
        extras[name] = set(item.get("requested_extras") or ())
    closure, unmet = Closure(installed=dict(packages)), set()
    queue = deque(packages)
    with ThreadPoolExecutor(workers) as pool:
        while queue:
            # One ring of the walk at a time, the new packages' metadata read in parallel.
            ring, wanted = list(dict.fromkeys(queue)), set()
            queue.clear()
            for name in ring:
                package = packages[name]
                for req in _requirements(package.requires, extras.get(name, set()), env):
                    dep = norm(req.name)
                    new_extras = set(req.extras) - extras.setdefault(dep, set())
                    extras[dep] |= new_extras
                    if dep not in final:
                        unmet.add(f"{name} {package.version} requires {req}: not installed")
                    elif not req.specifier.contains(final[dep], prereleases=True):
                        unmet.add(f"{name} {package.version} requires {req}: has {final[dep]}")
                    elif dep not in packages:
                        wanted.add(dep)
                    elif new_extras:
                        queue.append(dep)  # seen before without these extras: read it again
            for package in pool.map(lambda n: _image_package(n, final[n], image), sorted(wanted)):
                packages[package.name] = closure.kept[package.name] = package
                if package.wheel is None:
                    closure.unreadable[package.name] = package.version
                queue.append(package.name)
    closure.unmet = sorted(unmet)
    return closure
