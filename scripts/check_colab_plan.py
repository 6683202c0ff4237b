"""Ask pip's own resolver what an install plan would do on Colab's GPU image, without Colab.

    python3 scripts/check_colab_plan.py requirements/colab.txt [OTHER_PLAN ...] [--image tests/data/colab-image]

For each plan (a requirements file, as Colab's setup cell installs it) it prints which torch and
vLLM pip would install on Colab's published image and their CUDA majors (vLLM's read from the
libcudart its extensions link to), which of the image's packages would change, and every library
vLLM's compiled extensions need with the package (or Ubuntu package, or driver) that provides it
on the loader's path. It exits 1 if a plan changes one of Colab's kernel packages (ipykernel,
ipython, jupyter_client, tornado, pyzmq, notebook), ipywidgets or psutil, leaves torch and vLLM on
different CUDA majors, or leaves a library unprovided. Needs PyPI; reads wheels over HTTP Range
requests and never downloads a whole one. About one to two minutes. The work is done by the
``colab_plan`` package next to this script (its ``__init__`` lists the modules).

Found with it (2026-12-01): `torch==2.11.0` keeps Colab's `2.11.0+cu128` (a local version
satisfies `==`) under vLLM 0.26's CUDA 13 extensions; `torch===2.11.0` (arbitrary equality)
makes pip take PyPI's 2.11.0, a CUDA 13 build, and changes no kernel package.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the colab_plan package beside this file

from colab_plan.check import check_plans  # noqa: E402
from colab_plan.image import DEFAULT_FOLDER, load_image  # noqa: E402
from colab_plan.resolve import PipFailed  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plans", type=Path, nargs="+", help="requirements files: what the Colab setup cell installs")
    parser.add_argument("--image", type=Path, default=DEFAULT_FOLDER,
                        help="folder with Colab's pip-freeze-gpu.txt, apt-list-gpu.txt, os-info-gpu.txt")
    parser.add_argument("--colab-pip", action="store_true",
                        help="resolve with Colab's own pip version (slow where the index has no PEP 658 metadata)")
    args = parser.parse_args()
    try:
        results = check_plans(args.plans, load_image(args.image), colab_pip=args.colab_pip)
    except PipFailed as error:
        print(error, file=sys.stderr)
        return 2
    for result in results:
        print(result.report())
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
