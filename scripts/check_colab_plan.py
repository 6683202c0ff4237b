"""Ask pip's own resolver what an install plan would do on Colab's GPU image, without Colab.

    python3 scripts/check_colab_plan.py PLAN.txt [--freeze ../shared/colab/pip-freeze-gpu.txt]

It builds an empty "stub" distribution for every package of Colab's published `pip freeze`,
installs the stubs into a throw-away venv (so pip sees them as already installed, exactly as it
would on Colab), then runs `pip install --dry-run --report` for CPython 3.13 on manylinux x86_64
(Colab's Python and platform). It prints which torch and vLLM would be installed, with the CUDA
major version that torch's wheel asks for, and every package of Colab's kernel (ipykernel,
ipython, jupyter_client, tornado, pyzmq, notebook) the plan would change; it exits 1 if the
plan changes one of those or leaves torch and vLLM on different CUDA majors. Needs PyPI (pip's
metadata only: no wheel is downloaded). About a minute.

Found with it (2026-12-01): `torch==2.11.0` keeps Colab's `2.11.0+cu128` (a local version
satisfies `==`), under vLLM 0.26's default CUDA 13 build; `torch===2.11.0` (arbitrary equality)
makes pip take PyPI's 2.11.0, a CUDA 13 build, and changes no kernel package.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import venv
import zipfile
from pathlib import Path

KERNEL_PACKAGES = ("ipykernel", "ipython", "jupyter-client", "tornado", "pyzmq", "notebook")
VLLM_CUDA_MAJOR = {"0.26.0": 13}  # vLLM's default PyPI wheel is built for CUDA 13 since 0.20
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(5, 36)] + [
    "manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64", "any"]


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_freeze(path: Path) -> dict[str, str]:
    """name -> version for each ``name==version`` line (URL and comment lines skipped)."""
    pins = {}
    for line in path.read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.strip().split("==", 1)
            pins[norm(name)] = version
    return pins


def make_stub(folder: Path, name: str, version: str) -> Path:
    """An empty wheel that only declares NAME==VERSION (pip then counts it as installed)."""
    dist = re.sub(r"[-.]+", "_", name)
    info = f"{dist}-{version}.dist-info"
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        wheel.writestr(f"{info}/WHEEL",
                       "Wheel-Version: 1.0\nGenerator: stub\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/RECORD", "")
    return path


def resolve(plan: Path, image: dict[str, str], work: Path) -> list[dict]:
    """pip's install report for the plan, in a venv holding the image's packages as stubs."""
    stubs = work / "stubs"
    stubs.mkdir()
    wheels = [make_stub(stubs, name, version) for name, version in image.items()
              if name not in ("pip", "setuptools", "wheel")]
    venv.create(work / "venv", with_pip=True)
    python = str(work / "venv" / "bin" / "python")
    # This machine's own pip settings (a CPU torch cap, local wheel folders) are not Colab's.
    env = {**os.environ, "PIP_CONSTRAINT": "", "PIP_FIND_LINKS": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    # pip's warnings about this machine's own index folders are noise here; its errors are printed.
    quiet = {"check": True, "env": env, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "text": True}
    subprocess.run([python, "-m", "pip", "install", "-q", "pip>=24"], **quiet)  # platform options with --dry-run
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", *map(str, wheels)], **quiet)
    report = work / "report.json"
    platforms = [arg for tag in PLATFORMS for arg in ("--platform", tag)]
    subprocess.run([python, "-m", "pip", "install", "--dry-run", "-q", "--report", str(report),
                    "--python-version", "3.13", "--implementation", "cp", "--abi", "cp313", "--abi", "abi3",
                    "--abi", "none", *platforms, "--only-binary=:all:", "-r", str(plan)], **quiet)
    return json.loads(report.read_text())["install"]


def cuda_major(metadata: dict) -> int | None:
    """The CUDA major a torch wheel asks for, from its Requires-Dist (cuda-toolkit or nvidia-*-cuXX)."""
    for requirement in metadata.get("requires_dist", []):
        if match := re.match(r"cuda-toolkit\[.*\]==(\d+)\.", requirement):
            return int(match.group(1))
        if match := re.match(r"nvidia-cuda-runtime-cu(\d+)", requirement):
            return int(match.group(1))
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plan", type=Path, help="a requirements file: what the Colab setup cell would install")
    parser.add_argument("--freeze", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "colab"
                        / "pip-freeze-gpu.txt", help="Colab's published pip freeze")
    args = parser.parse_args()
    image = read_freeze(args.freeze)
    with tempfile.TemporaryDirectory() as work:
        try:
            installs = resolve(args.plan.resolve(), image, Path(work))
        except subprocess.CalledProcessError as error:
            errors = [line for line in error.stderr.splitlines() if not line.startswith("WARNING")]
            print("pip could not resolve the plan:\n" + "\n".join(errors[-15:]), file=sys.stderr)
            return 2
    chosen = {norm(item["metadata"]["name"]): item["metadata"] for item in installs}
    torch_meta = chosen.get("torch")
    torch_cuda = cuda_major(torch_meta) if torch_meta else int(image["torch"].split("+cu")[1][:2])
    torch_version = torch_meta["version"] if torch_meta else f"{image['torch']} (kept from the image)"
    vllm_version = chosen["vllm"]["version"] if "vllm" in chosen else image.get("vllm")
    vllm_cuda = VLLM_CUDA_MAJOR.get(str(vllm_version))
    changed = {name: chosen[name]["version"] for name in KERNEL_PACKAGES if name in chosen}
    print(f"{len(installs)} packages would be installed or changed")
    print(f"torch {torch_version}: CUDA {torch_cuda}; vllm {vllm_version}: CUDA {vllm_cuda or 'unknown'}")
    print("Colab's kernel packages: " + (", ".join(f"{n} {image.get(n)} -> {v}" for n, v in changed.items())
                                         or "all left as they are"))
    return 0 if torch_cuda == vllm_cuda and not changed else 1


if __name__ == "__main__":
    sys.exit(main())
