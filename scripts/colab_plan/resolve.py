"""Ask pip's own resolver what an install plan would do on Colab's GPU image, without Colab.

``StubEnvironment`` is a throw-away venv holding an empty "stub" distribution for every
package of Colab's published ``pip freeze`` (so pip counts them as installed, as on Colab) and
Colab's own pip version. ``resolve(plan)`` runs ``pip install --dry-run --report`` in it for
CPython 3.13 on manylinux x86_64, with markers read as Colab's Python reads them
(``pip_as_colab.py``), and returns pip's ``install`` list. Stubs declare no requirements until
``give_metadata`` writes a package's real Requires-Dist into its stub (see ``check.py``).
pip is the one running this (or, with ``colab_pip``, the image's own version).
Only metadata is fetched (``fast-deps`` reads it over Range requests when the index has no
PEP 658 file), never a whole wheel.

Example::

    >>> stubs = StubEnvironment(load_image(), Path("/tmp/colab-stubs"))   # doctest: +SKIP
    >>> [i["metadata"]["version"] for i in stubs.resolve(Path("plan.txt"))
    ...  if i["metadata"]["name"] == "torch"]                              # doctest: +SKIP
    ['2.11.0']
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import venv
from pathlib import Path

from colab_plan.image import ColabImage
from colab_plan.remote import colab_tags, find_wheel, open_remote_zip

WRAPPER = Path(__file__).with_name("pip_as_colab.py")
# pip's options as a plain `pip install` on Colab has them: none from this machine's config
# files or PIP_* variables (here: a CPU torch constraint and local wheel folders), PyPI only.
# Certificates, the timeout and the cache are kept: they change nothing pip picks.
PIP_SETTINGS_KEPT = ("PIP_CERT", "PIP_CLIENT_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_CACHE_DIR", "PIP_NO_CACHE_DIR")


class PipFailed(RuntimeError):
    """pip could not resolve the plan; the message holds its last error lines."""


def pip_env() -> dict[str, str]:
    """This process's environment without pip settings that change what pip would pick."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in PIP_SETTINGS_KEPT}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_INPUT": "1", "PYTHONNOUSERSITE": "1"}


def _dist_dir(name: str, version: str) -> str:
    return f"{re.sub(r'[-.]+', '_', name)}-{version}.dist-info"


class StubEnvironment:
    """A venv that looks, to pip, like Colab's image: stubs of its packages and its pip."""

    def __init__(self, image: ColabImage, work: Path, colab_pip: bool = False):
        self.image, self.work = image, work
        venv.create(work / "venv", with_pip=False, symlinks=True)
        self.python = work / "venv" / "bin" / "python"
        purelib = subprocess.run([str(self.python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        self.site = Path(purelib)
        self.with_metadata: set[str] = set()
        for name, version in image.packages.items():
            if name != "pip":
                self._write_stub(name, version, ())
        self._install_pip(image.packages.get("pip") if colab_pip else None)

    def _write_stub(self, name: str, version: str, requires: tuple[str, ...]) -> None:
        # Exactly what pip reads of an installed distribution: its name, version and requirements.
        folder = self.site / _dist_dir(name, version)
        folder.mkdir(parents=True, exist_ok=True)
        # The extras its requirements name (an extra that requires nothing adds nothing to resolve).
        extras = sorted({m.group(1) for line in requires if (m := re.search(r"extra\s*==\s*['\"]([^'\"]+)", line))})
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        lines += [f"Requires-Dist: {line}" for line in requires] + [f"Provides-Extra: {e}" for e in extras]
        # Written aside and renamed: another plan's pip may be reading the stubs at this moment.
        (folder / "METADATA.new").write_text("\n".join(lines) + "\n")
        os.replace(folder / "METADATA.new", folder / "METADATA")
        (folder / "INSTALLER").write_text("stub\n")
        (folder / "RECORD").write_text("")

    def give_metadata(self, name: str, version: str, requires: tuple[str, ...]) -> bool:
        """Write a package's real requirements into its stub; False if it already had them."""
        if name in self.with_metadata:
            return False
        self.with_metadata.add(name)
        self._write_stub(name, version, requires)
        return True

    def _install_pip(self, version: str | None) -> None:
        """Colab's pip, unpacked from its wheel on PyPI; without a version, the pip running here.

        Both read markers as Colab's (``pip_as_colab``). The pip running here is the default: where
        the index has no PEP 658 metadata files, pip 24 reads each wheel's metadata over many
        small Range requests (2-3 minutes for this plan, against one for a recent pip).
        """
        wheel = find_wheel("pip", version, colab_tags(self.image.python[:2])) if version else None
        if wheel is None:
            import pip
            (self.site / "pip").symlink_to(Path(pip.__file__).parent, target_is_directory=True)
            return
        archive, _ = open_remote_zip(wheel.url)
        with archive:
            archive.extractall(self.site)

    def resolve(self, plan: Path, timeout_s: int = 600) -> list[dict]:
        """pip's ``install`` report items for ``plan`` (a requirements file), as Colab's pip would pick."""
        report = self.work / f"report-{plan.stem}-{os.getpid()}-{id(plan)}.json"
        python = f"{self.image.python[0]}.{self.image.python[1]}"
        abi = f"cp{self.image.python[0]}{self.image.python[1]}"
        platforms = sorted({str(tag.platform) for tag in colab_tags(self.image.python[:2], self.image.glibc[1])})
        command = [str(self.python), str(WRAPPER), json.dumps(self.image.marker_environment()),
                   "install", "--dry-run", "--quiet", "--report", str(report), "--use-feature=fast-deps",
                   "--index-url", "https://pypi.org/simple", "--only-binary=:all:",
                   "--python-version", python, "--implementation", "cp", "--abi", abi, "--abi", "abi3",
                   "--abi", "none", *[a for p in platforms for a in ("--platform", p)], "-r", str(plan)]
        done = subprocess.run(command, env=pip_env(), capture_output=True, text=True, timeout=timeout_s, check=False)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if not line.startswith("WARNING")]
            raise PipFailed("pip could not resolve the plan:\n" + "\n".join(errors[-15:]))
        items = json.loads(report.read_text())["install"]
        report.unlink()
        return items

