"""What a GPU server's environment gets from helpers.serve.engine_env: the sampler every course GPU run measured."""

import importlib.machinery
import sys
import types

import pytest

from helpers.serve.config import ServerConfig, build_launch
from helpers.serve.engine_env import device_env

SAMPLER = "VLLM_USE_FLASHINFER_SAMPLER"


@pytest.fixture
def flashinfer_installed(monkeypatch):
    """flashinfer importable, as on Colab, where vLLM's GPU wheel brings it (this CPU .venv has none)."""
    module = types.ModuleType("flashinfer")
    module.__spec__ = importlib.machinery.ModuleSpec("flashinfer", None)
    monkeypatch.setitem(sys.modules, "flashinfer", module)
    monkeypatch.delenv(SAMPLER, raising=False)


def test_a_gpu_server_runs_vllms_own_sampler_even_where_flashinfer_is_installed(flashinfer_installed):
    assert device_env("cuda") == {SAMPLER: "0"}
    launch = build_launch(ServerConfig(port=8000), device="cuda", model="/m", served_name="m")
    assert launch.env[SAMPLER] == "0"


def test_a_gpu_server_runs_vllms_own_sampler_without_flashinfer(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import flashinfer fails, find_spec finds nothing
    monkeypatch.delenv(SAMPLER, raising=False)
    assert device_env("cuda") == {SAMPLER: "0"}


def test_the_users_own_sampler_setting_is_kept(flashinfer_installed, monkeypatch):
    monkeypatch.setenv(SAMPLER, "1")
    assert device_env("cuda") == {SAMPLER: "1"}


def test_a_cpu_server_gets_no_sampler_setting(flashinfer_installed, monkeypatch):
    monkeypatch.delenv("VLLM_COURSE_CPU_ISA", raising=False)
    env = device_env("cpu")
    assert SAMPLER not in env
    assert set(env) - {"LD_PRELOAD"} == {"VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_OMP_THREADS_BIND"}
