"""One verdict on a Colab install plan: what pip would install, and whether vLLM could load.

``check_plans(plans)`` resolves each plan against stubs of Colab's image (``resolve.py``),
reads the real requirements of the image packages the result leans on and, where one of
them is not met, writes them into the stubs and resolves again (``closure.py``); then it reads
which libraries vLLM's extensions link to and who provides each (``links.py``). Plans are
checked side by side and share what was read (the vLLM wheel is read once).

Example::

    >>> result = check_plans([Path("requirements/colab.txt")])[0]     # doctest: +SKIP
    >>> result.torch, result.torch_cuda, result.vllm_cuda, result.ok  # doctest: +SKIP
    ('2.11.0', 13, {13}, True)
"""

from __future__ import annotations

import re
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from colab_plan.closure import Closure, kept_closure
from colab_plan.image import ALSO_KEPT, KERNEL_PACKAGES, ColabImage, load_image, norm
from colab_plan.links import LinkReport, link_report, provider_index, torch_library_path
from colab_plan.resolve import StubEnvironment
from colab_plan.wheel_elf import shared_library_needs


def torch_cuda_major(version: str, requires: tuple[str, ...]) -> int | None:
    """The CUDA major a torch build is for: its local tag (``+cu128``) or the CUDA runtime it requires."""
    if match := re.search(r"\+cu(\d+)\d$", version):
        return int(match.group(1))
    for line in requires:
        if match := re.match(r"(?:cuda-toolkit\[[^\]]*\]|nvidia-cuda-runtime)\s*==\s*(\d+)\.", line):
            return int(match.group(1))
        if match := re.match(r"nvidia-cuda-runtime-cu(\d+)", line):
            return int(match.group(1))
    return None


@dataclass
class PlanCheck:
    """What a plan does to Colab's image and whether vLLM's extensions find their libraries."""

    plan: str
    installs: dict[str, str]  # every package pip would install: name -> version
    changed: dict[str, tuple[str, str]]  # image packages pip would replace: name -> (image, plan)
    torch: str | None  # the torch after the install
    torch_origin: str  # "plan" (from PyPI) or "image" (Colab's kept)
    torch_cuda: int | None
    vllm: str | None
    links: LinkReport | None
    closure: Closure
    rounds: int  # resolutions until the kept packages' requirements were met (or gave up)
    image_source: str
    notes: list[str] = field(default_factory=list)

    @property
    def vllm_cuda(self) -> set[int]:
        """CUDA majors vLLM's extensions link to (from their DT_NEEDED libcudart.so.NN)."""
        return self.links.cuda_majors() if self.links else set()

    @property
    def kernel_changed(self) -> dict[str, tuple[str, str]]:
        """Colab's kernel packages the plan would replace (must be none)."""
        return {n: v for n, v in self.changed.items() if n in KERNEL_PACKAGES}

    @property
    def also_kept_changed(self) -> dict[str, tuple[str, str]]:
        """ipywidgets and psutil, which the course keeps at Colab's versions."""
        return {n: v for n, v in self.changed.items() if n in ALSO_KEPT}

    @property
    def missing(self) -> list[str]:
        """Sonames vLLM's extensions need that nothing after the install provides."""
        return self.links.missing if self.links else []

    @property
    def ok(self) -> bool:
        """vLLM installed, torch on its CUDA major, no kernel package touched, every library found."""
        return (self.vllm is not None and self.vllm_cuda == {self.torch_cuda} and not self.kernel_changed
                and not self.also_kept_changed and not self.missing and not self.closure.unmet)

    def report(self) -> str:
        """A readable summary, with every needed library and its providers."""
        changed = ", ".join(f"{n} {a} -> {b}" for n, (a, b) in sorted(self.changed.items())) or "none"
        lines = [
            f"plan {self.plan}, against Colab's image ({self.image_source}); {self.rounds} resolution(s)",
            f"  pip would install {len(self.installs)} packages; {len(self.changed)} of the image's change: {changed}",
            (f"  torch {self.torch} ({self.torch_origin}): CUDA {self.torch_cuda}; "
             f"vllm {self.vllm}: extensions link CUDA {sorted(self.vllm_cuda) or 'none'}"),
            "  Colab's kernel packages: " + (", ".join(f"{n} {a} -> {b}" for n, (a, b) in self.kernel_changed.items())
                                             or "all left as they are"),
            "  ipywidgets, psutil: " + (", ".join(f"{n} {a} -> {b}" for n, (a, b) in self.also_kept_changed.items())
                                        or "left as they are"),
        ]
        if self.closure.unreadable:
            lines.append("  kept from the image, not on PyPI (their files unchecked): "
                         + ", ".join(f"{n} {v}" for n, v in sorted(self.closure.unreadable.items())))
        lines += [f"  unmet after the install: {u}" for u in self.closure.unmet]
        if self.links:
            lines.append(f"  libraries vLLM's extensions need ({len(self.links.needed_by)}), and who provides them:")
            lines.append(self.links.table())
            if self.links.skipped:
                lines.append(f"  not loaded on this Python, not checked: {', '.join(self.links.skipped)}")
        lines += [f"  note: {n}" for n in self.notes]
        lines.append("  verdict: " + ("OK" if self.ok else "BROKEN"))
        return "\n".join(lines)


