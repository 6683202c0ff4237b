"""The helpers on Google Colab's own ipywidgets and psutil (issue 14).

Colab's GPU image has ipywidgets 7.7.1 and psutil 5.9.5 (with the IPython, ipykernel and traitlets
that go with them) and the course does not upgrade them there, so its animations and its process
handling must work with those. This test builds a second, small environment with exactly the
versions of Colab's published pip freeze (``tests/data/colab-image/pip-freeze-gpu.txt``), installs the course
into it (``--no-deps -e .``, as Colab's setup cell does), and runs there the tests that build each
animation and step its frames, and those that end plain processes' sessions, run the watchdog and
read listening sockets. :mod:`tests.strict_widgets` makes an ipywidgets API that 7.7.1 lacks fail.

The environment lives in ``build/colab-versions-venv`` and is reused while its pins and Python are
the same. Building it takes about 60 s on 2 cores (wheels only, about 60 MB from PyPI; 45 s from
pip's cache); the run there about 35 s.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import build_dir

ROOT = Path(__file__).resolve().parent.parent
# Where the course's checkout keeps Colab's published image lists (scripts/check_colab_plan.py reads them too).
COLAB_DIRS = (ROOT / "tests" / "data" / "colab-image",)  # a copy of ../shared/colab: googlecolab/backend-info a724079
VENV = build_dir() / "colab-versions-venv"
# What the brief names, then what those import, and pytest's own: installed with --no-deps, so the
# environment holds these and nothing else, each at Colab's version. Colab's image has no comm
# (ipykernel 6.17.1 predates it) and no jedi (IPython 7 imports it only when it is there).
PACKAGES = (
    "ipywidgets", "widgetsnbextension", "jupyterlab-widgets", "traitlets", "ipython", "ipykernel", "psutil",
    "matplotlib", "numpy", "pytest",
    "ipython-genutils", "backcall", "decorator", "pickleshare", "prompt-toolkit", "wcwidth", "pygments",
    "pexpect", "ptyprocess", "matplotlib-inline", "debugpy", "jupyter-client", "jupyter-core", "entrypoints",
    "nest-asyncio", "pyzmq", "tornado", "platformdirs", "python-dateutil", "six", "packaging",
    "contourpy", "cycler", "fonttools", "kiwisolver", "pillow", "pyparsing",
    "pluggy", "iniconfig", "setuptools",  # setuptools: builds the course's editable install
)
# Each animation built and stepped; sessions ended, the watchdog, listens_on, on plain processes.
SELECTION = ("tests/test_paged_kv_view.py", "tests/test_batching_view.py", "tests/test_process_group.py")


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def colab_file(name: str) -> Path:
    for folder in COLAB_DIRS:
        if (folder / name).is_file():
            return folder / name
    pytest.fail(f"Colab's published {name} is in none of {[str(d) for d in COLAB_DIRS]}")


def colab_pins() -> list[str]:
    """``name==version`` for each of PACKAGES, the version read from Colab's pip freeze."""
    image = {}
    for line in colab_file("pip-freeze-gpu.txt").read_text().splitlines():
        name, sep, version = line.strip().partition("==")
        if sep:
            image[_normal(name)] = version
    missing = [p for p in PACKAGES if p not in image]
    assert not missing, f"not in Colab's freeze any more: {missing}"
    return [f"{p}=={image[p]}" for p in PACKAGES]


def colab_python() -> str:
    """An interpreter of Colab's Python minor version where this machine has one (pyenv's, or on
    PATH), else the one running the tests: the helpers run on Colab's Python there, and every pin
    has wheels for both."""
    minor = re.search(r"Python (3\.\d+)", colab_file("os-info-gpu.txt").read_text()).group(1)
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    installed = sorted(glob.glob(f"{pyenv}/versions/{minor}.*/bin/python{minor}"))
    for candidate in [shutil.which(f"python{minor}"), *installed]:
        if candidate and subprocess.run([candidate, "-c", ""], capture_output=True, check=False).returncode == 0:
            return candidate  # a pyenv shim that is not switched on fails here, and is skipped
    return sys.executable


def _run(argv: list[str], timeout: float) -> None:
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"{' '.join(argv[:6])} ... failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def colab_venv() -> Path:
    """``build/colab-versions-venv`` with Colab's pins and the course installed; built unless a
    finished one has the same pins and Python (its ``pins.json`` is written last)."""
    pins, python = colab_pins(), colab_python()
    version = subprocess.run([python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True,
                             check=True).stdout
    wanted = {"python": version.strip(), "pins": pins}
    stamp, venv_python = VENV / "pins.json", VENV / "bin" / "python"
    if stamp.is_file() and venv_python.exists() and json.loads(stamp.read_text()) == wanted:
        return venv_python
    shutil.rmtree(VENV, ignore_errors=True)
    _run([python, "-m", "venv", "--without-pip", str(VENV)], timeout=60)
    # This venv's pip installs into that one (pip >= 22.3), so the new venv needs no pip of its own.
    # The machine's pip settings stay: its local index and find-links only offer wheels, and with
    # exact pins and --no-deps the same versions come out wherever they are found.
    pip = [sys.executable, "-m", "pip", "--python", str(venv_python), "install", "--no-deps", "-q"]
    _run([*pip, "--only-binary=:all:", *pins], timeout=240)
    _run([*pip, "--no-build-isolation", "--no-index", "-e", str(ROOT)], timeout=60)
    stamp.write_text(json.dumps(wanted))
    return venv_python


@pytest.mark.network  # builds its environment from PyPI's wheels (pip's cache, once built: none)
def test_the_helpers_work_with_colabs_ipywidgets_and_psutil():
    venv_python = colab_venv()
    report = subprocess.run(
        [str(venv_python), "-c", ("import importlib.metadata as m, sys; "
                                  "print(sys.version.split()[0], *(f'{p}=={m.version(p)}' for p in sys.argv[1:]))"),
         *PACKAGES],
        capture_output=True, text=True, check=True).stdout.split()
    assert report[1:] == colab_pins(), "the environment does not hold Colab's versions"
    print(f"Python {report[0]}:", " ".join(report[1:]))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    run = subprocess.run([str(venv_python), "-m", "pytest", "-p", "tests.strict_widgets", "-p", "no:cacheprovider",
                          "-q", "--disable-warnings", *SELECTION],  # warnings still turn into errors; no summary
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, f"on Colab's versions:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