def _settle(stubs: StubEnvironment, plan: Path, image: ColabImage, max_rounds: int) -> tuple[list, Closure, int]:
    """Resolve, and again with real metadata in the stubs, until the kept packages' requirements hold."""
    for round_ in range(1, max_rounds + 1):
        installs = stubs.resolve(plan)
        closure = kept_closure(installs, image)
        if not closure.unmet:
            break
        fed = [stubs.give_metadata(p.name, p.version, p.requires) for p in closure.kept.values() if p.requires]
        if not any(fed):
            break  # nothing new to tell pip: what is unmet stays unmet
    return installs, closure, round_


def _verdict(plan: Path, installs: list[dict], closure: Closure, rounds: int, image: ColabImage) -> PlanCheck:
    chosen = {norm(i["metadata"]["name"]): i for i in installs}
    versions = {name: item["metadata"]["version"] for name, item in chosen.items()}
    changed = {n: (image.packages[n], v) for n, v in versions.items() if n in image.packages and image.packages[n] != v}
    if "torch" in chosen:
        torch, origin = versions["torch"], "plan"
        torch_cuda = torch_cuda_major(torch, tuple(chosen["torch"]["metadata"].get("requires_dist", ())))
    else:
        torch, origin = image.packages.get("torch"), "image"
        torch_cuda = torch_cuda_major(torch, ()) if torch else None
    links = None
    if "vllm" in chosen:
        packages = {**closure.kept, **closure.installed}
        needs = shared_library_needs(chosen["vllm"]["download_info"]["url"])
        path = torch_library_path(packages.get("torch"))
        unread = [f"{n} {v}" for n, v in sorted(closure.unreadable.items())]
        links = link_report(needs, provider_index(list(packages.values()), image), path, image.python, unread)
    result = PlanCheck(str(plan), versions, changed, torch, origin, torch_cuda, versions.get("vllm"), links,
                       closure, rounds, image.source)
    if links is not None and not links.search_path:
        result.notes.append(f"torch {torch} is not on PyPI: its torch/lib and RUNPATH cannot be read, so no "
                            "library of it or on its path counts as provided")
    return result


def check_plans(plans: list[Path], image: ColabImage | None = None, max_rounds: int = 3,
                colab_pip: bool = False) -> list[PlanCheck]:
    """Check each requirements file as Colab's setup cell would install it (PyPI access needed).

    ``colab_pip`` resolves with the image's own pip version instead of the one running here.
    """
    image = image or load_image()

    def one(plan: Path) -> PlanCheck:
        # Each plan goes on to its libraries as soon as it is resolved; what plans share is read once.
        return _verdict(Path(plan), *_settle(stubs, Path(plan).resolve(), image, max_rounds), image)

    with tempfile.TemporaryDirectory(prefix="colab-plan-") as work:
        stubs = StubEnvironment(image, Path(work), colab_pip=colab_pip)
        with ThreadPoolExecutor(len(plans)) as pool:
            return list(pool.map(one, plans))
